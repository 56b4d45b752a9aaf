import type { ClaimResult } from '@mrtr/core/store';
import { fail, ok } from '../assert.js';
import { claimStatus, type FullStore, type StoreSuite, sleep, storeTime } from './context.js';

/** A lease no test outlives (ms). */
export const LONG_LEASE_MS = 60_000;

/** The timings of the lease tests: the short lease that lapses, and an expiry far past every lease. */
export interface LeaseTimes {
  readonly shortMs: number;
  /** An expiry for a claim made now, far past any lease of the test. */
  exp(): Promise<number>;
  /** Waits until the lease of `id`'s claim of `fp` lapsed: the fake clock is advanced, a server clock polled. */
  lapse(id: string, exp: number, fp: string): Promise<void>;
}

/**
 * The lease timings on `store`. With the suite's fake clock a lease lapses when the clock is advanced past it; on a
 * server's clock (Redis, PostgreSQL) the lease is short (`leaseMs`, default 250) and the test polls identical claims
 * until they answer `unknown` (bounded: 30 s): nothing depends on how fast the machine is.
 */
export function leaseTimes(suite: StoreSuite, store: FullStore): LeaseTimes {
  const { clock } = suite;
  const shortMs = clock ? 1000 : (suite.options.leaseMs ?? 250);
  return {
    shortMs,
    exp: async () => (await storeTime(suite, store)) + 600_000,
    async lapse(id, exp, fp) {
      if (clock) {
        await clock.advance(shortMs + 1);
        return;
      }
      const deadline = Date.now() + 30_000;
      for (let i = 0; i < 1000 && Date.now() < deadline; i++) {
        const found = await store.claim(id, exp, fp);
        if (found.status === 'unknown') return;
        ok(found.status === 'pending', `while its lease runs an identical claim is pending (got ${claimStatus(found)})`);
        await sleep(Math.min(50, Math.max(1, (found.leaseLeftMs ?? 50) + 1)));
      }
      fail(`the lease of ${id} never lapsed (polled 30 s)`);
    },
  };
}

export const leftOf = (r: ClaimResult): number =>
  r.status === 'pending' && typeof r.leaseLeftMs === 'number' ? r.leaseLeftMs : Number.NaN;

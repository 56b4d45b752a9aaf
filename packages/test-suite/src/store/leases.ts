import type { ClaimResult } from '@mrtr/core';
import { fail, ok } from '../assert.js';
import { leaseFaultTests } from './lease-faults.js';
import { guardFaultTests } from './guard-faults.js';
import { ownerTests, takeoverTests } from './lease-owners.js';
import {
  capabilityGroup,
  type FullStore,
  type GroupTest,
  newOwner,
  type StoreSuite,
  sleep,
  claimStatus,
  storeTime,
  uniqueId,
} from './context.js';

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

/** A store with `leases`: owners, leases on the store's clock, fences, renew, release, record by owner. */
export function leaseGroup(suite: StoreSuite): void {
  capabilityGroup(suite, 'leases', (test) => {
    claimTests(suite, test);
    takeoverTests(suite, test);
    ownerTests(suite, test);
    leaseFaultTests(suite, test);
    guardFaultTests(suite, test);
  });
}

function claimTests(suite: StoreSuite, test: GroupTest): void {
  test('a first claim has fence 0; identical claims are pending with leaseLeftMs within the lease; others are replays', async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, b, exp] = [uniqueId('lease'), newOwner(), newOwner(), await times.exp()];
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0',
      'a first claim is first with fence 0',
    );
    const pending = await store.claim(id, exp, 'fp');
    const left = leftOf(pending);
    ok(left > 0 && left <= LONG_LEASE_MS, `an identical claim is pending with 0 < leaseLeftMs <= leaseMs (got ${JSON.stringify(pending)})`);
    if (suite.clock) {
      await suite.clock.advance(10_000);
      const later = leftOf(await store.claim(id, exp, 'fp'));
      ok(later > 0 && later <= LONG_LEASE_MS - 10_000, `leaseLeftMs counts down on the store's clock (got ${later})`);
    }
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'pending',
      'a running lease is never reclaimed',
    );
    ok(claimStatus(await store.claim(id, exp, 'other')) === 'replayed', 'another fingerprint is replayed');
  });

  test('once a lease lapses unrecorded, identical claims are unknown; its owner can still record', async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, b, exp] = [uniqueId('lapse'), newOwner(), newOwner(), await times.exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: times.shortMs })) === 'first:0', 'first claim');
    await times.lapse(id, exp, 'fp');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'unknown', 'an identical claim after the lease lapsed is unknown');
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS })) === 'unknown',
      'and without reclaim stays unknown',
    );
    ok(
      claimStatus(await store.claim(id, exp, 'other', { owner: b, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'replayed',
      'another fingerprint is replayed, reclaim or not',
    );
    ok((await store.record(id, 'fp', 'late', { owner: a })) === true, 'a lapsed lease that nobody reclaimed still records');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'recorded:late', 'and identical claims get its outcome');
  });

  test('a claim without owner or without leaseMs holds no lease: it never lapses and is never reclaimed', async (store) => {
    const times = leaseTimes(suite, store);
    const [plain, ownerOnly, probe, a, b] = [uniqueId('plain'), uniqueId('owner-only'), uniqueId('probe'), newOwner(), newOwner()];
    const exp = await times.exp();
    ok(['first', 'first:0'].includes(claimStatus(await store.claim(plain, exp, 'fp'))), 'a claim without owner is first');
    ok(
      ['first', 'first:0'].includes(claimStatus(await store.claim(ownerOnly, exp, 'fp', { owner: a }))),
      'a claim without leaseMs is first',
    );
    // Longer than a lease: a whole short lease of another claim lapses meanwhile (the fake clock: 5 minutes).
    ok(claimStatus(await store.claim(probe, exp, 'fp', { owner: b, leaseMs: times.shortMs })) === 'first:0', 'probe claim');
    await times.lapse(probe, exp, 'fp');
    if (suite.clock) await suite.clock.advance(300_000);
    for (const id of [plain, ownerOnly]) {
      ok(claimStatus(await store.claim(id, exp, 'fp')) === 'pending', 'a claim without a lease stays pending');
      ok(
        claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'pending',
        'and is never reclaimed',
      );
    }
    ok((await store.record(plain, 'fp', 'p')) === true, 'it records as before');
    ok((await store.record(ownerOnly, 'fp', 'o', { owner: a })) === true, 'by its owner');
  });

  test(`32 parallel reclaims of one lapsed claim give exactly one first, with fence 1`, async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, exp] = [uniqueId('reclaim-race'), newOwner(), await times.exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: times.shortMs })) === 'first:0', 'first claim');
    await times.lapse(id, exp, 'fp');
    const owners = Array.from({ length: 32 }, newOwner);
    const results = await Promise.all(owners.map((owner) => store.claim(id, exp, 'fp', { owner, leaseMs: LONG_LEASE_MS, reclaim: true })));
    const shown = results.map(claimStatus);
    const winners = owners.filter((_, i) => shown[i] === 'first:1');
    ok(winners.length === 1, `exactly one reclaim must be first with fence 1 (got ${JSON.stringify(shown)})`);
    ok(shown.filter((s) => s === 'pending').length === 31, `the others find the winner's lease running (got ${JSON.stringify(shown)})`);
    const loser = owners.find((owner) => owner !== winners[0]) as string;
    ok((await store.record(id, 'fp', 'lost', { owner: loser })) === false, 'a loser cannot record');
    ok((await store.record(id, 'fp', 'won', { owner: winners[0] })) === true, 'the winner records');
  });
}

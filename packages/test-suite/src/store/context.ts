import { MrtrError, type ReplayStore } from '@mrtr/core';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { type ClaimResult, type OutcomeStoreLimits, type StoreCapabilities, storeCapabilities } from '@mrtr/core/store';
import { fail, ok } from '../assert.js';
import type { StoreComplianceOptions, StoreFactory } from './options.js';

export const sleep = (ms: number): Promise<void> => new Promise<void>((resolve) => setTimeout(resolve, ms));

let sequence = 0;
/** An id no other test (or run) uses. */
export const uniqueId = (tag: string): string =>
  `${tag}:${process.pid}:${Date.now().toString(36)}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;

/** A fresh owner value (`ClaimOptions.owner`): 22 base64url characters. */
export const newOwner = (): string => base64urlEncode(randomBytes(16));

/** A claim's answer as one string: `first:<fence>`, `pending`, `recorded:<outcome>`, `unknown`, `replayed`. */
export const claimStatus = (r: ClaimResult): string =>
  r.status === 'recorded' ? `recorded:${r.outcome}` : r.status === 'first' && r.fence !== undefined ? `first:${r.fence}` : r.status;

/** A store with every method of the capabilities the groups test. */
export type FullStore = Required<Pick<ReplayStore, 'claim' | 'record' | 'renew' | 'release' | 'time' | 'ledgerEpoch'>> & ReplayStore;

/** What the groups of `storeCompliance` share: its options, its test registration and its stores. */
export interface StoreSuite {
  readonly label: string;
  readonly factory: StoreFactory;
  readonly options: StoreComplianceOptions;
  /** The suite's fake clock, when the store was built on one. */
  readonly clock: StoreComplianceOptions['clock'];
  /** The suite's time: the fake clock's, else this process's. */
  now(): number;
  test(name: string, fn: () => Promise<void>): void;
  /** A store on a fresh namespace (with `limits`), closed afterwards. */
  withStore(fn: (store: ReplayStore, namespace: string) => Promise<void>, limits?: OutcomeStoreLimits): Promise<void>;
  /** Two instances on the given namespaces (one shared namespace by default), closed afterwards. */
  withTwo(fn: (a: ReplayStore, b: ReplayStore) => Promise<void>, namespaces?: [string, string]): Promise<void>;
  /** Concurrent callers of the race tests (at least 64). */
  readonly parallel: number;
  /** Real-time TTL of the expiry tests when there is no fake clock. */
  readonly ttlMs: number;
}

/** The capabilities a group of the suite is about. */
export type GroupCapability = 'clock' | 'leases' | 'epoch';

/** Registers the tests of a group: `(name, fn, limits?)`, each run on a store that declares the group's capability. */
export type GroupTest = (name: string, fn: (store: FullStore, namespace: string) => Promise<void>, limits?: OutcomeStoreLimits) => void;

/**
 * Registers a capability's group, driven by what the store declares (`storeCapabilities`). Declared `false` in the
 * suite's `declares`: only a test that the store does not declare it either (one line says the group is skipped).
 * Declared `true`: every test runs, and fails on a store that does not declare it. Left out: every test reads it off
 * the store, and on a store without it passes at once after one line says why.
 */
export function capabilityGroup(suite: StoreSuite, capability: GroupCapability, register: (test: GroupTest) => void): void {
  const declared = suite.options.declares?.[capability];
  if (declared !== undefined) {
    suite.test(`${capability}: the store declares ${capability}: ${declared}, as the test expects`, () =>
      suite.withStore(async (store) => {
        const has = storeCapabilities(store)[capability];
        ok(has === declared, `the test expects ${capability}: ${declared}, but the store's capabilities say ${has}`);
      }),
    );
  }
  if (declared === false) {
    console.info(`[${suite.label}] ${capability} tests skipped: the store is declared without ${capability}`);
    return;
  }
  let said = false;
  register((name, fn, limits) =>
    suite.test(`${capability}: ${name}`, () =>
      suite.withStore(async (store, namespace) => {
        const caps: StoreCapabilities = storeCapabilities(store);
        if (!caps[capability]) {
          if (declared === true) fail(`the test expects ${capability}: true but the store does not declare it`);
          if (!said) console.info(`[${suite.label}] ${capability} tests pass trivially: the store does not declare ${capability}`);
          said = true;
          return;
        }
        await fn(store as FullStore, namespace);
      }, limits),
    ),
  );
}

/** The store's own time: the suite's fake clock when it has one, else the store's `time()` (or this process's clock). */
export async function storeTime(suite: StoreSuite, store: ReplayStore): Promise<number> {
  if (suite.clock) return suite.clock.now();
  return storeCapabilities(store).clock && store.time ? store.time() : Date.now();
}

/**
 * Lets the store's clock pass `t`: the fake clock is advanced past it, a store's own clock is polled (bounded: 30 s)
 * until it answers later than `t`.
 */
export async function passTime(suite: StoreSuite, store: ReplayStore, t: number): Promise<void> {
  if (suite.clock) {
    const behind = t - suite.clock.now();
    await suite.clock.advance(Math.max(0, behind) + 1);
    return;
  }
  const deadline = Date.now() + 30_000;
  for (let i = 0; i < 3000 && Date.now() < deadline; i++) {
    const at = await storeTime(suite, store);
    if (at > t) return;
    await sleep(Math.min(100, Math.max(1, t - at + 1)));
  }
  fail(`the store's clock never passed ${t} (30 s)`);
}

/**
 * A write in real time on a store with a clock of its own may come after its expiry on a loaded machine, and is then
 * refused (`ERR_STATE_EXPIRED`): `'expired'`, for the test to repeat the round.
 */
export const unlessExpired = <T>(write: Promise<T>): Promise<T | 'expired'> =>
  write.catch((error: unknown) => {
    if (MrtrError.is(error) && error.code === 'ERR_STATE_EXPIRED') return 'expired' as const;
    throw error;
  });

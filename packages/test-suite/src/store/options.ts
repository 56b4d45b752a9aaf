import type { ReplayStore } from '@mrtr/core';
import type { OutcomeStoreLimits } from '@mrtr/core/store';

export interface StoreComplianceOptions {
  /**
   * A fake clock the store was built on. Give one whenever the store judges expiry by an injectable
   * clock. Without it (a backend that expires ids by its own clock, like Redis) the expiry test sleeps in
   * real time for about `ttlMs` twice, and repeats with a doubled TTL when a loaded machine overslept.
   */
  clock?: { now(): number; advance(ms: number): void | Promise<void> };
  /** Real-time TTL for the expiry tests when there is no fake clock. @default 1000 */
  ttlMs?: number;
  /** A store pointed at a backend that does not answer; its consume must reject with ERR_STORE_UNAVAILABLE. */
  unreachable?: () => ReplayStore | Promise<ReplayStore>;
  /** Concurrent consumers of one id; values below 64 are raised to 64. @default 64 */
  parallel?: number;
  /** Stores made by two factory calls with one namespace share one ledger (false for in-process stores). @default true */
  sharedBackend?: boolean;
  /** Label used in test names. @default "store" */
  name?: string;
  /** Per-test timeout in ms. @default 30_000 */
  timeoutMs?: number;
  /**
   * A store whose link to its backend can lose the reply to one consume (for stores that talk to a
   * server, or wrap a driver, where a write can succeed while its answer never arrives: a timeout on a
   * slow event loop, a connection cut in flight). With it the suite checks that such a consume is
   * resolved correctly: the write was this call's → `true`; someone else's → `false`; unknown →
   * `ERR_STORE_UNAVAILABLE`, and a retry of the same id afterwards is `false` (the write landed).
   * `startReplyLosingProxy` from this package does it for Redis and PostgreSQL over TCP.
   *
   * Needs `sharedBackend` (a store from `factory` with the same namespace must see the lossy store's
   * ids). A store whose consume cannot lose its answer — an in-process map like the memory store,
   * where the write and its result are one synchronous step — leaves this out, and the test is not
   * registered for it.
   */
  lostReply?: (options: { namespace: string }) => LossyStore | Promise<LossyStore>;
  /**
   * Whether the store records outcomes (`claim` and `record`, with the bounds of `OutcomeStoreLimits`). Declared:
   * `true` runs the outcome tests and fails them when the store lacks `claim`/`record`; `false` skips them (said
   * once, with the reason) and fails if the store has them after all. Left out, it is read off the store, and the
   * first outcome test says which it found.
   */
  outcomes?: boolean;
  /**
   * Whether the store keeps key fingerprints (`keyFingerprints`, the fleet check's exchange). `true` runs its tests
   * and fails them when the store lacks it; `false` skips them and fails if the store has it. Left out, it is read off
   * the store.
   */
  keyFingerprints?: boolean;
  /**
   * What the store must declare of the capabilities the suite has groups for (`clock`, `leases`, `epoch`; see
   * `StoreCapabilities`). `true`: the group runs and fails on a store that does not declare it; `false`: the group is
   * skipped (one line says so) and fails if the store declares it after all. Left out, each is read off the store
   * (`storeCapabilities`): its group runs when declared, else passes at once after one line says why.
   */
  declares?: { clock?: boolean; leases?: boolean; epoch?: boolean };
  /**
   * The lease (ms) of the tests that wait for one to lapse, on a store without the suite's fake `clock` (a lease on the
   * server's clock: Redis, PostgreSQL). They poll for the lapse (bounded: 30 s), so it needs no margin for a loaded
   * machine; shorter is faster. @default 250
   */
  leaseMs?: number;
  /**
   * Makes the store's ledger in `namespace` be lost, as a restart without persistence or a flush would (Redis: FLUSHDB
   * on a private server; SQL: TRUNCATE). The epoch group then checks that states minted before the loss are refused,
   * by the store that saw the loss and by a new one. A store of this process (`sharedBackend: false`) needs none: a
   * new store is a new ledger. A shared store without it skips that test (one line says so).
   */
  loseLedger?: (namespace: string) => Promise<void>;
}

/** See {@link StoreComplianceOptions.lostReply}. */
export interface LossyStore {
  readonly store: ReplayStore;
  /**
   * The next consume's write reaches the backend and runs, but its reply is lost: `'late'` — held back
   * until the store asks the backend anything else, then delivered; `'lost'` — discarded, and so is
   * every later answer until `restore()`.
   */
  loseNextReply(mode: 'late' | 'lost'): void;
  /** Back to normal (after `'lost'` the store may need a moment to reconnect). */
  restore(): void;
  /** Closes the store and whatever `lostReply` set up for it. */
  close(): Promise<void>;
}

/**
 * Makes a store on `namespace`. The outcome tests also pass the outcome bounds ({@link OutcomeStoreLimits}) to a store
 * that records outcomes, which must take them (other tests leave them out, for the store's defaults). Pass what it is given
 * through to the store's factory: one test gives a misspelt option, which the store's factory must refuse.
 */
export type StoreFactory = (options: { namespace: string } & OutcomeStoreLimits) => ReplayStore | Promise<ReplayStore>;

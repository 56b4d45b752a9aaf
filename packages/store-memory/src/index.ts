import type { ReplayStore } from '@mrtr/core';
import { LedgerLostError, StateExpiredError, StoreUnavailableError } from '@mrtr/core/errors';
import { fnOption, intOption, optionsObject, stringOption } from '@mrtr/core/options';
import {
  checkLeaseMs,
  checkOwner,
  type ClaimOptions,
  type ClaimResult,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  parseOutcomeStoreLimits,
  type RecordingReplayStore,
  type SpendOptions,
} from '@mrtr/core/store';
import { checkSpend, leaseOf } from './checks.js';
import { answerClaim, newClaim, recordClaim, releaseClaim, unrecordedClaimOf } from './leases.js';
import { Ledger } from './ledger.js';

/** Options of {@link createMemoryStore}. */
export interface MemoryStoreOptions extends OutcomeStoreLimits {
  /**
   * Most ids held at once (live plus expired-but-not-yet-swept). When the store is full and no expired
   * id can be reclaimed, `consume` rejects with `StoreFullError` — a live id is never evicted.
   * @default 100_000
   */
  maxEntries?: number | undefined;
  /**
   * Label of this ledger (diagnostics only: every memory store owns its own map, so stores are always isolated).
   * `''` is the default ledger, as in every `@mrtr/store-*` store.
   * @default ''
   */
  namespace?: string | undefined;
  /** The store's clock in epoch milliseconds (`time()` answers it; expiry, leases and the epoch are judged on it). @default Date.now */
  now?: (() => number) | undefined;
}

/** A {@link ReplayStore} held in this process's memory, with a clock, leases and a ledger epoch of its own. */
export interface MemoryReplayStore extends RecordingReplayStore {
  readonly maxEntries: number;
  readonly namespace: string;
  /** When this ledger began (the store's creation, by its clock): states minted before it are refused. */
  readonly epochMs: number;
  /** Characters of recorded outcomes currently held. */
  readonly outcomeBytes: number;
  /** Ids currently held (live ones plus expired ones the incremental sweep has not reached yet). */
  readonly size: number;
  renew(id: string, owner: string, leaseMs: number): Promise<boolean>;
  release(id: string, owner: string): Promise<boolean>;
  time(): Promise<number>;
  /** The ledger's epoch: when this store was created, by its clock. */
  ledgerEpoch(): Promise<number>;
}

const DEFAULT_MAX_ENTRIES = 100_000;

const FIRST: Promise<ClaimResult> = Promise.resolve({ status: 'first', fence: 0 });
const TRUE: Promise<boolean> = Promise.resolve(true);
const FALSE: Promise<boolean> = Promise.resolve(false);
const answer = (value: boolean): Promise<boolean> => (value ? TRUE : FALSE);

/**
 * Replay store for one process (and for tests). `consume` is O(1) amortised: one `Map` lookup and
 * insert, plus a bounded step of an incremental sweep that walks the map in insertion order and drops
 * expired ids — no timer, so it never keeps the process alive. Memory is bounded by `maxEntries`;
 * when full it fails closed with `StoreFullError` instead of evicting a live id.
 *
 * Its clock is `now`: an id is live while `now() <= expiresAtMs` and consumable again once `now() > expiresAtMs`;
 * an `expiresAtMs` at or before `now()` is refused with `StateExpiredError` and nothing is written. Leases run on the
 * same clock. Its ledger begins when it is created (a restart is a new ledger): a `mintedAtMs` before that is refused
 * with `LedgerLostError`. Every operation is O(1) amortised.
 */
export function createMemoryStore(options: MemoryStoreOptions = {}): MemoryReplayStore {
  const label = 'createMemoryStore';
  options = optionsObject(label, options, { ...OUTCOME_STORE_LIMIT_OPTIONS, maxEntries: true, namespace: true, now: true });
  const maxEntries = intOption(`${label}: maxEntries`, options.maxEntries, DEFAULT_MAX_ENTRIES, 1, Number.MAX_SAFE_INTEGER);
  const bounds = parseOutcomeStoreLimits(label, options);
  const namespace = stringOption(`${label}: namespace`, options.namespace, '');
  const now = fnOption(`${label}: now`, options.now, Date.now);

  const ledger = new Ledger(maxEntries);
  const epochMs = now();
  let closed = false;

  /** Settles `fn`'s answer, or rejects with what it threw (every operation answers with a promise, never throws). */
  const settle = <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return closed ? Promise.reject(new StoreUnavailableError()) : fn();
    } catch (error) {
      return Promise.reject(error);
    }
  };
  /** The checks of a write (`consume`, `claim`) on the store's clock; its time. */
  const spendAt = (op: string, id: string, expiresAtMs: number, spend: SpendOptions | undefined): number => {
    checkSpend(op, id, expiresAtMs, spend);
    const t = now();
    if (expiresAtMs <= t) throw new StateExpiredError();
    const minted = spend?.mintedAtMs;
    if (minted !== undefined && minted < epochMs) throw new LedgerLostError();
    return t;
  };

  const consume = (id: string, expiresAtMs: number, spend?: SpendOptions): Promise<boolean> =>
    settle(() => {
      const t = spendAt('consume', id, expiresAtMs, spend);
      return answer(ledger.take(id, expiresAtMs, expiresAtMs, t) === undefined);
    });

  const claim = (id: string, expiresAtMs: number, fingerprint: string, claimOptions?: ClaimOptions): Promise<ClaimResult> =>
    settle(() => {
      const t = spendAt('claim', id, expiresAtMs, claimOptions);
      if (typeof fingerprint !== 'string' || fingerprint.length === 0) throw new TypeError('claim: fingerprint must be a non-empty string');
      const lease = leaseOf(claimOptions);
      const held = ledger.take(id, expiresAtMs, newClaim(expiresAtMs, fingerprint, lease, t), t);
      return held === undefined ? FIRST : answerClaim(ledger, held, fingerprint, lease, t);
    });

  const record = (id: string, fingerprint: string, outcome: string, by?: { readonly owner?: string | undefined }): Promise<boolean> =>
    settle(() => {
      if (typeof id !== 'string' || typeof fingerprint !== 'string' || typeof outcome !== 'string') {
        throw new TypeError('record: id, fingerprint and outcome must be strings');
      }
      const owner = by?.owner;
      if (owner !== undefined) checkOwner('record', owner);
      return answer(recordClaim(ledger, bounds, id, fingerprint, outcome, owner, now()));
    });

  const renew = (id: string, owner: string, leaseMs: number): Promise<boolean> =>
    settle(() => {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('renew: id must be a non-empty string');
      checkOwner('renew', owner);
      checkLeaseMs('renew', leaseMs);
      const t = now();
      const held = unrecordedClaimOf(ledger, id, owner, t);
      if (held !== undefined) held.leaseUntil = t + leaseMs;
      return answer(held !== undefined);
    });

  const release = (id: string, owner: string): Promise<boolean> =>
    settle(() => {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('release: id must be a non-empty string');
      checkOwner('release', owner);
      return answer(releaseClaim(ledger, id, owner, now()));
    });

  return {
    capabilities: {
      shared: false,
      capacity: maxEntries,
      outcomes: bounds,
      keyExchange: false,
      clock: true,
      leases: true,
      epoch: true,
    },
    consume,
    claim,
    record,
    renew,
    release,
    time: () => settle(() => Promise.resolve(now())),
    ledgerEpoch: () => settle(() => Promise.resolve(epochMs)),
    close(): Promise<void> {
      closed = true;
      ledger.clear();
      return Promise.resolve();
    },
    maxEntries,
    maxOutcomeBytes: bounds.maxOutcomeBytes,
    outcomeBudgetBytes: bounds.outcomeBudgetBytes,
    namespace,
    epochMs,
    get outcomeBytes(): number {
      return ledger.outcomeBytes;
    },
    get size(): number {
      return ledger.entries.size;
    },
  };
}

export { createMemoryTaskStore, type MemoryTaskStoreOptions } from './tasks.js';

import type { ClaimResult, OutcomeStoreLimits, RecordingReplayStore, ReplayStore } from '@mrtr/core';
import {
  fnOption,
  intOption,
  MAX_FINGERPRINT_MISSES,
  optionsObject,
  parseOutcomeStoreLimits,
  StoreUnavailableError,
  stringOption,
} from '@mrtr/core/authoring';
import { type Held, Ledger } from './ledger.js';

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
  /** Clock in epoch milliseconds, for tests. @default Date.now */
  now?: (() => number) | undefined;
}

/** A {@link ReplayStore} held in this process's memory. */
export interface MemoryReplayStore extends RecordingReplayStore {
  readonly maxEntries: number;
  readonly namespace: string;
  /** Characters of recorded outcomes currently held. */
  readonly outcomeBytes: number;
  /** Ids currently held (live ones plus expired ones the incremental sweep has not reached yet). */
  readonly size: number;
}

const DEFAULT_MAX_ENTRIES = 100_000;

const FIRST: Promise<ClaimResult> = Promise.resolve({ status: 'first' });
const PENDING: Promise<ClaimResult> = Promise.resolve({ status: 'pending' });
const REPLAYED: Promise<ClaimResult> = Promise.resolve({ status: 'replayed' });

const TRUE: Promise<boolean> = Promise.resolve(true);
const FALSE: Promise<boolean> = Promise.resolve(false);

/**
 * Replay store for one process (and for tests). `consume` is O(1) amortised: one `Map` lookup and
 * insert, plus a bounded step of an incremental sweep that walks the map in insertion order and drops
 * expired ids — no timer, so it never keeps the process alive. Memory is bounded by `maxEntries`;
 * when full it fails closed with `StoreFullError` instead of evicting a live id.
 *
 * An id is live while `now() <= expiresAtMs` and consumable again once `now() > expiresAtMs`.
 * An `expiresAtMs` that is not in the future (`<= now()`) resolves `false`: such an id could not be
 * remembered, so it is never reported as a first use.
 */
export function createMemoryStore(options: MemoryStoreOptions = {}): MemoryReplayStore {
  const label = 'createMemoryStore';
  options = optionsObject(label, options);
  const maxEntries = intOption(`${label}: maxEntries`, options.maxEntries, DEFAULT_MAX_ENTRIES, 1, Number.MAX_SAFE_INTEGER);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(label, options);
  const namespace = stringOption(`${label}: namespace`, options.namespace, '');
  const now = fnOption(`${label}: now`, options.now, Date.now);

  const ledger = new Ledger(maxEntries);
  let closed = false;

  const checkArguments = (id: unknown, expiresAtMs: unknown): TypeError | undefined => {
    if (typeof id !== 'string' || id.length === 0) return new TypeError('consume: id must be a non-empty string');
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return new TypeError('consume: expiresAtMs must be a finite number');
    }
    return undefined;
  };

  const consume = (id: string, expiresAtMs: number): Promise<boolean> => {
    if (closed) return Promise.reject(new StoreUnavailableError());
    const misuse = checkArguments(id, expiresAtMs);
    if (misuse !== undefined) return Promise.reject(misuse);
    try {
      return ledger.take(id, expiresAtMs, expiresAtMs, now()) === undefined ? TRUE : FALSE;
    } catch (error) {
      return Promise.reject(error);
    }
  };

  const claim = (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    if (closed) return Promise.reject(new StoreUnavailableError());
    const misuse = checkArguments(id, expiresAtMs);
    if (misuse !== undefined) return Promise.reject(misuse);
    if (typeof fingerprint !== 'string' || fingerprint.length === 0) {
      return Promise.reject(new TypeError('claim: fingerprint must be a non-empty string'));
    }
    let held: Held | null | undefined;
    try {
      held = ledger.take(id, expiresAtMs, { exp: expiresAtMs, fp: fingerprint, misses: 0, outcome: undefined }, now());
    } catch (error) {
      return Promise.reject(error);
    }
    if (held === undefined) return FIRST;
    if (held === null || typeof held === 'number') return REPLAYED;
    if (held.fp !== fingerprint) {
      // A miss: the third drops the outcome, recorded or to come (no oracle for the answers).
      if (++held.misses >= MAX_FINGERPRINT_MISSES && held.outcome !== '') {
        if (held.outcome !== undefined) ledger.outcomeBytes -= held.outcome.length;
        held.outcome = '';
      }
      return REPLAYED;
    }
    if (held.outcome === undefined) return PENDING;
    return held.outcome === '' ? REPLAYED : Promise.resolve({ status: 'recorded', outcome: held.outcome });
  };

  const record = (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    if (closed) return Promise.reject(new StoreUnavailableError());
    if (typeof id !== 'string' || typeof fingerprint !== 'string' || typeof outcome !== 'string') {
      return Promise.reject(new TypeError('record: id, fingerprint and outcome must be strings'));
    }
    const held = ledger.entries.get(id);
    if (held === undefined || typeof held === 'number' || held.fp !== fingerprint || held.outcome !== undefined) return FALSE;
    if (held.exp < now()) return FALSE;
    if (outcome.length > maxOutcomeBytes || ledger.outcomeBytes + outcome.length > outcomeBudgetBytes) {
      held.outcome = '';
      return FALSE;
    }
    held.outcome = outcome;
    ledger.outcomeBytes += outcome.length;
    return outcome === '' ? FALSE : TRUE;
  };

  return {
    capabilities: {
      shared: false,
      capacity: maxEntries,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: false,
      clock: false,
      leases: false,
      epoch: false,
    },
    consume,
    claim,
    record,
    close(): Promise<void> {
      closed = true;
      ledger.clear();
      return Promise.resolve();
    },
    maxEntries,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    namespace,
    get outcomeBytes(): number {
      return ledger.outcomeBytes;
    },
    get size(): number {
      return ledger.entries.size;
    },
  };
}

export { createMemoryTaskStore, type MemoryTaskStoreOptions } from './tasks.js';

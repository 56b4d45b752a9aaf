import type { ClaimResult, OutcomeStoreLimits, ReplayStore } from '@mrtr/core';
import {
  fnOption,
  intOption,
  MAX_FINGERPRINT_MISSES,
  optionsObject,
  parseOutcomeStoreLimits,
  StoreFullError,
  StoreUnavailableError,
  stringOption,
} from '@mrtr/core/authoring';

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
export interface MemoryReplayStore extends ReplayStore {
  readonly maxEntries: number;
  readonly maxOutcomeBytes: number;
  readonly outcomeBudgetBytes: number;
  readonly namespace: string;
  claim(id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult>;
  record(id: string, fingerprint: string, outcome: string): Promise<boolean>;
  /** Characters of recorded outcomes currently held. */
  readonly outcomeBytes: number;
  /** Ids currently held (live ones plus expired ones the incremental sweep has not reached yet). */
  readonly size: number;
}

/** Entries examined by the incremental sweep on every `consume`. */
const SWEEP_PER_CALL = 2;
const DEFAULT_MAX_ENTRIES = 100_000;

/** An id taken by `claim`: its fingerprint, claims with other ones, and once recorded its outcome (`''`: done, not kept). */
interface Claimed {
  exp: number;
  fp: string;
  misses: number;
  outcome: string | undefined;
}
/** A plain `consume` holds only the expiry (no object per id on the hot path). */
type Held = number | Claimed;
const expiryOf = (held: Held): number => (typeof held === 'number' ? held : held.exp);

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

  const entries = new Map<string, Held>();
  let outcomeBytes = 0;
  /** Drops an entry, and its outcome from the budget. */
  const drop = (key: string, held: Held): void => {
    entries.delete(key);
    if (typeof held !== 'number' && held.outcome !== undefined) outcomeBytes -= held.outcome.length;
  };
  let closed = false;
  // Incremental sweep state. `floor` is a lower bound of every held expiry: exact after a completed
  // pass, and lowered by every insert since. `passMin` collects the minimum of the pass in progress.
  let cursor: MapIterator<string> | undefined;
  let passMin = Number.POSITIVE_INFINITY;
  let floor = Number.POSITIVE_INFINITY;

  /**
   * Examines up to `budget` entries, continuing the pass in progress and starting the next one when it
   * ends. With `untilRoom`, stops as soon as the map has a free slot, or when a completed pass proves
   * that no held id has expired.
   */
  const sweep = (budget: number, t: number, untilRoom: boolean): void => {
    let it = cursor;
    while (budget-- > 0) {
      if (it === undefined) {
        if (entries.size === 0) return;
        it = cursor = entries.keys();
        passMin = Number.POSITIVE_INFINITY;
      }
      const step = it.next();
      if (step.done === true) {
        // A full pass saw every entry that is still held, and inserts during it lowered passMin.
        floor = passMin;
        it = cursor = undefined;
        if (untilRoom && floor >= t) return;
        continue;
      }
      const key = step.value;
      const held = entries.get(key)!;
      const expiresAt = expiryOf(held);
      if (expiresAt < t) {
        drop(key, held);
        if (untilRoom && entries.size < maxEntries) return;
      } else if (expiresAt < passMin) {
        passMin = expiresAt;
      }
    }
  };

  const checkArguments = (id: unknown, expiresAtMs: unknown): TypeError | undefined => {
    if (typeof id !== 'string' || id.length === 0) return new TypeError('consume: id must be a non-empty string');
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return new TypeError('consume: expiresAtMs must be a finite number');
    }
    return undefined;
  };

  /**
   * The one write path of `consume` and `claim`: `undefined` when `id` was taken now with `value`, else what
   * holds it (`null`: an expiry not in the future, never remembered). Rejects only when full.
   */
  const take = (id: string, expiresAtMs: number, value: Held, t: number): Held | null | undefined => {
    const held = entries.get(id);
    if (held !== undefined && expiryOf(held) >= t) {
      // `floor >= t` proves no held id has expired: the sweep step would find nothing.
      if (floor < t) sweep(SWEEP_PER_CALL, t, false);
      return held;
    }
    if (expiresAtMs <= t) return null;
    if (held === undefined && entries.size >= maxEntries) {
      // Full: reclaim an expired id if one exists. `floor >= t` proves none does (O(1) refusal).
      // Otherwise finish the pass in progress and, if needed, run one more: at most two passes, and
      // the next refusal is O(1) again because the completed pass made `floor` exact.
      if (floor < t) sweep(2 * entries.size + 2, t, true);
      if (entries.size >= maxEntries) throw new StoreFullError();
    }
    if (held !== undefined) drop(id, held);
    entries.set(id, value);
    if (expiresAtMs < floor) floor = expiresAtMs;
    if (expiresAtMs < passMin) passMin = expiresAtMs;
    if (floor < t) sweep(SWEEP_PER_CALL, t, false);
    return undefined;
  };

  const consume = (id: string, expiresAtMs: number): Promise<boolean> => {
    if (closed) return Promise.reject(new StoreUnavailableError());
    const misuse = checkArguments(id, expiresAtMs);
    if (misuse !== undefined) return Promise.reject(misuse);
    try {
      return take(id, expiresAtMs, expiresAtMs, now()) === undefined ? TRUE : FALSE;
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
      held = take(id, expiresAtMs, { exp: expiresAtMs, fp: fingerprint, misses: 0, outcome: undefined }, now());
    } catch (error) {
      return Promise.reject(error);
    }
    if (held === undefined) return FIRST;
    if (held === null || typeof held === 'number') return REPLAYED;
    if (held.fp !== fingerprint) {
      // A miss: the third drops the outcome, recorded or to come (no oracle for the answers).
      if (++held.misses >= MAX_FINGERPRINT_MISSES && held.outcome !== '') {
        if (held.outcome !== undefined) outcomeBytes -= held.outcome.length;
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
    const held = entries.get(id);
    if (held === undefined || typeof held === 'number' || held.fp !== fingerprint || held.outcome !== undefined) return FALSE;
    if (held.exp < now()) return FALSE;
    if (outcome.length > maxOutcomeBytes || outcomeBytes + outcome.length > outcomeBudgetBytes) {
      held.outcome = '';
      return FALSE;
    }
    held.outcome = outcome;
    outcomeBytes += outcome.length;
    return outcome === '' ? FALSE : TRUE;
  };

  return {
    consume,
    claim,
    record,
    close(): Promise<void> {
      closed = true;
      entries.clear();
      outcomeBytes = 0;
      cursor = undefined;
      return Promise.resolve();
    },
    maxEntries,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    namespace,
    get outcomeBytes(): number {
      return outcomeBytes;
    },
    get size(): number {
      return entries.size;
    },
  };
}

export { createMemoryTaskStore, type MemoryTaskStoreOptions } from './tasks.js';

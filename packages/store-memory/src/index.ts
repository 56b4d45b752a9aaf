import type { ReplayStore } from '@mrtr/core';
import { StoreFullError, StoreUnavailableError } from '@mrtr/core/authoring';

/** Options of {@link createMemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most ids held at once (live plus expired-but-not-yet-swept). When the store is full and no expired
   * id can be reclaimed, `consume` rejects with `StoreFullError` — a live id is never evicted.
   * Default `100_000`.
   */
  maxEntries?: number | undefined;
  /** Label of this ledger (diagnostics only: every memory store owns its own map, so stores are always isolated). */
  namespace?: string | undefined;
  /** Clock in epoch milliseconds, for tests. Default `Date.now`. */
  now?: (() => number) | undefined;
}

/** A {@link ReplayStore} held in this process's memory. */
export interface MemoryReplayStore extends ReplayStore {
  readonly maxEntries: number;
  readonly namespace: string;
  /** Ids currently held (live ones plus expired ones the incremental sweep has not reached yet). */
  readonly size: number;
}

/** Entries examined by the incremental sweep on every `consume`. */
const SWEEP_PER_CALL = 2;
const DEFAULT_MAX_ENTRIES = 100_000;

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
  if (options === null || typeof options !== 'object') {
    throw new TypeError('createMemoryStore: options must be an object');
  }
  const maxEntries = options.maxEntries ?? DEFAULT_MAX_ENTRIES;
  if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) {
    throw new RangeError('createMemoryStore: maxEntries must be a positive safe integer');
  }
  const namespace = options.namespace ?? '';
  if (typeof namespace !== 'string') throw new TypeError('createMemoryStore: namespace must be a string');
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createMemoryStore: now must be a function');

  const entries = new Map<string, number>();
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
      const expiresAt = entries.get(key)!;
      if (expiresAt < t) {
        entries.delete(key);
        if (untilRoom && entries.size < maxEntries) return;
      } else if (expiresAt < passMin) {
        passMin = expiresAt;
      }
    }
  };

  const consume = (id: string, expiresAtMs: number): Promise<boolean> => {
    if (closed) return Promise.reject(new StoreUnavailableError());
    if (typeof id !== 'string' || id.length === 0) {
      return Promise.reject(new TypeError('consume: id must be a non-empty string'));
    }
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return Promise.reject(new TypeError('consume: expiresAtMs must be a finite number'));
    }
    const t = now();
    const held = entries.get(id);
    if (held !== undefined && held >= t) {
      // `floor >= t` proves no held id has expired: the sweep step would find nothing.
      if (floor < t) sweep(SWEEP_PER_CALL, t, false);
      return FALSE;
    }
    if (expiresAtMs <= t) return FALSE;
    if (held === undefined && entries.size >= maxEntries) {
      // Full: reclaim an expired id if one exists. `floor >= t` proves none does (O(1) refusal).
      // Otherwise finish the pass in progress and, if needed, run one more: at most two passes, and
      // the next refusal is O(1) again because the completed pass made `floor` exact.
      if (floor < t) sweep(2 * entries.size + 2, t, true);
      if (entries.size >= maxEntries) return Promise.reject(new StoreFullError());
    }
    entries.set(id, expiresAtMs);
    if (expiresAtMs < floor) floor = expiresAtMs;
    if (expiresAtMs < passMin) passMin = expiresAtMs;
    if (floor < t) sweep(SWEEP_PER_CALL, t, false);
    return TRUE;
  };

  return {
    consume,
    close(): Promise<void> {
      closed = true;
      entries.clear();
      cursor = undefined;
      return Promise.resolve();
    },
    maxEntries,
    namespace,
    get size(): number {
      return entries.size;
    },
  };
}

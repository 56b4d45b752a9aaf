import { StoreFullError } from '@mrtr/core/errors';

/** Entries examined by the incremental sweep on every `consume`. */
const SWEEP_PER_CALL = 2;

/**
 * An id taken by `claim`: its fingerprint, claims with other ones, once recorded its outcome (`''`: done, not kept),
 * and its lease: who holds it, until when (store's clock; `undefined`: no lease, it never lapses), its fence.
 */
export interface Claimed {
  exp: number;
  fp: string;
  misses: number;
  outcome: string | undefined;
  owner: string | undefined;
  leaseUntil: number | undefined;
  fence: number;
  /** The owner whose `record` landed, and whether it kept its outcome (a retry by that owner answers the same). */
  recordedBy: string | undefined;
  kept: boolean;
}
/** A plain `consume` holds only the expiry (no object per id on the hot path). */
export type Held = number | Claimed;
export const expiryOf = (held: Held): number => (typeof held === 'number' ? held : held.exp);

/**
 * The ids a memory store holds, bounded by `maxEntries`, with the characters of their recorded outcomes. Expired ids
 * are dropped by an incremental sweep that walks the map in insertion order, a bounded step per write: no timer, so it
 * never keeps the process alive.
 */
export class Ledger {
  readonly entries: Map<string, Held> = new Map();
  /** Characters of recorded outcomes held. */
  outcomeBytes: number = 0;
  // Incremental sweep state. `floor` is a lower bound of every held expiry: exact after a completed
  // pass, and lowered by every insert since. `passMin` collects the minimum of the pass in progress.
  #cursor: MapIterator<string> | undefined;
  #passMin: number = Number.POSITIVE_INFINITY;
  #floor: number = Number.POSITIVE_INFINITY;

  readonly maxEntries: number;

  constructor(maxEntries: number) {
    this.maxEntries = maxEntries;
  }

  /** Drops an entry, and its outcome from the budget. */
  drop(key: string, held: Held): void {
    this.entries.delete(key);
    if (typeof held !== 'number' && held.outcome !== undefined) this.outcomeBytes -= held.outcome.length;
  }

  /** Forgets every id (the store is closed). */
  clear(): void {
    this.entries.clear();
    this.outcomeBytes = 0;
    this.#cursor = undefined;
  }

  /**
   * Examines up to `budget` entries, continuing the pass in progress and starting the next one when it
   * ends. With `untilRoom`, stops as soon as the map has a free slot, or when a completed pass proves
   * that no held id has expired.
   */
  #sweep(budget: number, t: number, untilRoom: boolean): void {
    const { entries } = this;
    let it = this.#cursor;
    while (budget-- > 0) {
      if (it === undefined) {
        if (entries.size === 0) return;
        it = this.#cursor = entries.keys();
        this.#passMin = Number.POSITIVE_INFINITY;
      }
      const step = it.next();
      if (step.done === true) {
        // A full pass saw every entry that is still held, and inserts during it lowered passMin.
        this.#floor = this.#passMin;
        it = this.#cursor = undefined;
        if (untilRoom && this.#floor >= t) return;
        continue;
      }
      const key = step.value;
      const held = entries.get(key)!;
      const expiresAt = expiryOf(held);
      if (expiresAt < t) {
        this.drop(key, held);
        if (untilRoom && entries.size < this.maxEntries) return;
      } else if (expiresAt < this.#passMin) {
        this.#passMin = expiresAt;
      }
    }
  }

  /**
   * The one write path of `consume` and `claim`, for an `expiresAtMs` after `t` (the caller refuses any other):
   * `undefined` when `id` was taken now with `value`, else what holds it. Throws `StoreFullError` only when full.
   */
  take(id: string, expiresAtMs: number, value: Held, t: number): Held | undefined {
    const { entries } = this;
    const held = entries.get(id);
    if (held !== undefined && expiryOf(held) >= t) {
      // `floor >= t` proves no held id has expired: the sweep step would find nothing.
      if (this.#floor < t) this.#sweep(SWEEP_PER_CALL, t, false);
      return held;
    }
    if (held === undefined && entries.size >= this.maxEntries) {
      // Full: reclaim an expired id if one exists. `floor >= t` proves none does (O(1) refusal).
      // Otherwise finish the pass in progress and, if needed, run one more: at most two passes, and
      // the next refusal is O(1) again because the completed pass made `floor` exact.
      if (this.#floor < t) this.#sweep(2 * entries.size + 2, t, true);
      if (entries.size >= this.maxEntries) throw new StoreFullError();
    }
    if (held !== undefined) this.drop(id, held);
    entries.set(id, value);
    if (expiresAtMs < this.#floor) this.#floor = expiresAtMs;
    if (expiresAtMs < this.#passMin) this.#passMin = expiresAtMs;
    if (this.#floor < t) this.#sweep(SWEEP_PER_CALL, t, false);
    return undefined;
  }
}

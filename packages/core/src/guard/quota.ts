import { intOption, YEAR_MS } from '../util/int-option.js';

/** Sub-windows of a mint quota's window: its memory per principal and its slack (a place frees up to H / this late). */
const QUOTA_SUB_WINDOWS = 10;

/** A per-principal sliding-window bound: `take(principal, t, weight)` spends `weight` (1 by default) of its `max`. */
export interface Quota {
  take(principal: string, t: number, weight?: number): boolean;
}

/**
 * Sliding-window counters per principal tag (see `MintQuota`), bounded in the number of principals. `name`
 * labels the option in errors (`mintQuota`, `outcomeQuota`); a take of `weight` is refused when it would pass `max`.
 */
export function createQuota(
  options: { max?: number | undefined; windowMs?: number | undefined; maxPrincipals?: number | undefined },
  lifetimeMs: number,
  name = 'mintQuota',
  ceiling = 1_000_000_000,
): Quota {
  if (options === null || typeof options !== 'object') throw new TypeError(`createStateGuard: ${name} must be an object`);
  if (options.max === undefined) throw new TypeError(`createStateGuard: ${name} needs max`);
  const max = intOption(`${name}.max`, options.max, 0, 1, ceiling);
  const windowMs = intOption(`${name}.windowMs`, options.windowMs, lifetimeMs, 1, YEAR_MS);
  const maxPrincipals = intOption(`${name}.maxPrincipals`, options.maxPrincipals, 100_000, 1, 100_000_000);
  // H: the window, never shorter than a state's lifetime, so that `max` also bounds the states alive at once.
  const span = Math.max(windowMs, lifetimeMs);
  // Sub-window j covers [j·width, (j+1)·width). A mint at t counts every sub-window from floor((t − H) / width)
  // to floor(t / width): all mints at t' ≥ t − H (and some a little older). That is at most
  // ceil(H / width) + 1 ≤ SLOTS sub-windows, kept in a ring of SLOTS counters indexed by j mod SLOTS.
  const width = Math.ceil(span / QUOTA_SUB_WINDOWS);
  const SLOTS = QUOTA_SUB_WINDOWS + 1;
  const slot = (j: number): number => ((j % SLOTS) + SLOTS) % SLOTS;
  interface Entry {
    /** The newest sub-window with a mint (counters of later ones are 0). */
    last: number;
    counts: number[];
  }
  // Insertion order is last-mint order (an entry moves to the end when it mints), so principals with nothing
  // left in the window are dropped from the front in time proportional to what is dropped.
  const entries = new Map<string, Entry>();
  return {
    take(principal, t, weight = 1) {
      if (!Number.isFinite(t)) return false;
      const oldest = Math.floor((t - span) / width);
      let entry = entries.get(principal);
      if (entry === undefined) {
        if (entries.size >= maxPrincipals) {
          for (const [key, old] of entries) {
            if (old.last >= oldest) break;
            entries.delete(key);
          }
          if (entries.size >= maxPrincipals) return false;
        }
        entry = { last: Number.NEGATIVE_INFINITY, counts: new Array<number>(SLOTS).fill(0) };
      }
      const { counts } = entry;
      // A clock that went back counts as standing still: never earlier than the newest mint.
      const current = Math.max(Math.floor(t / width), entry.last);
      let used = 0;
      for (let j = Math.max(oldest, entry.last - SLOTS + 1); j <= entry.last; j++) used += counts[slot(j)]!;
      if (used + weight > max) return false;
      if (current > entry.last) {
        // Clear the slots of the sub-windows between the newest mint and now (they held older sub-windows).
        const from = Math.max(entry.last + 1, current - SLOTS + 1);
        for (let j = from; j <= current; j++) counts[slot(j)] = 0;
        entry.last = current;
      }
      counts[slot(current)]! += weight;
      entries.delete(principal);
      entries.set(principal, entry);
      return true;
    },
  };
}

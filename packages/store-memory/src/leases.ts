import { type ClaimResult, MAX_FINGERPRINT_MISSES } from '@mrtr/core/store';
import type { Lease } from './checks.js';
import type { Claimed, Held, Ledger } from './ledger.js';

const PENDING: Promise<ClaimResult> = Promise.resolve({ status: 'pending' });
const REPLAYED: Promise<ClaimResult> = Promise.resolve({ status: 'replayed' });
const UNKNOWN: Promise<ClaimResult> = Promise.resolve({ status: 'unknown' });

/** A fresh claim of `fp` at `t` with `lease` (a lease runs only with both an owner and a length). */
export function newClaim(exp: number, fp: string, lease: Lease, t: number): Claimed {
  const leaseUntil = lease.owner !== undefined && lease.leaseMs !== undefined ? t + lease.leaseMs : undefined;
  return { exp, fp, misses: 0, outcome: undefined, owner: lease.owner, leaseUntil, fence: 0, recordedBy: undefined, kept: false };
}

/**
 * How a held id answers a claim of `fp` at `t` (see `ClaimResult`): a plain consume, another fingerprint (a miss: the
 * third drops the outcome, recorded or to come, so a state is no oracle) and an outcome not kept are replays; then the
 * outcome; then the lease: no lease or a running one is pending, a lapsed one unknown — or, with `reclaim`, taken over
 * for the claimer with the next fence.
 */
export function answerClaim(ledger: Ledger, held: Held, fp: string, lease: Lease, t: number): Promise<ClaimResult> {
  if (typeof held === 'number') return REPLAYED;
  if (held.fp !== fp) {
    if (++held.misses >= MAX_FINGERPRINT_MISSES && held.outcome !== '') {
      if (held.outcome !== undefined) ledger.outcomeBytes -= held.outcome.length;
      held.outcome = '';
    }
    return REPLAYED;
  }
  if (held.outcome !== undefined) return held.outcome === '' ? REPLAYED : Promise.resolve({ status: 'recorded', outcome: held.outcome });
  if (held.leaseUntil === undefined) return PENDING;
  if (t <= held.leaseUntil) return Promise.resolve({ status: 'pending', leaseLeftMs: held.leaseUntil - t });
  if (!lease.reclaim) return UNKNOWN;
  const next = newClaim(held.exp, fp, lease, t);
  held.owner = next.owner;
  held.leaseUntil = next.leaseUntil;
  held.fence += 1;
  return Promise.resolve({ status: 'first', fence: held.fence });
}

/** The claim `owner` holds on `id` with no outcome yet, live at `t`; `undefined` when it holds none. */
export function unrecordedClaimOf(ledger: Ledger, id: string, owner: string, t: number): Claimed | undefined {
  const held = ledger.entries.get(id);
  if (held === undefined || typeof held === 'number' || held.owner !== owner || held.outcome !== undefined || held.exp < t) {
    return undefined;
  }
  return held;
}

/**
 * `release`'s answer, after giving `id` back when `owner` holds it unrecorded: `true` when `owner` holds no claim of it
 * afterwards (nothing live holds it, or it was given back now); `false` when a plain consume, another owner's claim or
 * a recorded outcome holds it (left as it was).
 */
export function releaseClaim(ledger: Ledger, id: string, owner: string, t: number): boolean {
  const held = ledger.entries.get(id);
  if (held === undefined || (typeof held === 'number' ? held : held.exp) < t) return true;
  if (typeof held === 'number' || held.owner !== owner || held.outcome !== undefined) return false;
  ledger.drop(id, held);
  return true;
}

/** Bounds `record` keeps outcomes under. */
export interface OutcomeBounds {
  readonly maxOutcomeBytes: number;
  readonly outcomeBudgetBytes: number;
}

/**
 * `record`'s answer, after storing `outcome` (or `''`, done, not kept, past the bounds) for the unrecorded claim of
 * `fp` on `id` — by its owner when it has one. A second record by the owner whose record landed answers what the
 * first did (safe to retry after a lost reply).
 */
export function recordClaim(
  ledger: Ledger,
  bounds: OutcomeBounds,
  id: string,
  fp: string,
  outcome: string,
  owner: string | undefined,
  t: number,
): boolean {
  const held = ledger.entries.get(id);
  if (held === undefined || typeof held === 'number' || held.fp !== fp || held.exp < t) return false;
  if (held.outcome !== undefined) return owner !== undefined && held.recordedBy === owner && held.kept;
  if (held.owner !== undefined && held.owner !== owner) return false;
  held.recordedBy = owner;
  if (outcome.length > bounds.maxOutcomeBytes || ledger.outcomeBytes + outcome.length > bounds.outcomeBudgetBytes) {
    held.outcome = '';
    return false;
  }
  held.outcome = outcome;
  ledger.outcomeBytes += outcome.length;
  held.kept = outcome !== '';
  return held.kept;
}

import type { ReplayStore } from '@mrtr/core';
import { LedgerLostError, StateExpiredError, StoreUnavailableError } from '@mrtr/core/errors';
import { rejectUnknownOptions } from '@mrtr/core/options';
import {
  type ClaimOptions,
  type ClaimResult,
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  parseOutcomeStoreLimits,
  type SpendOptions,
} from '@mrtr/core/store';

/** Flaws of {@link referenceLeaseStore}, each a bug the capability groups must catch. */
export interface LeaseFlaws {
  /** Leases never lapse: a claim whose owner died is pending forever. */
  neverLapse?: boolean;
  /** `release` deletes the claim whoever holds it. */
  releaseAnyOwner?: boolean;
  /** `release` deletes a recorded claim too. */
  releaseRecorded?: boolean;
  /** An expiry the clock has passed is written anyway and answered as a first use (Redis `PXAT` in the past). */
  pastExpiryWritten?: boolean;
  /** Decides (and answers `time()`) on this process's clock, not the one it was given. */
  wallClock?: boolean;
  /** Never checks `mintedAtMs`. */
  noEpochCheck?: boolean;
  /** Takes the current time as the epoch on every call (refuses any state minted before now). */
  epochMoves?: boolean;
  /** A second `record` by the owner answers false. */
  recordNotIdempotent?: boolean;
  /** Any owner (or none) records an owned claim. */
  recordAnyOwner?: boolean;
  /** `renew` extends anyone's lease. */
  renewAnyOwner?: boolean;
  /** A reclaim answers fence 0. */
  noFence?: boolean;
  /** A reclaim reads the lapsed claim, awaits, then takes it over (two steps). */
  racyReclaim?: boolean;
}

interface Entry {
  exp: number;
  fp: string | undefined;
  misses: number;
  outcome: string | undefined;
  owner: string | undefined;
  leaseUntil: number | undefined;
  fence: number;
  recordedBy: string | undefined;
  kept: boolean;
}

const OWNER = /^[A-Za-z0-9_-]{16,64}$/;
const checkOwner = (owner: unknown) => {
  if (typeof owner !== 'string' || !OWNER.test(owner)) throw new TypeError('owner must be 16 to 64 base64url characters');
};
const checkLease = (ms: unknown) => {
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms)) throw new TypeError('leaseMs must be a safe integer');
  if (ms < 1) throw new RangeError('leaseMs must be at least 1');
};
const entry = (exp: number, fields: Partial<Entry> = {}): Entry => ({
  exp,
  fp: undefined,
  misses: 0,
  outcome: undefined,
  owner: undefined,
  leaseUntil: undefined,
  fence: 0,
  recordedBy: undefined,
  kept: false,
  ...fields,
});

/**
 * A small, correct in-process store with a clock, leases and an epoch (O(n) where it does not matter), or, with
 * flaws, one with a bug: to show the capability groups of `storeCompliance` pass a correct store and bite each bug.
 */
export function referenceLeaseStore(
  flaws: LeaseFlaws,
  options: { now: () => number; namespace?: string } & OutcomeStoreLimits,
): ReplayStore {
  rejectUnknownOptions('referenceLeaseStore', options, { ...OUTCOME_STORE_LIMIT_OPTIONS, now: true, namespace: true });
  const now = flaws.wallClock ? Date.now : options.now;
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits('referenceLeaseStore', options);
  const epoch = now();
  const held = new Map<string, Entry>();
  let closed = false;
  const live = (id: string, t: number) => {
    const e = held.get(id);
    return e !== undefined && e.exp >= t ? e : undefined;
  };
  const bytesHeld = (t: number) => [...held.keys()].reduce((sum, id) => sum + (live(id, t)?.outcome?.length ?? 0), 0);
  const spend = (id: unknown, exp: unknown, options: SpendOptions | undefined): number => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('id must be a non-empty string');
    if (typeof exp !== 'number' || !Number.isFinite(exp)) throw new TypeError('expiresAtMs must be finite');
    if (closed) throw new StoreUnavailableError();
    const t = now();
    if (exp <= t && !flaws.pastExpiryWritten) throw new StateExpiredError();
    const minted = options?.mintedAtMs;
    if (!flaws.noEpochCheck && minted !== undefined && minted < (flaws.epochMoves ? t : epoch)) throw new LedgerLostError();
    return t;
  };
  const answer = async (e: Entry, fp: string, o: ClaimOptions | undefined, t: number): Promise<ClaimResult> => {
    if (e.fp === undefined) return { status: 'replayed' };
    if (e.fp !== fp) {
      if (++e.misses >= MAX_FINGERPRINT_MISSES) e.outcome = '';
      return { status: 'replayed' };
    }
    if (e.outcome !== undefined) return e.outcome === '' ? { status: 'replayed' } : { status: 'recorded', outcome: e.outcome };
    if (e.leaseUntil === undefined) return { status: 'pending' };
    if (t <= e.leaseUntil || flaws.neverLapse) return { status: 'pending', leaseLeftMs: Math.max(0, e.leaseUntil - t) };
    if (o?.reclaim !== true) return { status: 'unknown' };
    if (flaws.racyReclaim) await new Promise((resolve) => setImmediate(resolve));
    e.owner = o.owner;
    e.leaseUntil = o.owner !== undefined && o.leaseMs !== undefined ? t + o.leaseMs : undefined;
    e.fence = flaws.noFence ? 0 : e.fence + 1;
    return { status: 'first', fence: e.fence };
  };
  return {
    capabilities: {
      shared: false,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: false,
      clock: true,
      leases: true,
      epoch: true,
    },
    async consume(id, exp, options) {
      const t = spend(id, exp, options);
      if (live(id, t) !== undefined) return false;
      held.set(id, entry(exp));
      return true;
    },
    async claim(id, exp, fp, o) {
      const t = spend(id, exp, o);
      if (o?.owner !== undefined) checkOwner(o.owner);
      if (o?.leaseMs !== undefined) checkLease(o.leaseMs);
      const e = live(id, t);
      if (e !== undefined) return answer(e, fp, o, t);
      const leaseUntil = o?.owner !== undefined && o.leaseMs !== undefined ? t + o.leaseMs : undefined;
      held.set(id, entry(exp, { fp, owner: o?.owner, leaseUntil }));
      return { status: 'first', fence: 0 };
    },
    async record(id, fp, outcome, by) {
      if (closed) throw new StoreUnavailableError();
      const t = now();
      const e = live(id, t);
      if (e === undefined || e.fp !== fp) return false;
      if (e.outcome !== undefined) return !flaws.recordNotIdempotent && by?.owner !== undefined && e.recordedBy === by.owner && e.kept;
      if (!flaws.recordAnyOwner && e.owner !== undefined && e.owner !== by?.owner) return false;
      e.recordedBy = by?.owner;
      e.kept = outcome !== '' && outcome.length <= maxOutcomeBytes && bytesHeld(t) + outcome.length <= outcomeBudgetBytes;
      e.outcome = e.kept ? outcome : '';
      return e.kept;
    },
    async renew(id, owner, leaseMs) {
      checkOwner(owner);
      checkLease(leaseMs);
      if (closed) throw new StoreUnavailableError();
      const t = now();
      const e = live(id, t);
      if (e === undefined || e.fp === undefined || (e.owner !== owner && !flaws.renewAnyOwner) || e.outcome !== undefined) return false;
      e.leaseUntil = t + leaseMs;
      return true;
    },
    async release(id, owner) {
      checkOwner(owner);
      if (closed) throw new StoreUnavailableError();
      const e = live(id, now());
      if (e === undefined) return true;
      if (e.owner !== owner && !flaws.releaseAnyOwner) return false;
      if (e.outcome !== undefined && !flaws.releaseRecorded) return false;
      held.delete(id);
      return true;
    },
    async time() {
      if (closed) throw new StoreUnavailableError();
      return now();
    },
    async ledgerEpoch() {
      if (closed) throw new StoreUnavailableError();
      return flaws.epochMoves ? now() : epoch;
    },
    async close() {
      closed = true;
    },
  };
}

import type { MrtrError } from '@mrtr/core';
import { LedgerLostError, StateExpiredError } from '@mrtr/core/errors';
import { type ClaimResult, MAX_FINGERPRINT_MISSES } from '@mrtr/core/store';
import type { ClaimWaiter } from './batching.js';

export { MAX_FINGERPRINT_MISSES };

/**
 * Width of an outcome budget bucket in ms: an outcome recorded for an id expiring at E counts in bucket
 * floor(E / BUDGET_BUCKET_MS) until the store's clock leaves that bucket, so at most this long past E (over-counted,
 * never under-counted).
 */
export const BUDGET_BUCKET_MS = 60_000;
export const budgetBucket = (t: number): number => Math.floor(t / BUDGET_BUCKET_MS);

/** A row as `claim` and its lookups read it. */
export interface HeldRow {
  id?: unknown;
  owner?: unknown;
  misses?: unknown;
  fp?: unknown;
  outcome?: unknown;
  expires_at?: unknown;
  lease_until?: unknown;
  fence?: unknown;
  /** The store's time when the row was read (PostgreSQL's lookups return it with each row). */
  now_ms?: unknown;
}

/** The store's clock and the namespace's ledger epoch, as a consume or claim statement judged them. */
export interface SpendClock {
  readonly now: number;
  readonly epoch: number;
}

/**
 * Why the store refuses a consume or claim (it writes nothing for it): its expiry is not after the store's time →
 * `ERR_STATE_EXPIRED`; it was minted before the ledger's epoch → `ERR_LEDGER_LOST`. `undefined`: admitted.
 */
export function spendRefusal(expires: number, minted: number | undefined, clock: SpendClock): MrtrError | undefined {
  if (expires <= clock.now) return new StateExpiredError();
  if (minted !== undefined && minted < clock.epoch) return new LedgerLostError();
  return undefined;
}

const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const UNKNOWN: ClaimResult = Object.freeze({ status: 'unknown' });
export const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });

/** `first` for the claim that took a row: with the row's fence (0 for a first claim, one more per reclaim). */
export const firstOf = (row: HeldRow): ClaimResult => ({ status: 'first', fence: Number(row.fence ?? 0) || 0 });

/**
 * How a live row that this claim did not take is held, at `t` by the store's clock: taken by `consume` (no
 * fingerprint) or with another fingerprint → replayed; same fingerprint and no outcome yet → pending (with
 * `leaseLeftMs` while its lease runs), or unknown once its lease lapsed; outcome `''` (done, not kept) → replayed;
 * else recorded with the outcome.
 */
export function heldStatus(row: HeldRow, fingerprint: string, t: number): ClaimResult {
  if (typeof row.fp !== 'string' || row.fp !== fingerprint) return REPLAYED;
  if (row.outcome === null || row.outcome === undefined) {
    if (row.lease_until === null || row.lease_until === undefined) return PENDING;
    const left = Number(row.lease_until) - t;
    return left >= 0 ? { status: 'pending', leaseLeftMs: left } : UNKNOWN;
  }
  if (typeof row.outcome !== 'string' || row.outcome === '') return REPLAYED;
  return { status: 'recorded', outcome: row.outcome };
}

/** Whether a row read back is live at `t` (an expired row counts as absent, as for `consume`). */
export const isLive = (row: HeldRow | undefined, t: number): row is HeldRow => row !== undefined && Number(row.expires_at) >= t;

/**
 * The later claims of one id in a batch, after its first claim's statement left `row` (the row as that statement
 * left it, locked by it): answered in queue order as the database would, each claim with another fingerprint on a
 * row held by a claim counting a miss (the {@link MAX_FINGERPRINT_MISSES}-th drops the outcome). Returns the answers
 * and how many misses they add (written by the caller in one more statement before any of them is answered).
 */
export function laterClaims(row: HeldRow, later: readonly ClaimWaiter[], t: number): { answers: ClaimResult[]; misses: number } {
  const held: HeldRow = { fp: row.fp, outcome: row.outcome, lease_until: row.lease_until };
  let count = Number(row.misses ?? 0) || 0;
  let misses = 0;
  const answers = later.map((waiter) => {
    if (typeof held.fp === 'string' && held.fp !== waiter.fp) {
      misses++;
      if (++count >= MAX_FINGERPRINT_MISSES) held.outcome = '';
    }
    return heldStatus(held, waiter.fp, t);
  });
  return { answers, misses };
}

/** Most shards a PostgreSQL namespace's outcome budget is split into (see {@link budgetShards}). */
export const MAX_BUDGET_SHARDS = 8;

/**
 * How many separately locked shards a namespace's outcome budget is split into on PostgreSQL: a power of two, at
 * most {@link MAX_BUDGET_SHARDS}, and no more than leaves every shard room for a largest outcome (so an outcome that
 * the whole budget could keep can always be kept by an empty shard). One shard: the whole budget under one lock and
 * one key, as before shards.
 */
export function budgetShards(outcomeBudgetBytes: number, maxOutcomeBytes: number): number {
  let shards = 1;
  while (shards < MAX_BUDGET_SHARDS && Math.floor(outcomeBudgetBytes / (shards * 2)) >= Math.max(1, maxOutcomeBytes)) shards *= 2;
  return shards;
}

/** Shard `k`'s part of the budget: the budget split as evenly as whole bytes allow (the parts add up to the budget). */
export const shardBudgetBytes = (outcomeBudgetBytes: number, shards: number, k: number): number =>
  Math.floor(outcomeBudgetBytes / shards) + (k < outcomeBudgetBytes % shards ? 1 : 0);

/** The shard of an id: FNV-1a (32-bit) of its UTF-16 code units, modulo `shards` (the same on every instance). */
export function budgetShardOf(id: string, shards: number): number {
  if (shards === 1) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) {
    h ^= id.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % shards;
}

/**
 * The budget table's `ns` key of shard `k` of `shards`: the namespace itself with one shard (the key of a store
 * before shards), else the namespace, U+0001, then `shards:k` (each layout has keys of its own).
 */
export const budgetShardKey = (namespace: string, shards: number, k: number): string =>
  shards === 1 ? namespace : `${namespace}\u0001${shards}:${k}`;

/**
 * The keys whose bytes count against shard `k`: its own, and every key of every other layout (another number of
 * shards, or none: bytes kept by instances configured otherwise, or before an upgrade, count against every shard
 * until their buckets pass: over-counted, never under-counted).
 */
export function budgetCountedKeys(namespace: string, shards: number, k: number): string[] {
  const keys = [budgetShardKey(namespace, shards, k)];
  for (let other = 1; other <= MAX_BUDGET_SHARDS; other *= 2) {
    if (other === shards) continue;
    for (let j = 0; j < other; j++) keys.push(budgetShardKey(namespace, other, j));
  }
  return keys;
}

import type { ClaimResult } from '@mrtr/core';
import { MAX_FINGERPRINT_MISSES } from '@mrtr/core/authoring';
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
}

const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
export const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });
export const FIRST: ClaimResult = Object.freeze({ status: 'first' });

/**
 * How a live row that this claim did not take is held: taken by `consume` (no fingerprint) or with another
 * fingerprint → replayed; same fingerprint and no outcome yet → pending; outcome `''` (done, not kept) →
 * replayed; else recorded with the outcome.
 */
export function heldStatus(row: HeldRow, fingerprint: string): ClaimResult {
  if (typeof row.fp !== 'string' || row.fp !== fingerprint) return REPLAYED;
  if (row.outcome === null || row.outcome === undefined) return PENDING;
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
export function laterClaims(row: HeldRow, later: readonly ClaimWaiter[]): { answers: ClaimResult[]; misses: number } {
  const held: HeldRow = { fp: row.fp, outcome: row.outcome };
  let count = Number(row.misses ?? 0) || 0;
  let misses = 0;
  const answers = later.map((waiter) => {
    if (typeof held.fp === 'string' && held.fp !== waiter.fp) {
      misses++;
      if (++count >= MAX_FINGERPRINT_MISSES) held.outcome = '';
    }
    return heldStatus(held, waiter.fp);
  });
  return { answers, misses };
}

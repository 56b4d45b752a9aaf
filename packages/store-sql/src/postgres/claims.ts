import type { ClaimResult } from '@mrtr/core';
import { type ClaimWaiter, rejectAll, splitById } from '../shared/batching.js';
import { FIRST, type HeldRow, heldStatus, isLive, laterClaims, REPLAYED } from '../shared/claims.js';
import { closedError, toStoreError } from '../shared/lifecycle.js';
import { budgetOf, type ReplayContext } from './context.js';
import { answerLost, readRows, sendBatch } from './lookups.js';
import { sentError } from './send.js';

/** Later claims of an id in a batch whose misses are written before they are answered. */
interface FollowUp {
  waiters: ClaimWaiter[];
  answers: ClaimResult[];
  owner: unknown;
  misses: number;
  id: string;
}

/**
 * A claim whose expiry is not in the future: as for consume, such an id cannot be remembered, so it is never
 * a first use and nothing is written; a live row of the id still answers how it is held (read only).
 */
export async function claimExpired(ctx: ReplayContext, id: string, fingerprint: string): Promise<ClaimResult> {
  try {
    const row = (await ctx.send({ ...ctx.statements.row, values: [ctx.namespace, id] }, ctx.deadlineMs)).rows[0] as HeldRow | undefined;
    return isLive(row, Math.floor(ctx.now())) ? heldStatus(row, fingerprint) : REPLAYED;
  } catch (error) {
    throw toStoreError(sentError(error));
  }
}

/** Writes the misses of later claims in a batch (one statement), then answers them; a failure fails them closed. */
async function writeMisses(ctx: ReplayContext, followUps: FollowUp[], budget: number): Promise<void> {
  try {
    if (budget <= 0) throw ctx.deadlineError();
    const values = [ctx.namespace, followUps.map((f) => f.id), followUps.map((f) => f.owner), followUps.map((f) => f.misses)];
    await ctx.send({ ...ctx.statements.misses, values }, budget);
  } catch (error) {
    const failure = toStoreError(sentError(error));
    for (const f of followUps) rejectAll(f.waiters, failure);
    return;
  }
  for (const f of followUps) {
    f.waiters.forEach((waiter, j) => {
      waiter.resolve(f.answers[j] as ClaimResult);
    });
  }
}

/** A claim batch whose reply was lost: each first claim answered by its row; later claims fail closed. */
async function resolveLostClaims(
  ctx: ReplayContext,
  unique: ClaimWaiter[],
  owners: string[],
  later: Map<string, ClaimWaiter[]>,
  original: unknown,
): Promise<void> {
  const failure = toStoreError(original);
  for (const list of later.values()) rejectAll(list, failure);
  let rows: Map<unknown, HeldRow>;
  try {
    rows = await readRows(
      ctx,
      unique.map((waiter) => waiter.id),
    );
  } catch {
    rejectAll(unique, failure);
    return;
  }
  const held = (row: HeldRow, waiter: ClaimWaiter) => heldStatus(row, waiter.fp);
  answerLost(unique, owners, rows, Math.floor(ctx.now()), { first: FIRST, held }, failure);
}

/**
 * Answers the claims of a batch from the rows its statement returned: each first claim by its row (this call's
 * owner → `first`, else how it is held), the later claims of its id from the row it left (laterClaims). Returns the
 * later claims that counted misses (answered once those are written).
 */
function answerClaims(unique: ClaimWaiter[], owners: string[], later: Map<string, ClaimWaiter[]>, rows: Map<unknown, HeldRow>): FollowUp[] {
  const followUps: FollowUp[] = [];
  unique.forEach((waiter, i) => {
    const row = rows.get(waiter.id);
    // Every id comes back (the upsert always writes); a missing one is a broken reply: fail closed.
    if (row === undefined) {
      const failure = toStoreError(new Error('claim: the statement returned no row for an id'));
      waiter.reject(failure);
      rejectAll(later.get(waiter.id) ?? [], failure);
      return;
    }
    waiter.resolve(row.owner === owners[i] ? FIRST : heldStatus(row, waiter.fp));
    const rest = later.get(waiter.id);
    if (rest === undefined) return;
    const { answers, misses } = laterClaims(row, rest);
    if (misses === 0) {
      rest.forEach((other, j) => {
        other.resolve(answers[j] as ClaimResult);
      });
    } else followUps.push({ waiters: rest, answers, owner: row.owner, misses, id: waiter.id });
  });
  return followUps;
}

/**
 * Runs one batch of claims (distinct ids in one statement, see claimBatchSql) and settles each. The later claims of
 * an id in the batch are answered from the row the first one left (laterClaims); the misses they count are written
 * by one more statement before they are answered (it failing fails them closed). A statement that failed fails
 * every claim closed (a lock wait: see withoutLocked); a lost reply is resolved per id by reading the rows: this
 * claim's owner → `first`, a live row → how it is held; anything else, and the later claims, fail closed.
 */
export async function runClaimBatch(ctx: ReplayContext, batch: ClaimWaiter[]): Promise<void> {
  if (ctx.closed()) return rejectAll(batch, closedError());
  const { unique: all, later } = splitById(batch);
  const outcome = await sendBatch(ctx, batch, all, later, (unique, owners) => ({
    ...ctx.statements.claimBatch,
    values: [
      ctx.namespace,
      unique.map((waiter) => waiter.id),
      unique.map((waiter) => waiter.expires),
      owners,
      unique.map((waiter) => waiter.fp),
      Math.floor(ctx.now()),
    ],
  }));
  const { unique, owners } = outcome;
  if (outcome.kind === 'failed') return rejectAll(batch, outcome.failure);
  if (outcome.kind === 'lost') return resolveLostClaims(ctx, unique, owners, later, outcome.error);
  const rows = new Map(outcome.rows.map((row) => [(row as HeldRow).id, row as HeldRow]));
  const followUps = answerClaims(unique, owners, later, rows);
  if (followUps.length > 0) await writeMisses(ctx, followUps, budgetOf(ctx, batch));
}

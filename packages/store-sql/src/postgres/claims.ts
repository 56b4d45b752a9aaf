import type { ClaimResult } from '@mrtr/core/store';
import { type ClaimWaiter, rejectAll, splitById } from '../shared/batching.js';
import { firstOf, type HeldRow, heldStatus, laterClaims, type SpendClock, spendRefusal } from '../shared/claims.js';
import { closedError, toStoreError } from '../shared/lifecycle.js';
import { budgetOf, type ReplayContext } from './context.js';
import { answerLost, type BatchOutcome, failPart, readRows, sendBatch, spendClock } from './lookups.js';
import { sentError } from './send.js';

/** Later claims of an id in a batch whose misses are written before they are answered. */
interface FollowUp {
  waiters: ClaimWaiter[];
  answers: ClaimResult[];
  owner: unknown;
  misses: number;
  id: string;
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
  const held = (row: HeldRow, waiter: ClaimWaiter) => heldStatus(row, waiter.fp, Number(row.now_ms));
  answerLost(unique, owners, rows, { first: firstOf, held }, failure);
}

/** Rejects a claim the statement refused (its expiry passed, or minted before the epoch); `true` when it did. */
function refused(waiter: ClaimWaiter, clock: SpendClock): boolean {
  const error = spendRefusal(waiter.expires, waiter.minted, clock);
  if (error === undefined) return false;
  waiter.reject(error);
  return true;
}

/**
 * Answers the claims of a batch from the rows its statement returned: each first claim by its row (this call's
 * owner → `first`, else how it is held), the later claims of its id from the row it left (laterClaims). A claim the
 * statement refused is rejected (it wrote nothing). Returns the later claims that counted misses (answered once those
 * are written).
 */
function answerClaims(
  unique: ClaimWaiter[],
  owners: string[],
  later: Map<string, ClaimWaiter[]>,
  rows: Map<unknown, HeldRow>,
  clock: SpendClock,
): FollowUp[] {
  const followUps: FollowUp[] = [];
  unique.forEach((waiter, i) => {
    const rest = (later.get(waiter.id) ?? []).filter((other) => !refused(other, clock));
    if (refused(waiter, clock)) {
      // Nothing was written for this id: its later claims fail closed (a retry answers them).
      rejectAll(rest, toStoreError(new Error('claim: an earlier claim of the id in the batch was refused')));
      return;
    }
    const row = rows.get(waiter.id);
    // Every admitted id comes back (the upsert always writes); a missing one is a broken reply: fail closed.
    if (row === undefined) {
      const failure = toStoreError(new Error('claim: the statement returned no row for an id'));
      waiter.reject(failure);
      rejectAll(rest, failure);
      return;
    }
    waiter.resolve(row.owner === owners[i] ? firstOf(row) : heldStatus(row, waiter.fp, clock.now));
    if (rest.length === 0) return;
    const { answers, misses } = laterClaims(row, rest, clock.now);
    if (misses === 0) {
      rest.forEach((other, j) => {
        other.resolve(answers[j] as ClaimResult);
      });
    } else followUps.push({ waiters: rest, answers, owner: row.owner, misses, id: waiter.id });
  });
  return followUps;
}

/**
 * Settles a part of a claim batch (see sendBatch): from the rows its statement returned (answerClaims; the misses of
 * later claims written by one more statement before they are answered, it failing fails them closed); a statement
 * that failed fails the part's claims closed; a lost reply is resolved per id by reading the rows (resolveLostClaims).
 */
async function settleClaims(ctx: ReplayContext, batch: ClaimWaiter[], outcome: BatchOutcome<ClaimWaiter>): Promise<void> {
  const { unique, owners, later } = outcome;
  if (outcome.kind === 'failed') return failPart(outcome, outcome.failure);
  if (outcome.kind === 'lost') return resolveLostClaims(ctx, unique, owners, later, outcome.error);
  let clock: SpendClock;
  try {
    clock = spendClock(outcome.rows);
  } catch (error) {
    return failPart(outcome, error);
  }
  const rows = new Map(outcome.rows.map((row) => [(row as HeldRow).id, row as HeldRow]));
  const followUps = answerClaims(unique, owners, later, rows, clock);
  if (followUps.length > 0) await writeMisses(ctx, followUps, budgetOf(ctx, batch));
}

/**
 * Runs one batch of claims (distinct ids in one statement, see claimBatchSql) and settles each (see settleClaims).
 * The later claims of an id in the batch are answered from the row the first one left (laterClaims). An id another
 * transaction holds fails only its own claims (see sendBatch).
 */
export async function runClaimBatch(ctx: ReplayContext, batch: ClaimWaiter[]): Promise<void> {
  if (ctx.closed()) return rejectAll(batch, closedError());
  const { unique, later } = splitById(batch);
  const config = (part: ClaimWaiter[], owners: string[]) => ({
    ...ctx.statements.claimBatch,
    values: [
      ctx.namespace,
      part.map((waiter) => waiter.id),
      part.map((waiter) => waiter.expires),
      owners,
      part.map((waiter) => waiter.fp),
      part.map((waiter) => waiter.minted ?? null),
      part.map((waiter) => (waiter.owner === undefined ? null : (waiter.leaseMs ?? null))),
      part.map((waiter) => waiter.reclaim),
    ],
  });
  return sendBatch(ctx, batch, unique, later, config, (outcome) => settleClaims(ctx, batch, outcome));
}

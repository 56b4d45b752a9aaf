import { ownerValue, rejectAll, splitById, type Waiter } from '../shared/batching.js';
import { type HeldRow, type SpendClock, spendRefusal } from '../shared/claims.js';
import { closedError, toStoreError } from '../shared/lifecycle.js';
import { isServerError } from './connection.js';
import { budgetOf, type ReplayContext } from './context.js';
import { answerLost, type BatchOutcome, failPart, sendBatch, spendClock } from './lookups.js';
import { Unsent } from './send.js';

/** How one consume ends, from the ids its statement took and the clock it judged by. */
function consumeAnswer(waiter: Waiter, won: boolean, clock: SpendClock): boolean {
  if (won) return true;
  const refused = spendRefusal(waiter.expires, waiter.minted, clock);
  if (refused !== undefined) throw refused;
  return false;
}

/**
 * The INSERT may have committed although its reply never arrived (timeout, connection lost). Ask
 * once: the row holds this call's owner → `true`; a live row of another owner (or of an older
 * version, without one) → `false`; no row, an expired row (this write would have taken it over) or
 * no answer → still unknown → the original failure.
 */
async function resolveLost(ctx: ReplayContext, id: string, mine: string, original: unknown): Promise<boolean> {
  let row: HeldRow | undefined;
  try {
    const config = { ...ctx.statements.owner, values: [ctx.namespace, id], query_timeout: ctx.settings.statementTimeoutMs };
    row = (await ctx.bounded(ctx.queryOnConnection(config))).rows[0] as HeldRow | undefined;
  } catch {
    throw toStoreError(original);
  }
  if (row !== undefined && row.owner === mine) return true;
  if (row !== undefined && Number(row.expires_at) >= Number(row.now_ms)) return false;
  throw toStoreError(original);
}

/**
 * One consume, one statement (no group commit, or a batch of one). `budgetMs` is what is left of the
 * deadline of a consume that waited in the group-commit queue.
 */
export async function consumeOne(ctx: ReplayContext, waiter: Waiter, mine: string, budgetMs = ctx.deadlineMs): Promise<boolean> {
  let rows: unknown[];
  try {
    const values = [ctx.namespace, waiter.id, waiter.expires, mine, waiter.minted ?? null];
    rows = (await ctx.send({ ...ctx.statements.consume, values }, budgetMs)).rows;
  } catch (error) {
    // Never sent, or the server answered with an error (the statement did not commit): nothing to
    // ask. Otherwise — no reply in time, a connection lost — the owner lookup tells.
    if (error instanceof Unsent) throw toStoreError(error.error);
    if (isServerError(error) || ctx.closed()) throw toStoreError(error);
    return resolveLost(ctx, waiter.id, mine, error);
  }
  const won = rows.some((row) => (row as { id: unknown }).id === waiter.id);
  return consumeAnswer(waiter, won, spendClock(rows));
}

/** {@link resolveLost} for a batch: one `SELECT` of the owners of its ids. */
async function resolveLostBatch(
  ctx: ReplayContext,
  unique: Waiter[],
  owners: string[],
  repeated: Waiter[],
  original: unknown,
): Promise<void> {
  const failure = toStoreError(original);
  let rows: Map<unknown, HeldRow>;
  try {
    const ids = unique.map((waiter) => waiter.id);
    const config = { ...ctx.statements.owners, values: [ctx.namespace, ids], query_timeout: ctx.settings.statementTimeoutMs };
    const result = await ctx.bounded(ctx.queryOnConnection(config));
    rows = new Map(result.rows.map((row) => [(row as { id: unknown }).id, row as HeldRow]));
  } catch {
    rejectAll(unique, failure);
    rejectAll(repeated, failure);
    return;
  }
  answerLost(unique, owners, rows, { first: () => true, held: () => false }, failure);
  // A repeated id: its first waiter was answered (true or false) or failed; either way this one is not first.
  for (const waiter of repeated) {
    const row = rows.get(waiter.id);
    if (row !== undefined && Number(row.expires_at) >= Number(row.now_ms)) waiter.resolve(false);
    else waiter.reject(failure);
  }
}

/** Settles a consume with its answer, or the refusal or failure it ended with. */
function settle(waiter: Waiter, answer: () => boolean): void {
  try {
    waiter.resolve(answer());
  } catch (error) {
    waiter.reject(toStoreError(error));
  }
}

/** A batch of one: a single consume statement. */
async function runLone(ctx: ReplayContext, batch: Waiter[]): Promise<void> {
  const waiter = batch[0] as Waiter;
  try {
    waiter.resolve(await consumeOne(ctx, waiter, ownerValue(), budgetOf(ctx, batch)));
  } catch (error) {
    waiter.reject(toStoreError(error));
  }
}

/**
 * Settles a part of a batch (see sendBatch): each first waiter of an id by the statement's rows and clock, a later
 * waiter of it `false` (only one of them can be first; or refused as its first would be); a failed statement fails
 * them closed, a lost reply is resolved by one `SELECT` of the owners, as for a single consume.
 */
function settleConsumes(ctx: ReplayContext, outcome: BatchOutcome<Waiter>): Promise<void> | void {
  const { unique, owners } = outcome;
  const repeated = [...outcome.later.values()].flat();
  if (outcome.kind === 'lost') return resolveLostBatch(ctx, unique, owners, repeated, outcome.error);
  if (outcome.kind === 'failed') return failPart(outcome, outcome.failure);
  let clock: SpendClock;
  try {
    clock = spendClock(outcome.rows);
  } catch (error) {
    return failPart(outcome, error);
  }
  const won = new Set(outcome.rows.map((row) => (row as { id: unknown }).id));
  for (const waiter of unique) settle(waiter, () => consumeAnswer(waiter, won.has(waiter.id), clock));
  for (const waiter of repeated) settle(waiter, () => consumeAnswer(waiter, false, clock));
}

/**
 * Runs one batch of queued consumes and settles each waiter. The first waiter of an id goes into the statement; a
 * later waiter of the same id shares its part's answer (see settleConsumes). An id another transaction holds fails
 * only its own consumes (see sendBatch).
 */
export async function runConsumeBatch(ctx: ReplayContext, batch: Waiter[]): Promise<void> {
  if (ctx.closed()) return rejectAll(batch, closedError());
  if (budgetOf(ctx, batch) <= 0) {
    for (const waiter of batch) waiter.reject(ctx.deadlineError());
    return;
  }
  if (batch.length === 1) return runLone(ctx, batch);
  const { unique, later } = splitById(batch);
  const config = (part: Waiter[], owners: string[]) => ({
    ...ctx.statements.batch,
    values: [
      ctx.namespace,
      part.map((waiter) => waiter.id),
      part.map((waiter) => waiter.expires),
      owners,
      part.map((waiter) => waiter.minted ?? null),
    ],
  });
  return sendBatch(ctx, batch, unique, later, config, (outcome) => settleConsumes(ctx, outcome));
}

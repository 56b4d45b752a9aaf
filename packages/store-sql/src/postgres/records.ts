import { byId, type RecordWaiter, rejectAll } from '../shared/batching.js';
import type { HeldRow } from '../shared/claims.js';
import { closedError, toStoreError } from '../shared/lifecycle.js';
import type { PgQueryResultLike } from '../shared/drivers.js';
import { localTimeoutsSql } from './connection.js';
import { budgetOf, type ReplayContext } from './context.js';
import { readRows, uncommitted } from './lookups.js';
import { sentError, Unsent } from './send.js';
import { lockKey, sqlLiteral } from './statements.js';

/** Class id ("mrtb") of the namespace's outcome-budget lock (see recordText). */
const BUDGET_LOCK_CLASS = 0x6d727462;

/**
 * A record batch as one request: `BEGIN`, the transaction's own bounds, the namespace's outcome-budget lock (record
 * batches of one namespace run one at a time, on every instance, so the budget the statement reads includes every
 * record committed before it), the statement with its values written in as literals (a simple query takes no
 * parameters), `COMMIT`. One round trip; a reply lost after it is resolved by reading the rows.
 */
export function recordText(ctx: ReplayContext): (values: readonly unknown[]) => string {
  const head =
    `BEGIN; ${localTimeoutsSql(ctx.settings)}; SET LOCAL idle_in_transaction_session_timeout = ${ctx.settings.replyWaitMs}; ` +
    `SELECT pg_advisory_xact_lock(${BUDGET_LOCK_CLASS}, ${lockKey(`${ctx.table}\u0000${ctx.namespace}`)}); `;
  const sql = ctx.statements.recordBatchSql;
  return (values) => `${head}${sql.replace(/\$(\d)/g, (_, n: string) => sqlLiteral(values[Number(n) - 1]))}; COMMIT`;
}

/** The first record of each (id, fingerprint) in a batch, sorted by id, and the repeated ones (each with its first). */
function splitRecords(batch: readonly RecordWaiter[]): { first: RecordWaiter[]; repeated: [RecordWaiter, RecordWaiter][] } {
  const seen = new Map<string, RecordWaiter>();
  const first: RecordWaiter[] = [];
  const repeated: [RecordWaiter, RecordWaiter][] = [];
  for (const waiter of batch) {
    const key = `${waiter.id}\u0000${waiter.fp}`;
    const earlier = seen.get(key);
    if (earlier !== undefined) repeated.push([waiter, earlier]);
    else {
      seen.set(key, waiter);
      first.push(waiter);
    }
  }
  first.sort(byId);
  return { first, repeated };
}

/** A repeated record answers as its first did when both have the same owner (idempotent by owner), else `false`. */
const repeatAnswer = (waiter: RecordWaiter, earlier: RecordWaiter, kept: boolean): boolean =>
  waiter.owner !== undefined && waiter.owner === earlier.owner && kept;

/**
 * Sends the record transaction. A failure before the request was sent (no connection) wrote nothing: the batch is
 * sent once more, with a deadline of its own (a record waits at most twice the store's deadline). Returns whether
 * each id's outcome was kept (an id missing was not updated).
 */
async function sendRecords(ctx: ReplayContext, batch: RecordWaiter[], text: string): Promise<Map<unknown, boolean>> {
  let result: PgQueryResultLike | undefined;
  for (let attempt = 0; result === undefined; attempt++) {
    const budget = attempt === 0 ? budgetOf(ctx, batch) : ctx.deadlineMs;
    if (budget <= 0) throw new Unsent(ctx.deadlineError());
    try {
      result = await ctx.send({ text }, budget, true);
    } catch (error) {
      if (!(error instanceof Unsent) || attempt > 0 || ctx.closed()) throw error;
    }
  }
  // pg answers a simple query of several statements with one result each: the statement's is the one before COMMIT.
  const results = result as unknown as PgQueryResultLike[];
  const rows = Array.isArray(results) ? (results[results.length - 2]?.rows ?? []) : [];
  return new Map(rows.map((row) => [(row as { id: unknown }).id, (row as { kept: unknown }).kept === true]));
}

/**
 * A record batch whose reply was lost, resolved per id by reading the rows: this outcome on the row → as kept;
 * `''`, another fingerprint or another outcome → `false`; else unknown → fails closed.
 */
async function resolveLostRecords(ctx: ReplayContext, first: RecordWaiter[], failure: unknown): Promise<void> {
  let rows: Map<unknown, HeldRow>;
  try {
    rows = await readRows(
      ctx,
      first.map((waiter) => waiter.id),
    );
  } catch {
    return rejectAll(first, failure);
  }
  for (const waiter of first) {
    const row = rows.get(waiter.id);
    if (row !== undefined && waiter.owner !== undefined && row.owner !== waiter.owner) waiter.resolve(false);
    else if (row !== undefined && row.fp === waiter.fp && row.outcome === waiter.outcome) waiter.resolve(waiter.outcome !== '');
    else if (row !== undefined && (row.fp !== waiter.fp || (row.outcome !== null && row.outcome !== undefined))) waiter.resolve(false);
    else waiter.reject(failure);
  }
}

/**
 * Runs one batch of records in one transaction under the namespace's budget lock (so the budget read by the
 * statement includes every record committed before it, on any instance), settles each. A repeated (id,
 * fingerprint) in the batch is answered `false` (an outcome is recorded once). A failed statement fails every
 * record closed; a lost reply is resolved per id by reading the rows (resolveLostRecords).
 */
export async function runRecordBatch(
  ctx: ReplayContext,
  text: (values: readonly unknown[]) => string,
  batch: RecordWaiter[],
): Promise<void> {
  if (ctx.closed()) return rejectAll(batch, closedError());
  const { first, repeated } = splitRecords(batch);
  const values = [
    ctx.namespace,
    first.map((waiter) => waiter.id),
    first.map((waiter) => waiter.fp),
    first.map((waiter) => waiter.outcome),
    first.map((waiter) => waiter.owner ?? null),
    ctx.outcomeBudgetBytes,
  ];
  let kept: Map<unknown, boolean>;
  try {
    kept = await sendRecords(ctx, batch, text(values));
  } catch (error) {
    const failure = toStoreError(sentError(error));
    rejectAll(
      repeated.map(([waiter]) => waiter),
      failure,
    );
    if (uncommitted(ctx, error)) return rejectAll(first, failure);
    return resolveLostRecords(ctx, first, failure);
  }
  for (const waiter of first) waiter.resolve(kept.get(waiter.id) === true);
  for (const [waiter, earlier] of repeated) waiter.resolve(repeatAnswer(waiter, earlier, kept.get(earlier.id) === true));
}

import { byId, type RecordWaiter, rejectAll } from '../shared/batching.js';
import { budgetCountedKeys, budgetShardKey, type HeldRow, shardBudgetBytes } from '../shared/claims.js';
import { closedError, toStoreError } from '../shared/lifecycle.js';
import type { PgQueryResultLike } from '../shared/drivers.js';
import { localTimeoutsSql } from './connection.js';
import { budgetOf, type ReplayContext } from './context.js';
import { readRows, uncommitted } from './lookups.js';
import { sentError, Unsent } from './send.js';
import { lockKey, sqlLiteral } from './statements.js';

/** Class id ("mrtb") of the locks of a namespace's outcome budget shards (see recordTexts). */
const BUDGET_LOCK_CLASS = 0x6d727462;

/** A statement with its values written in as literals (a simple query takes no parameters). */
const written = (sql: string, values: readonly unknown[]): string =>
  sql.replace(/\$(\d)/g, (_, n: string) => sqlLiteral(values[Number(n) - 1]));

/** The requests of record batches: each a whole transaction in one simple query, so one round trip. */
export interface RecordTexts {
  /**
   * A batch of budget shard `shard`: `BEGIN`, the transaction's own bounds, the shard's lock (record batches of one
   * shard of the namespace run one at a time, on every instance, so the bytes the statement reads include every
   * record of the shard committed before it), the statement (it waits for no row: rows other transactions hold come
   * back as held), `COMMIT`.
   */
  batch(values: readonly unknown[], shard: number): string;
  /**
   * The records of one held `id` alone: as a batch, but the transaction first waits (`lock_timeout` = `lockWaitMs`)
   * for the id's row and only then takes the shard's lock, so it never holds that lock while it waits for a row.
   */
  lone(values: readonly unknown[], id: string, lockWaitMs: number, shard: number): string;
}

export function recordTexts(ctx: ReplayContext): RecordTexts {
  const { settings, statements } = ctx;
  const begin = (lockTimeoutMs: number) =>
    `BEGIN; ${localTimeoutsSql({ statementTimeoutMs: settings.statementTimeoutMs, lockTimeoutMs })}; ` +
    `SET LOCAL idle_in_transaction_session_timeout = ${settings.replyWaitMs}; `;
  // One shard: the namespace's lock of a store before shards (same key). Else one lock per shard.
  const shardLocks = Array.from(
    { length: ctx.budgetShards },
    (_, k) =>
      `SELECT pg_advisory_xact_lock(${BUDGET_LOCK_CLASS}, ${lockKey(ctx.budgetShards === 1 ? `${ctx.table}\u0000${ctx.namespace}` : `${ctx.table}\u0000${ctx.namespace}\u0000${k}`)}); `,
  );
  const lockOf = (shard: number): string => shardLocks[shard] as string;
  const statement = (values: readonly unknown[]) => `${written(statements.recordBatchSql, values)}; COMMIT`;
  return {
    batch: (values, shard) => `${begin(settings.lockTimeoutMs)}${lockOf(shard)}${statement(values)}`,
    lone: (values, id, lockWaitMs, shard) =>
      `${begin(lockWaitMs)}${written(statements.recordLockSql, [ctx.namespace, id])}; ${lockOf(shard)}${statement(values)}`,
  };
}

/** The key of a record in a batch and in a reply: its id and fingerprint. */
const recordKey = (id: unknown, fp: unknown): string => `${String(id)}\u0000${String(fp)}`;

/** The first record of each (id, fingerprint) in a batch, sorted by id, and the repeated ones (each with its first). */
function splitRecords(batch: readonly RecordWaiter[]): { first: RecordWaiter[]; repeated: [RecordWaiter, RecordWaiter][] } {
  const seen = new Map<string, RecordWaiter>();
  const first: RecordWaiter[] = [];
  const repeated: [RecordWaiter, RecordWaiter][] = [];
  for (const waiter of batch) {
    const key = recordKey(waiter.id, waiter.fp);
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
 * What a record request answered: whether each (id, fingerprint)'s outcome was kept (one missing was not updated: a
 * record with another fingerprint than the claim's is not, even beside the right one), and the ids held.
 */
interface RecordReply {
  kept: Map<string, boolean>;
  held: Set<unknown>;
}

/**
 * Sends a record request. A failure before it was sent (no connection) wrote nothing: it is sent once more, with a
 * deadline of its own (a record waits at most twice the store's deadline).
 */
async function sendRecords(ctx: ReplayContext, batch: RecordWaiter[], text: string): Promise<RecordReply> {
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
  const rows = (Array.isArray(results) ? (results[results.length - 2]?.rows ?? []) : []) as {
    id: unknown;
    fp: unknown;
    kept: unknown;
    held: unknown;
  }[];
  return {
    kept: new Map(rows.filter((row) => row.held !== true).map((row) => [recordKey(row.id, row.fp), row.kept === true])),
    held: new Set(rows.filter((row) => row.held === true).map((row) => row.id)),
  };
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

/** Adds `value` to the list of `key`. */
function append<V>(map: Map<string, V[]>, key: string, value: V): void {
  const list = map.get(key);
  if (list === undefined) map.set(key, [value]);
  else list.push(value);
}

/** The values of the record statement for `first` (distinct (id, fingerprint) pairs of shard `shard`, sorted by id). */
const recordValues = (ctx: ReplayContext, first: readonly RecordWaiter[], shard: number): unknown[] => [
  ctx.namespace,
  first.map((waiter) => waiter.id),
  first.map((waiter) => waiter.fp),
  first.map((waiter) => waiter.outcome),
  first.map((waiter) => waiter.owner ?? null),
  shardBudgetBytes(ctx.outcomeBudgetBytes, ctx.budgetShards, shard),
  budgetShardKey(ctx.namespace, ctx.budgetShards, shard),
  budgetCountedKeys(ctx.namespace, ctx.budgetShards, shard),
];

/**
 * Sends one record request for `first` and settles them and their `repeats` (by their first's id), but those of the
 * ids the statement found held by another transaction: returned, unsettled, with their first records. A failed
 * request fails them all closed; a lost reply is resolved per id by reading the rows (resolveLostRecords).
 */
async function recordPass(
  ctx: ReplayContext,
  batch: RecordWaiter[],
  first: RecordWaiter[],
  repeats: Map<string, [RecordWaiter, RecordWaiter][]>,
  text: string,
): Promise<Map<string, RecordWaiter[]>> {
  const held = new Map<string, RecordWaiter[]>();
  let reply: RecordReply;
  try {
    reply = await sendRecords(ctx, batch, text);
  } catch (error) {
    const failure = toStoreError(sentError(error));
    for (const waiter of first) {
      rejectAll(
        (repeats.get(waiter.id) ?? []).map(([repeated]) => repeated),
        failure,
      );
      repeats.delete(waiter.id);
    }
    if (uncommitted(ctx, error)) rejectAll(first, failure);
    else await resolveLostRecords(ctx, first, failure);
    return held;
  }
  for (const waiter of first) {
    if (reply.held.has(waiter.id)) append(held, waiter.id, waiter);
    else waiter.resolve(reply.kept.get(recordKey(waiter.id, waiter.fp)) === true);
  }
  for (const waiter of first) {
    if (held.has(waiter.id)) continue;
    for (const [repeated, earlier] of repeats.get(waiter.id) ?? [])
      repeated.resolve(repeatAnswer(repeated, earlier, reply.kept.get(recordKey(earlier.id, earlier.fp)) === true));
    repeats.delete(waiter.id);
  }
  return held;
}

/**
 * Runs one batch of records, all of budget shard `shard` (see budgetShardOf), in one transaction under the shard's
 * lock (so the bytes read by the statement include every record of the shard committed before it, on any instance),
 * settles each. A repeated (id,
 * fingerprint) in the batch is answered `false` (an outcome is recorded once; as its first, by the same owner). The
 * statement skips the rows another transaction holds; the records of each such id then run alone, in turn, within
 * what is left of the batch's time (their wait for the row bounded by it), so one held id fails only its own records.
 */
export async function runRecordBatch(ctx: ReplayContext, texts: RecordTexts, batch: RecordWaiter[], shard: number): Promise<void> {
  if (ctx.closed()) return rejectAll(batch, closedError());
  const { first, repeated } = splitRecords(batch);
  const repeats = new Map<string, [RecordWaiter, RecordWaiter][]>();
  for (const pair of repeated) append(repeats, pair[1].id, pair);
  const held = await recordPass(ctx, batch, first, repeats, texts.batch(recordValues(ctx, first, shard), shard));
  for (const [id, waiters] of held) {
    const lockWaitMs = Math.max(1, Math.min(ctx.settings.lockTimeoutMs, Math.floor(budgetOf(ctx, batch))));
    const still = await recordPass(ctx, batch, waiters, repeats, texts.lone(recordValues(ctx, waiters, shard), id, lockWaitMs, shard));
    if (still.size === 0) continue;
    // Held again (taken by yet another transaction in between): unknown, fails closed.
    const failure = toStoreError(new Error('record: the row is held by another transaction'));
    rejectAll(waiters, failure);
    rejectAll(
      (repeats.get(id) ?? []).map(([waiter]) => waiter),
      failure,
    );
  }
}

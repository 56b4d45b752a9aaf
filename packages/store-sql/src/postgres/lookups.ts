import { type HeldRow, isLive, type SpendClock } from '../shared/claims.js';
import { toStoreError } from '../shared/lifecycle.js';
import { isServerError, LOCK_NOT_AVAILABLE, QUERY_CANCELED } from './connection.js';
import { sentError, Unsent } from './send.js';
import { ownersOf } from '../shared/batching.js';
import type { PgQueryConfigLike } from '../shared/drivers.js';
import { budgetOf } from './context.js';
import type { ReplayContext } from './context.js';

/** Rows of some ids, read on a connection of its own under the same bounds (after a lost reply). */
export async function readRows(ctx: ReplayContext, ids: string[]): Promise<Map<unknown, HeldRow>> {
  const result = await ctx.bounded(
    ctx.queryOnConnection({ ...ctx.statements.rows, values: [ctx.namespace, ids], query_timeout: ctx.settings.statementTimeoutMs }),
  );
  return new Map(result.rows.map((row) => [(row as HeldRow).id, row as HeldRow]));
}

/**
 * A batch statement the server cancelled while it waited for a lock (`lock_timeout`, or `statement_timeout`):
 * another transaction holds some of its ids' rows. Which ones is asked once (SKIP LOCKED: waits for nothing); when
 * that names some but not all, their waiters fail closed (nothing of the statement committed) and the batch runs
 * once more without them, so that unrelated calls are not failed by a slow id. Returns the waiters to run again,
 * or `undefined` when the whole batch fails as it is.
 */
export async function withoutLocked<W extends { id: string; reject(error: unknown): void }>(
  ctx: ReplayContext,
  unique: readonly W[],
  later: Map<string, W[]>,
  error: unknown,
): Promise<W[] | undefined> {
  const code = (error as { code?: unknown } | null)?.code;
  if (unique.length < 2 || ctx.closed() || (code !== LOCK_NOT_AVAILABLE && code !== QUERY_CANCELED)) return undefined;
  let locked: Set<unknown>;
  try {
    const ids = unique.map((waiter) => waiter.id);
    const result = await ctx.bounded(
      ctx.queryOnConnection({ ...ctx.statements.locked, values: [ctx.namespace, ids], query_timeout: ctx.settings.statementTimeoutMs }),
    );
    locked = new Set(result.rows.map((row) => (row as { id: unknown }).id));
  } catch {
    return undefined;
  }
  const rest = unique.filter((waiter) => !locked.has(waiter.id));
  if (rest.length === 0 || rest.length === unique.length) return undefined;
  const failure = toStoreError(error);
  for (const waiter of unique) {
    if (!locked.has(waiter.id)) continue;
    waiter.reject(failure);
    for (const other of later.get(waiter.id) ?? []) other.reject(failure);
    later.delete(waiter.id);
  }
  return rest;
}

/**
 * Answers the first waiters of a batch whose reply was lost, from the rows read back (each with the server's time it
 * was read at): the row holds this call's owner → `first(row)`; a live row → `held(row, waiter)`; no row or an
 * expired one → still unknown → `failure`.
 */
export function answerLost<W extends { id: string; resolve(value: T): void; reject(error: unknown): void }, T>(
  unique: readonly W[],
  owners: readonly string[],
  rows: Map<unknown, HeldRow>,
  answers: { first(row: HeldRow): T; held(row: HeldRow, waiter: W): T },
  failure: unknown,
): void {
  unique.forEach((waiter, i) => {
    const row = rows.get(waiter.id);
    if (row !== undefined && row.owner === owners[i]) waiter.resolve(answers.first(row));
    else if (row !== undefined && isLive(row, Number(row.now_ms))) waiter.resolve(answers.held(row, waiter));
    else waiter.reject(failure);
  });
}

/**
 * The server's time and the ledger epoch a consume or claim statement judged by: its last row (see clockRow). A reply
 * without it is broken: fail closed.
 */
export function spendClock(rows: readonly unknown[]): SpendClock {
  const last = rows[rows.length - 1] as { now_ms?: unknown; epoch_ms?: unknown } | undefined;
  const now = Number(last?.now_ms ?? Number.NaN);
  const epoch = Number(last?.epoch_ms ?? Number.NaN);
  if (!Number.isSafeInteger(now) || !Number.isSafeInteger(epoch)) throw new Error('the statement returned no clock row');
  return { now, epoch };
}

/** The statement did not commit (never sent, or refused by the server) or the store is closed: nothing to ask. */
export const uncommitted = (ctx: ReplayContext, error: unknown): boolean => error instanceof Unsent || isServerError(error) || ctx.closed();

/** On a batch's first pass, the waiters to run again without the locked ids (see {@link withoutLocked}). */
export const rerunWithoutLocked = <W extends { id: string; reject(error: unknown): void }>(
  ctx: ReplayContext,
  pass: number,
  unique: readonly W[],
  later: Map<string, W[]>,
  error: unknown,
): Promise<W[] | undefined> => (pass === 0 && isServerError(error) ? withoutLocked(ctx, unique, later, error) : Promise.resolve(undefined));

/** How a batch statement ended: answered (its rows), failed without committing, or its reply lost. */
export type BatchOutcome<W> = { unique: W[]; owners: string[] } & (
  | { kind: 'answered'; rows: unknown[] }
  | { kind: 'failed'; failure: unknown }
  | { kind: 'lost'; error: unknown }
);

/**
 * Sends one batch statement for the first waiters of its ids (`config` builds it from them and their fresh owner
 * values) within what is left of the batch's deadline. A statement cancelled on a lock runs once more without the
 * locked ids (see {@link withoutLocked}); the `unique` of the outcome are the waiters of the last try.
 */
export async function sendBatch<W extends { id: string; reject(error: unknown): void }>(
  ctx: ReplayContext,
  batch: readonly { queuedAt: number }[],
  all: W[],
  later: Map<string, W[]>,
  config: (unique: W[], owners: string[]) => PgQueryConfigLike,
): Promise<BatchOutcome<W>> {
  let unique = all;
  for (let pass = 0; ; pass++) {
    const owners = ownersOf(unique as readonly { owner?: string | undefined }[]);
    try {
      const budget = budgetOf(ctx, batch);
      if (budget <= 0) throw new Unsent(ctx.deadlineError());
      const result = await ctx.send(config(unique, owners), budget);
      return { kind: 'answered', unique, owners, rows: result.rows };
    } catch (error) {
      if (!uncommitted(ctx, error)) return { kind: 'lost', unique, owners, error };
      const rest = await rerunWithoutLocked(ctx, pass, unique, later, error);
      if (rest === undefined) return { kind: 'failed', unique, owners, failure: toStoreError(sentError(error)) };
      unique = rest;
    }
  }
}

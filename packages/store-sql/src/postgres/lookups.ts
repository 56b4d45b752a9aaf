import { type HeldRow, isLive, type SpendClock } from '../shared/claims.js';
import { toStoreError } from '../shared/lifecycle.js';
import { isServerError, LOCK_NOT_AVAILABLE, QUERY_CANCELED } from './connection.js';
import { sentError, Unsent } from './send.js';
import { ownersOf, rejectAll } from '../shared/batching.js';
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
 * The ids of `unique` whose rows another transaction holds locked, asked once after a statement the server cancelled
 * while it waited (SKIP LOCKED: waits for nothing; autocommit releases what it took at once); `undefined` when the
 * question fails. A row another transaction is still inserting is invisible to it.
 */
async function lockedIds(ctx: ReplayContext, unique: readonly { id: string }[]): Promise<Set<unknown> | undefined> {
  try {
    const ids = unique.map((waiter) => waiter.id);
    const result = await ctx.bounded(
      ctx.queryOnConnection({ ...ctx.statements.locked, values: [ctx.namespace, ids], query_timeout: ctx.settings.statementTimeoutMs }),
    );
    return new Set(result.rows.map((row) => (row as { id: unknown }).id));
  } catch {
    return undefined;
  }
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

/**
 * How a batch statement ended, for some of the batch's first waiters (`unique`, with the `later` waiters of their ids):
 * answered (its rows), failed without committing (`error` as the server sent it), or its reply lost.
 */
export type BatchOutcome<W> = { unique: W[]; owners: string[]; later: Map<string, W[]> } & (
  | { kind: 'answered'; rows: unknown[] }
  | { kind: 'failed'; failure: unknown; error: unknown }
  | { kind: 'lost'; error: unknown }
);

type Rejectable = { reject(error: unknown): void };

/** The SQLSTATE the server answered a failed statement with (`undefined`: not a server error). */
const codeOf = (error: unknown): unknown => (isServerError(sentError(error)) ? (sentError(error) as { code: unknown }).code : undefined);

/**
 * Sends the batch statement for the first waiters of its ids (`config` builds it from them and their fresh owner
 * values), each try within what is left of the batch's deadline, and hands every part of the batch to `settle` as
 * it ends. One id held by another transaction decides only its own calls: a statement the server cancelled while it
 * waited (`lock_timeout`, or `statement_timeout`) asks which of its ids' rows are held locked (lockedIds); those
 * fail closed (they waited already) and the rest runs once more. A statement cancelled by `lock_timeout` that no such
 * question explains (a row another transaction is still inserting is invisible to it) is split: each of its ids runs
 * alone, in turn (one connection, as the batch had), so only the held one waits for the lock again and fails.
 */
export async function sendBatch<W extends { id: string; reject(error: unknown): void }>(
  ctx: ReplayContext,
  batch: readonly { queuedAt: number }[],
  all: W[],
  later: Map<string, W[]>,
  config: (unique: W[], owners: string[]) => PgQueryConfigLike,
  settle: (outcome: BatchOutcome<W>) => Promise<void> | void,
): Promise<void> {
  const send = async (unique: W[]): Promise<BatchOutcome<W>> => {
    const owners = ownersOf(unique as readonly { owner?: string | undefined }[]);
    const part = { unique, owners, later: laterOf(later, unique) };
    try {
      const budget = budgetOf(ctx, batch);
      if (budget <= 0) throw new Unsent(ctx.deadlineError());
      return { ...part, kind: 'answered', rows: (await ctx.send(config(unique, owners), budget)).rows };
    } catch (error) {
      if (!uncommitted(ctx, error)) return { ...part, kind: 'lost', error };
      return { ...part, kind: 'failed', failure: toStoreError(sentError(error)), error };
    }
  };
  type Failed = Extract<BatchOutcome<W>, { kind: 'failed' }>;
  const stalled = (outcome: BatchOutcome<W>, codes: readonly string[]): outcome is Failed =>
    outcome.kind === 'failed' && outcome.unique.length > 1 && !ctx.closed() && codes.includes(codeOf(outcome.error) as string);
  let outcome = await send(all);
  if (!stalled(outcome, [LOCK_NOT_AVAILABLE, QUERY_CANCELED])) return settle(outcome);
  const locked = await lockedIds(ctx, outcome.unique);
  if (locked === undefined || locked.size === outcome.unique.length) return settle(outcome);
  // Parts settle as they end (a lost reply's lookup does not hold up the next part; one that throws fails its own
  // calls closed); the batch ends with the last.
  const settling: Promise<void>[] = [];
  const settlePart = (part: BatchOutcome<W>) =>
    settling.push((async () => settle(part))().catch((error: unknown) => failPart(part, error)));
  if (locked.size > 0) {
    const held = outcome.unique.filter((waiter) => locked.has(waiter.id));
    settlePart({ ...outcome, unique: held, owners: [], later: laterOf(later, held) });
    outcome = await send(outcome.unique.filter((waiter) => !locked.has(waiter.id)));
  }
  if (!stalled(outcome, [LOCK_NOT_AVAILABLE])) settlePart(outcome);
  else for (const waiter of outcome.unique) settlePart(await send([waiter]));
  await Promise.all(settling);
}

/** Fails the calls of a part of a batch closed: its first waiters and the later ones of their ids. */
export function failPart(part: { unique: readonly Rejectable[]; later: Map<string, readonly Rejectable[]> }, error: unknown): void {
  const failure = toStoreError(error);
  rejectAll(part.unique, failure);
  for (const list of part.later.values()) rejectAll(list, failure);
}

/** The later waiters of the ids of `unique`. */
function laterOf<W extends { id: string }>(later: Map<string, W[]>, unique: readonly W[]): Map<string, W[]> {
  const part = new Map<string, W[]>();
  for (const waiter of unique) {
    const list = later.get(waiter.id);
    if (list !== undefined) part.set(waiter.id, list);
  }
  return part;
}

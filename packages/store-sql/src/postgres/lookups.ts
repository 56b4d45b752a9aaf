import type { HeldRow } from '../shared/claims.js';
import { toStoreError } from '../shared/lifecycle.js';
import { LOCK_NOT_AVAILABLE, QUERY_CANCELED } from './connection.js';
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

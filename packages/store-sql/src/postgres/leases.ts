import type { PgQueryConfigLike, PgQueryResultLike } from '../shared/drivers.js';
import { toStoreError } from '../shared/lifecycle.js';
import type { ReplayContext } from './context.js';
import { uncommitted } from './lookups.js';
import { sentError } from './send.js';

/**
 * One statement that answers the same when run twice (renew, release, the time): sent once; when its reply is lost
 * (no answer in time, a connection cut after it was sent) it is run once more on a connection of its own under the
 * same bounds, and that answer is the answer. A failure of both is `ERR_STORE_UNAVAILABLE` (a retry by the caller is
 * safe as well).
 */
async function sendIdempotent(ctx: ReplayContext, config: PgQueryConfigLike): Promise<PgQueryResultLike> {
  ctx.assertOpen();
  try {
    return await ctx.send(config, ctx.deadlineMs);
  } catch (error) {
    const failure = toStoreError(sentError(error));
    if (uncommitted(ctx, error)) throw failure;
    try {
      return await ctx.bounded(ctx.queryOnConnection({ ...config, query_timeout: ctx.settings.statementTimeoutMs }));
    } catch {
      throw failure;
    }
  }
}

/** `renew`: the lease of the owner's unrecorded, live claim runs `leaseMs` from the server's now; `true` when it did. */
export async function renewLease(ctx: ReplayContext, id: string, owner: string, leaseMs: number): Promise<boolean> {
  const result = await sendIdempotent(ctx, { ...ctx.statements.renew, values: [ctx.namespace, id, owner, leaseMs] });
  return (result.rowCount ?? 0) > 0;
}

/** `release`: compare-and-delete of the owner's unrecorded claim; `true` when the owner holds no claim of `id` afterwards. */
export async function releaseClaim(ctx: ReplayContext, id: string, owner: string): Promise<boolean> {
  const result = await sendIdempotent(ctx, { ...ctx.statements.release, values: [ctx.namespace, id, owner] });
  return (result.rows[0] as { free?: unknown } | undefined)?.free === true;
}

/** `ledgerEpoch`: the namespace's ledger epoch, written with the server's time when missing (safe to run twice). */
export async function ledgerEpochOf(ctx: ReplayContext): Promise<number> {
  const result = await sendIdempotent(ctx, { ...ctx.statements.ledgerEpoch, values: [ctx.namespace] });
  const epoch = Number((result.rows[0] as { epoch_ms?: unknown } | undefined)?.epoch_ms ?? Number.NaN);
  if (!Number.isSafeInteger(epoch)) throw toStoreError(new Error('ledgerEpoch: the server returned no epoch'));
  return epoch;
}

/** `time`: the server's clock, epoch ms. */
export async function serverTime(ctx: ReplayContext): Promise<number> {
  const result = await sendIdempotent(ctx, { ...ctx.statements.time, values: [] });
  const now = Number((result.rows[0] as { now_ms?: unknown } | undefined)?.now_ms ?? Number.NaN);
  if (!Number.isSafeInteger(now)) throw toStoreError(new Error('time: the server returned no time'));
  return now;
}

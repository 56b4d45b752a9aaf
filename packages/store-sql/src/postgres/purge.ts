import type { PgPoolLike } from '../shared/drivers.js';
import type { PurgeSettings } from '../shared/options.js';
import type { ReplayContext } from './context.js';

/**
 * One purge run: bounded batches of expired rows by the server's clock (all namespaces; SKIP LOCKED never waits for a
 * row another transaction holds), then the outcome budget's buckets the server's clock has left (a bucket counts
 * while the clock is in it or before it). Resolves how many rows went.
 */
export async function purgeExpired(ctx: ReplayContext, pool: PgPoolLike, purge: PurgeSettings): Promise<number> {
  const query_timeout = ctx.settings.statementTimeoutMs;
  let total = 0;
  for (let batch = 0; batch < purge.maxBatches && !ctx.closed(); batch++) {
    const values = [purge.graceMs, purge.batchSize];
    const result = await ctx.bounded(pool.query({ ...ctx.statements.purge, values, query_timeout }));
    const deleted = result.rowCount ?? 0;
    total += deleted;
    if (deleted < purge.batchSize) break;
  }
  const values = [purge.graceMs];
  await ctx.bounded(pool.query({ ...ctx.statements.purgeBudget, values, query_timeout }));
  return total;
}

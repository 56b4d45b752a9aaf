import type { PoolHandle, PostgresSettings } from './connection.js';
import type { Sender } from './send.js';
import type { ReplayStatements } from './statements.js';

/** What the consume, claim, record and purge paths of one PostgreSQL replay store share. */
export interface ReplayContext extends Sender {
  readonly namespace: string;
  /** The quoted, possibly schema-qualified table. */
  readonly table: string;
  readonly settings: PostgresSettings;
  /** `connectTimeoutMs + statementTimeoutMs`: the most a call waits in all. */
  readonly deadlineMs: number;
  readonly statements: ReplayStatements;
  readonly pool: PoolHandle;
  readonly outcomeBudgetBytes: number;
  /** How many separately locked shards the namespace's outcome budget is split into (see budgetShards). */
  readonly budgetShards: number;
  closed(): boolean;
  assertOpen(): void;
  deadlineError(): Error;
  /** Bounds any operation by the overall deadline (the injected pool may have no timeouts of its own). */
  bounded<T>(work: Promise<T>): Promise<T>;
}

/** What is left of the deadline of the batch's oldest waiter (a waiter's whole wait stays within it). */
export const budgetOf = (ctx: ReplayContext, batch: readonly { queuedAt: number }[]): number =>
  ctx.deadlineMs - (performance.now() - (batch[0] as { queuedAt: number }).queuedAt);

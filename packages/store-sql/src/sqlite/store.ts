import { StoreUnavailableError } from '@mrtr/core/errors';
import { boolOption, fnOption, intOption, optionsObject } from '@mrtr/core/options';
import { type BackgroundError, type ClaimResult, createBatcher } from '@mrtr/core/store';
import { checkNamespace } from '../shared/arguments.js';
import { batcherOptions } from '../shared/batching.js';
import { budgetBucket } from '../shared/claims.js';
import type { SqliteConnectionOptions } from '../shared/drivers.js';
import { closedError, closeOnce, once, toStoreError } from '../shared/lifecycle.js';
import {
  DEFAULT_TABLE,
  groupCommitSettings,
  outcomeLimits,
  type PurgeSettings,
  purgeSettings,
  quoteIdentifier,
  type SqlStoreCommonOptions,
  SQL_STORE_OPTIONS,
} from '../shared/options.js';
import { type SqlReplayStore, sqlReplayStore } from '../shared/types.js';
import { databaseHandle, sqliteTarget, synchronousOption } from './connection.js';
import { sqliteCalls } from './calls.js';
import { type Op, runBatch, type SqliteReplayContext } from './replay.js';
import { ensureSqliteSchema } from './schema.js';
import { schemaPlan } from '../shared/schema.js';
import { prepareStatements, type Statements } from './statements.js';
import { SQLITE_CONNECTION_OPTIONS } from '../shared/drivers.js';

export interface SqliteStoreOptions extends SqlStoreCommonOptions, SqliteConnectionOptions {}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * One purge run: bounded batches of expired rows (all namespaces), yielding to the event loop between them (each
 * is a synchronous write), then the outcome budget's buckets the clock has left (a bucket counts while the clock is
 * in it or before it). Resolves how many rows went.
 */
async function purgeExpired(statements: Statements, purge: PurgeSettings, now: () => number, closed: () => boolean): Promise<number> {
  let total = 0;
  for (let batch = 0; batch < purge.maxBatches && !closed(); batch++) {
    if (batch > 0) await yieldToEventLoop();
    if (closed()) break;
    const deleted = statements.purge.run(Math.floor(now()) - purge.graceMs, purge.batchSize).changes;
    total += deleted;
    if (deleted < purge.batchSize) break;
  }
  if (!closed()) statements.purgeBudget.run(budgetBucket(Math.floor(now()) - purge.graceMs));
  return total;
}

/**
 * Replay store on SQLite (≥ 3.24, bundled with better-sqlite3) through `better-sqlite3` (loaded only
 * when this factory is used). Each consume is one prepared `INSERT … ON CONFLICT DO UPDATE … WHERE
 * expired` statement (with a random owner value, like the PostgreSQL store) in a write transaction that checks the
 * ledger epoch; its change count is the answer. It records outcomes too (`claim`, `record`) and holds leases
 * (`renew`, `release`), like the PostgreSQL store. Its clock is the `now` option (the host's clock).
 */
export function createSqliteStore(options: SqliteStoreOptions): SqlReplayStore {
  const label = 'createSqliteStore';
  options = optionsObject(label, options, { ...SQL_STORE_OPTIONS, ...SQLITE_CONNECTION_OPTIONS });
  const target = sqliteTarget(label, options);
  const tableName = options.table ?? DEFAULT_TABLE;
  const table = quoteIdentifier(`${label}: table`, tableName);
  const namespace = checkNamespace(label, options.namespace);
  const autoSchema = boolOption(`${label}: ensureSchema`, options.ensureSchema, true);
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = synchronousOption(label, options.synchronous);
  const purge = purgeSettings(label, options);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, () => {});
  const groupCommit = groupCommitSettings(label, options);
  const { maxOutcomeBytes, outcomeBudgetBytes } = outcomeLimits(label, options);

  let closed = false;
  const database = databaseHandle(
    target,
    { busyTimeoutMs, synchronous },
    () => closed,
    () => new StoreUnavailableError(),
  );
  const plan = schemaPlan('sqlite', 'replay', table, tableName);
  const schemaReady = once(async () => ensureSqliteSchema(await database.get(), plan));
  let statements: Statements | undefined;
  const ready = async (): Promise<Statements> => {
    const db = await database.get();
    if (autoSchema) await schemaReady.get();
    if (statements?.db !== db) statements = prepareStatements(db, table, tableName);
    return statements;
  };
  const assertOpen = (): void => {
    if (closed) throw closedError();
  };
  const ctx: SqliteReplayContext = { namespace, now, outcomeBudgetBytes, current: () => statements, prepared: ready, assertOpen };

  const queue =
    groupCommit === undefined
      ? undefined
      : createBatcher<Op, boolean | ClaimResult>({
          ...batcherOptions(groupCommit, 1),
          flush: 'immediate',
          run: (batch) => runBatch(ctx, batch),
        });
  const enqueue = (op: Op): void => {
    if (queue !== undefined) queue.push(op);
    else runBatch(ctx, [op]).catch((error: unknown) => op.reject(toStoreError(error)));
  };
  const calls = sqliteCalls(ctx, enqueue, maxOutcomeBytes);

  return sqlReplayStore({
    label,
    dialect: 'sqlite',
    table,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    ...calls,
    namespace,
    purge,
    onError,
    assertOpen,
    ensureSchema: () => schemaReady.get(),
    async runPurge() {
      assertOpen();
      return purgeExpired(await ready(), purge, now, () => closed);
    },
    used: () => database.done && (!autoSchema || schemaReady.done),
    close: (stopPurge) =>
      closeOnce(() => {
        closed = true;
        stopPurge();
        // Consumes still queued fail closed.
        queue?.failAll(closedError);
        return database.close();
      }),
  });
}

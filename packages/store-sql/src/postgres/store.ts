import { StoreUnavailableError } from '@mrtr/core/errors';
import { boolOption, fnOption, optionsObject } from '@mrtr/core/options';
import {
  type BackgroundError,
  checkLeaseMs,
  type ClaimOptions,
  type ClaimResult,
  createBatcher,
  type SpendOptions,
} from '@mrtr/core/store';
import { batcherOptions, type ClaimWaiter, createGroupCommit, ownerValue, type RecordWaiter } from '../shared/batching.js';
import {
  checkClaimArgs,
  checkClaimOptions,
  checkConsumeArgs,
  checkLeaseArgs,
  checkNamespace,
  checkRecordArgs,
  checkRecordOwner,
  checkSpendOptions,
} from '../shared/arguments.js';
import { budgetShardOf, budgetShards } from '../shared/claims.js';
import { EPOCH_SUFFIX, KEYS_SUFFIX } from '../shared/schema.js';
import type { PostgresConnectionOptions } from '../shared/drivers.js';
import { closedError, closeOnce, once, toStoreError, whenReady } from '../shared/lifecycle.js';
import {
  DEFAULT_TABLE,
  groupCommitSettings,
  outcomeLimits,
  purgeSettings,
  quoteIdentifier,
  type SqlStoreCommonOptions,
  SQL_STORE_OPTIONS,
} from '../shared/options.js';
import { type SqlReplayStore, sqlReplayStore } from '../shared/types.js';
import type { GroupCommitSettings } from '../shared/options.js';
import { runClaimBatch } from './claims.js';
import { ledgerEpochOf, releaseClaim, renewLease, serverTime } from './leases.js';
import { deadline, poolHandle, postgresBounds, postgresTarget, qualifier, POSTGRES_BOUNDS_OPTIONS } from './connection.js';
import { consumeOne, runConsumeBatch } from './consume.js';
import type { ReplayContext } from './context.js';
import { keyFingerprintsOf } from './keys.js';
import { purgeExpired } from './purge.js';
import { recordTexts, runRecordBatch } from './records.js';
import { ensurePostgresSchema, replaySchemaPlan } from './schema.js';
import { createSender } from './send.js';
import { replayStatements } from './statements.js';

export interface PostgresStoreOptions extends SqlStoreCommonOptions, PostgresConnectionOptions {
  /**
   * Upper bound of one statement in ms, enforced by the server: sent as `statement_timeout` on a pool
   * the store creates; on an injected pool whose connections have no `statement_timeout` of at most this
   * (checked once per connection), each consume runs in a transaction with `SET LOCAL statement_timeout`.
   * The client waits for a reply up to this plus `min(statementTimeoutMs, 1000)` (so the server's own
   * cancel arrives first); when none arrives (or the connection breaks), the store asks once, with a
   * `SELECT` under the same bounds, whether the row holds this call's owner value before it fails. @default 5000
   */
  statementTimeoutMs?: number;
  /**
   * Server-side `lock_timeout` in ms, set with `statementTimeoutMs` on a pool the store creates, on every
   * consume that runs in its own transaction, and around the DDL of `ensureSchema()`: a statement that
   * waits this long for a lock (a row held by another transaction, a table locked by `pg_dump` or an
   * idle transaction) is cancelled by the server instead of queueing; only the calls of the held id fail (the rest of
   * a batch runs again without it). @default min(2000, statementTimeoutMs)
   */
  lockTimeoutMs?: number;
  /**
   * Upper bound on getting a connection in ms (`connectionTimeoutMillis` of an owned pool; the name `@mrtr/store-redis` uses). A consume
   * on any pool rejects after `connectTimeoutMs + statementTimeoutMs` at the latest. @default 5000
   */
  connectTimeoutMs?: number;
  /**
   * Size of an owned pool, and the most consume statements the store has in flight at once (on an
   * injected pool too: give that pool at least this many connections). @default 10
   */
  maxConnections?: number;
  /**
   * Use named prepared statements (parsed once per connection). Turn off behind a connection pooler
   * that does not support them (PgBouncer in transaction mode before 1.21). @default true
   */
  preparedStatements?: boolean;
}

/** The options of a replay store, validated in order (so the first bad option is the one reported). */
function replayOptions(label: string, options: PostgresStoreOptions) {
  const target = postgresTarget(label, options);
  const tableName = options.table ?? DEFAULT_TABLE;
  const quotedTable = quoteIdentifier(`${label}: table`, tableName);
  const { schema, qualify } = qualifier(label, options.schema);
  return {
    tableName,
    table: qualify(quotedTable),
    qualify,
    namespace: checkNamespace(label, options.namespace),
    autoSchema: boolOption(`${label}: ensureSchema`, options.ensureSchema, true),
    settings: { ...target, schema, ...postgresBounds(label, options) },
    purge: purgeSettings(label, options),
    // Accepted and checked for the options both dialects share, never used: the server's clock decides.
    now: fnOption(`${label}: now`, options.now, Date.now),
    onError: fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, () => {}),
    prepared: boolOption(`${label}: preparedStatements`, options.preparedStatements, true),
    ...outcomeLimits(label, options),
    groupCommit: groupCommitSettings(label, options),
  };
}

/**
 * `consume`, `claim` and `record` on their queues (batching on: a queue each; off: a batch of one per call), and
 * what `close()` runs to fail the calls still queued. Every expiry is judged by the server's clock, in the statement.
 */
function replayCalls(ctx: ReplayContext, groupCommit: GroupCommitSettings | undefined, maxOutcomeBytes: number) {
  const { assertOpen } = ctx;
  const queue =
    groupCommit === undefined
      ? undefined
      : createGroupCommit(groupCommit, 'microtask', (batch) => runConsumeBatch(ctx, batch), ctx.settings.maxConnections);
  const claimQueue =
    groupCommit === undefined
      ? undefined
      : createBatcher<ClaimWaiter, ClaimResult>({
          ...batcherOptions(groupCommit, ctx.settings.maxConnections),
          run: (batch) => runClaimBatch(ctx, batch),
        });
  // A record queue per budget shard. One shard: at most two batches in flight (they take turns under the lock, the
  // second waiting for it on the server, no round trip lost between them). Several: one per shard (batches of
  // different shards run at once; a second of the same shard would only hold a connection, that claims and
  // consumes need, while it waits for the lock). The shards' queues share maxQueued.
  const texts = recordTexts(ctx);
  const shards = ctx.budgetShards;
  const runRecords = (batch: RecordWaiter[], shard: number) => runRecordBatch(ctx, texts, batch, shard);
  const recordQueues =
    groupCommit === undefined
      ? undefined
      : Array.from({ length: shards }, (_, shard) =>
          createBatcher<RecordWaiter, boolean>({
            ...batcherOptions({ ...groupCommit, maxQueued: Math.max(1, Math.floor(groupCommit.maxQueued / shards)) }, shards === 1 ? 2 : 1),
            run: (batch) => runRecords(batch, shard),
          }),
        );

  const consume = async (id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean> => {
    const expires = checkConsumeArgs(id, expiresAtMs);
    const { minted } = checkSpendOptions('consume', options);
    assertOpen();
    const waiter = { id, expires, minted, queuedAt: performance.now() };
    if (queue === undefined) {
      return consumeOne(ctx, { ...waiter, resolve: () => {}, reject: () => {} }, ownerValue()).catch((error: unknown) => {
        throw toStoreError(error);
      });
    }
    return new Promise<boolean>((resolve, reject) => {
      queue.push({ ...waiter, resolve, reject });
    });
  };

  /** Claims ride the group commit as consumes do (a queue of their own: one statement per batch of claims). */
  const claim = async (id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult> => {
    const expires = checkClaimArgs(id, expiresAtMs, fingerprint);
    const args = checkClaimOptions(options);
    assertOpen();
    return new Promise<ClaimResult>((resolve, reject) => {
      const waiter: ClaimWaiter = { id, expires, fp: fingerprint, ...args, queuedAt: performance.now(), resolve, reject };
      if (claimQueue === undefined) runClaimBatch(ctx, [waiter]).catch((error: unknown) => reject(toStoreError(error)));
      else claimQueue.push(waiter);
    });
  };

  /** Records ride the group commit too (a queue of their own: one transaction per batch of records). */
  const record = async (id: string, fingerprint: string, outcome: string, options?: { owner?: string | undefined }): Promise<boolean> => {
    const stored = checkRecordArgs(id, fingerprint, outcome, maxOutcomeBytes);
    const owner = checkRecordOwner(options);
    assertOpen();
    return new Promise<boolean>((resolve, reject) => {
      const waiter: RecordWaiter = { id, fp: fingerprint, outcome: stored, owner, queuedAt: performance.now(), resolve, reject };
      const shard = budgetShardOf(id, shards);
      if (recordQueues === undefined) runRecords([waiter], shard).catch((error: unknown) => reject(toStoreError(error)));
      else (recordQueues[shard] as NonNullable<typeof recordQueues>[number]).push(waiter);
    });
  };

  /** Calls still queued fail closed; a statement already sent settles its own. */
  const failQueued = () => {
    queue?.failAll(closedError);
    claimQueue?.failAll(closedError);
    for (const recordQueue of recordQueues ?? []) recordQueue.failAll(closedError);
  };
  return { consume, claim, record, failQueued };
}

/** `renew`, `release`, `time` and `ledgerEpoch`: one statement each (not batched), safe to run twice (see sendIdempotent). */
function leaseCalls(ctx: ReplayContext) {
  return {
    async renew(id: string, owner: string, leaseMs: number): Promise<boolean> {
      checkLeaseArgs('renew', id, owner);
      return renewLease(ctx, id, owner, checkLeaseMs('renew', leaseMs));
    },
    async release(id: string, owner: string): Promise<boolean> {
      checkLeaseArgs('release', id, owner);
      return releaseClaim(ctx, id, owner);
    },
    time: () => serverTime(ctx),
    ledgerEpoch: () => ledgerEpochOf(ctx),
  };
}

/**
 * Replay store on PostgreSQL (≥ 9.5) through `pg` (loaded only when this factory is used).
 * Each consume is one `INSERT … ON CONFLICT (ns, id) DO UPDATE … WHERE expires_at < now` statement
 * that also writes a random owner value only that call knows; a consume whose reply is lost asks once
 * (`SELECT owner`) whether the row is its own before it fails. It records outcomes too (`claim`, `record`), both
 * batched: the same upsert keeping a fingerprint and returning the row, and an `UPDATE` of the outcomes under the
 * lock of the id's outcome-budget shard.
 */
export function createPostgresStore(options: PostgresStoreOptions): SqlReplayStore {
  const label = 'createPostgresStore';
  options = optionsObject(label, options, { ...SQL_STORE_OPTIONS, ...POSTGRES_BOUNDS_OPTIONS, preparedStatements: true });
  const { tableName, table, qualify, namespace, autoSchema, settings, purge, onError, prepared, groupCommit, ...limits } = replayOptions(
    label,
    options,
  );
  const { maxOutcomeBytes, outcomeBudgetBytes } = limits;
  const deadlineMs = settings.connectTimeoutMs + settings.statementTimeoutMs;
  // The outcome budget's, the epoch's and the key fingerprints' tables (≤ 48 + 7 characters).
  const statements = replayStatements(table, qualify(`"${tableName}_budget"`), qualify(`"${tableName}${EPOCH_SUFFIX}"`), prepared);

  let closed = false;
  const pool = poolHandle(
    settings,
    () => closed,
    () => new StoreUnavailableError(),
  );
  const schemaReady = once(async () => ensurePostgresSchema(await pool.get(), replaySchemaPlan(table, tableName, qualify), settings));
  /** Once the pool exists and the schema is ensured, consumes skip the set-up awaits. */
  const { ready, current } = whenReady(pool, autoSchema ? schemaReady : undefined);
  const assertOpen = (): void => {
    if (closed) throw closedError();
  };
  const bounded = deadline('replay store', deadlineMs);
  const deadlineError = () => new StoreUnavailableError({ cause: new Error('replay store deadline exceeded') });
  const sender = createSender({ settings, pool, readyPool: current, ready, assertOpen, deadlineError });
  const ctx: ReplayContext = {
    ...sender,
    namespace,
    table,
    settings,
    deadlineMs,
    statements,
    pool,
    outcomeBudgetBytes,
    budgetShards: budgetShards(outcomeBudgetBytes, maxOutcomeBytes),
    closed: () => closed,
    assertOpen,
    deadlineError,
    bounded,
  };
  const { failQueued, ...calls } = replayCalls(ctx, groupCommit, maxOutcomeBytes);

  return sqlReplayStore({
    label,
    dialect: 'postgres',
    table,
    ...limits,
    ...calls,
    ...leaseCalls(ctx),
    keyFingerprints: keyFingerprintsOf({
      namespace,
      keysTable: qualify(`"${tableName}${KEYS_SUFFIX}"`),
      settings,
      ready,
      assertOpen,
      bounded,
    }),
    namespace,
    purge,
    onError,
    assertOpen,
    ensureSchema: () => bounded(schemaReady.get()),
    async runPurge() {
      assertOpen();
      return purgeExpired(ctx, await ready(), purge);
    },
    // Only purge once the store has been used (so an idle store opens no connection).
    used: () => pool.done && (!autoSchema || schemaReady.done),
    close: (stopPurge) =>
      closeOnce(() => {
        closed = true;
        stopPurge();
        failQueued();
        // Waits for a pool that is still being created, then ends it (never twice; never an injected one).
        return pool.close();
      }),
  });
}

import { StoreUnavailableError } from '@mrtr/core/errors';
import type { PgPoolClientLike, PgPoolLike, PgQueryConfigLike, PgQueryResultLike } from '../shared/drivers.js';
import {
  addedColumnType,
  checkShape,
  checkedSideTables,
  type SchemaPlan,
  schemaPlan,
  type SqlSchemaCheck,
  type TableShape,
} from '../shared/schema.js';
import { holdErrors, LOCK_NOT_AVAILABLE, localTimeoutsSql, type PostgresSettings } from './connection.js';

/** Arbitrary 32-bit class id ("mrtr") for `pg_advisory_xact_lock(int, int)`: the schema lock of both stores. */
export const LOCK_CLASS = 0x6d727472;

type Query = (config: PgQueryConfigLike) => Promise<PgQueryResultLike>;
type Catalog = Record<string, unknown>;

/**
 * What `ensureSchema()` makes (see {@link SchemaPlan}), and how it waits for the schema lock. Everything is looked up
 * in the catalog first: reading the catalog takes no lock on the table, whereas ALTER TABLE … IF NOT EXISTS / CREATE
 * INDEX IF NOT EXISTS lock it even when nothing is missing, and a lock request queued behind any reader (pg_dump, an
 * idle transaction) holds up every call of every instance behind it.
 */
export interface PostgresSchemaPlan extends SchemaPlan {
  /** Take the advisory lock under `lock_timeout` too (the task store) rather than under `statement_timeout` only. */
  lockUnderLockTimeout: boolean;
  /** What a lock wait given up on says besides the table (who may hold it). */
  holders: string;
}

/** The replay table, its expiry index, its outcome budget table (`<table>_budget`) and its epoch table (`<table>_epoch`). */
export const replaySchemaPlan = (table: string, tableName: string, qualify: (name: string) => string): PostgresSchemaPlan => ({
  ...schemaPlan('postgres', 'replay', table, tableName, qualify),
  lockUnderLockTimeout: false,
  holders: ' (an open transaction, pg_dump, another migration)',
});

/** The task table, its principal and expiry indexes and its count table (`<table>_counts`). */
export const taskSchemaPlan = (table: string, tableName: string, qualify: (name: string) => string): PostgresSchemaPlan => ({
  ...schemaPlan('postgres', 'task', table, tableName, qualify),
  lockUnderLockTimeout: true,
  holders: '',
});

/** One catalog read: the table, each added column, each index (by name), each side table. */
function catalogQuery(plan: PostgresSchemaPlan): PgQueryConfigLike {
  const columns = plan.added.map(
    (column) =>
      `EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = '${column}' AND a.attnum > 0 AND NOT a.attisdropped) AS has_${column}, `,
  );
  const indexes = plan.indexes.map(
    (_, i) =>
      `EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid AND i.relname = $${i + 2}) AS has_index_${i}, `,
  );
  const first = plan.indexes.length + 2;
  const sides = plan.sides.map((_, i) => `to_regclass($${first + i}::text) IS NOT NULL AS has_side_${i}`);
  return {
    text: `SELECT c.oid IS NOT NULL AS has_table, ${columns.join('')}${indexes.join('')}${sides.join(', ')} FROM (SELECT to_regclass($1::text)::oid AS oid) AS c`,
    values: [plan.table, ...plan.indexes.map((index) => index.name), ...plan.sides.map((side) => side.table)],
  };
}

/** The DDL a catalog read says is missing (nothing when the schema is complete). */
function missingDdl(plan: PostgresSchemaPlan, catalog: Catalog): string[] {
  const ddl: string[] = [];
  const missing = plan.added.filter((column) => catalog[`has_${column}`] !== true);
  if (catalog.has_table !== true) ddl.push(plan.createTable);
  // A table created by an earlier version lacks some columns (PostgreSQL ≥ 9.6): one ALTER TABLE adds exactly those.
  else if (missing.length > 0) {
    ddl.push(
      `ALTER TABLE ${plan.table} ${missing.map((column) => `ADD COLUMN IF NOT EXISTS ${column} ${addedColumnType('postgres', column)}`).join(', ')}`,
    );
  }
  plan.indexes.forEach((index, i) => {
    if (catalog[`has_index_${i}`] !== true) ddl.push(index.create);
  });
  plan.sides.forEach((side, i) => {
    if (catalog[`has_side_${i}`] !== true) ddl.push(side.create);
  });
  return ddl;
}

/**
 * Creates what is missing of `plan`. Nothing missing (every start but the first): no DDL, so no lock on the table at
 * all. Else, in one transaction: a transaction-scoped advisory lock (two processes running CREATE TABLE IF NOT EXISTS
 * at once can both pass the existence check and one then fails on the type catalog), `lock_timeout` (DDL that waits
 * for a lock on the table fails after lockTimeoutMs instead of queueing, and holding up every call queued behind it,
 * for as long as the holder stays), the catalog read again (another instance may have finished meanwhile), the DDL.
 */
export async function ensurePostgresSchema(pool: PgPoolLike, plan: PostgresSchemaPlan, settings: PostgresSettings): Promise<void> {
  const { replyWaitMs, statementTimeoutMs, lockTimeoutMs } = settings;
  const catalogConfig = catalogQuery(plan);
  const first = (await pool.query({ ...catalogConfig, query_timeout: replyWaitMs })).rows[0] ?? {};
  if (missingDdl(plan, first as Catalog).length === 0) return;
  let client: PgPoolClientLike | undefined;
  let unhold = () => {};
  let failure: unknown;
  try {
    client = await pool.connect();
    unhold = holdErrors(client);
    const connected = client;
    const query: Query = (config) => connected.query({ ...config, query_timeout: replyWaitMs });
    const begin = plan.lockUnderLockTimeout
      ? `BEGIN; ${localTimeoutsSql(settings)}`
      : `BEGIN; SET LOCAL statement_timeout = ${statementTimeoutMs}`;
    await query({ text: begin });
    await query({ text: 'SELECT pg_advisory_xact_lock($1, hashtext($2))', values: [LOCK_CLASS, `mrtr:${plan.table}`] });
    if (!plan.lockUnderLockTimeout) await query({ text: `SET LOCAL lock_timeout = ${lockTimeoutMs}` });
    const catalog = ((await query(catalogConfig)).rows[0] ?? {}) as Catalog;
    for (const text of missingDdl(plan, catalog)) await query({ text });
    await query({ text: 'COMMIT' });
  } catch (error) {
    failure = error;
    if (client !== undefined) await client.query({ text: 'ROLLBACK', query_timeout: replyWaitMs }).catch(() => {});
    if ((error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE) {
      throw new StoreUnavailableError({
        cause: new Error(
          `ensureSchema: gave up after lockTimeoutMs (${lockTimeoutMs} ms) waiting for a lock on ${plan.table} held by another session${plan.holders}; ` +
            'nothing was changed. Retry when it ends, or run the schema statements from your migration tool and pass ensureSchema: false',
          { cause: error },
        ),
      });
    }
    throw error;
  } finally {
    // A client that failed mid-transaction is destroyed rather than returned to the pool.
    unhold();
    client?.release(failure instanceof Error ? failure : failure !== undefined);
  }
}

/** Where a schema check looks: the table (unquoted) and its schema (default: the connection's current schema). */
export interface PostgresSchemaCheckOptions {
  table: string;
  schema?: string;
}

const COLUMNS_SQL =
  'SELECT column_name, data_type, is_nullable FROM information_schema.columns ' +
  'WHERE table_schema = coalesce($2::text, current_schema()) AND table_name = $1';
const INDEXES_SQL = `SELECT i.indisprimary AS primary, array_to_string(array_agg(a.attname ORDER BY k.ord), ',') AS cols
   FROM pg_index i
   JOIN pg_class t ON t.oid = i.indrelid
   JOIN pg_namespace n ON n.oid = t.relnamespace
   CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
   JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
  WHERE t.relname = $1 AND n.nspname = coalesce($2::text, current_schema())
  GROUP BY i.indexrelid, i.indisprimary`;

/** The table's shape from the catalog; `undefined` when it does not exist. */
async function readShape(pool: PgPoolLike, options: PostgresSchemaCheckOptions): Promise<TableShape | undefined> {
  const values = [options.table, options.schema ?? null];
  const columns = (await pool.query({ text: COLUMNS_SQL, values })).rows as Record<string, unknown>[];
  if (columns.length === 0) return undefined;
  const keys = (await pool.query({ text: INDEXES_SQL, values })).rows as Record<string, unknown>[];
  return {
    columns: columns.map((c) => ({ name: String(c.column_name), type: String(c.data_type), nullable: c.is_nullable !== 'NO' })),
    primaryKey: keys.find((k) => k.primary === true)?.cols as string | undefined,
    indexes: keys.map((k) => String(k.cols)),
  };
}

/**
 * Checks the replay table against the schema the store creates (read-only, from the catalog): `undefined` when the
 * table does not exist, else its problems and warnings (see {@link SqlSchemaCheck}).
 */
export async function checkPostgresSchema(pool: PgPoolLike, options: PostgresSchemaCheckOptions): Promise<SqlSchemaCheck | undefined> {
  const shape = await readShape(pool, options);
  if (shape === undefined) return undefined;
  const sides = await Promise.all(checkedSideTables(options.table).map((table) => readShape(pool, { ...options, table })));
  return checkShape('postgres', 'replay', options.table, shape, sides);
}

/** {@link checkPostgresSchema} for the task table of `createPostgresTaskStore`. */
export async function checkPostgresTaskSchema(pool: PgPoolLike, options: PostgresSchemaCheckOptions): Promise<SqlSchemaCheck | undefined> {
  return checkShape('postgres', 'task', options.table, await readShape(pool, options));
}

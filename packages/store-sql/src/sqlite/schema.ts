import type { SqliteDatabaseLike } from '../shared/drivers.js';
import {
  ADDED_COLUMNS,
  type AddedColumn,
  addedColumnType,
  BUDGET_TABLE,
  COUNTS_TABLE,
  checkReplayShape,
  checkTaskShape,
  createIndexSql,
  createTableSql,
  EXPIRY_INDEX,
  PRINCIPAL_INDEX,
  REPLAY_TABLE,
  type SqlSchemaCheck,
  TASK_TABLE,
  type TableShape,
} from '../shared/schema.js';
import { inWriteTransaction } from './connection.js';

/** What `ensureSchema()` makes: a main table (whose `added` columns an earlier version's table may lack), its indexes and side tables. */
export interface SqliteSchemaPlan {
  /** The quoted table. */
  table: string;
  tableName: string;
  createTable: string;
  added: readonly AddedColumn[];
  /** Index names (unquoted) and their DDL. */
  indexes: readonly { name: string; create: string }[];
  /** Side tables (unquoted names) and their DDL. */
  sideTables: readonly { name: string; create: string }[];
}

const index = (table: string, tableName: string, spec: typeof PRINCIPAL_INDEX | typeof EXPIRY_INDEX) => ({
  name: `${tableName}${spec.suffix}`,
  create: createIndexSql(`"${tableName}${spec.suffix}"`, table, spec.columns),
});

/** The replay table, its expiry index and its outcome budget table (`<table>_budget`). */
export function replaySchemaPlan(table: string, tableName: string): SqliteSchemaPlan {
  const budget = `${tableName}_budget`;
  return {
    table,
    tableName,
    createTable: createTableSql('sqlite', table, REPLAY_TABLE),
    added: ADDED_COLUMNS,
    indexes: [index(table, tableName, EXPIRY_INDEX)],
    sideTables: [{ name: budget, create: createTableSql('sqlite', `"${budget}"`, BUDGET_TABLE) }],
  };
}

/** The task table, its principal and expiry indexes and its count table (`<table>_counts`). */
export function taskSchemaPlan(table: string, tableName: string): SqliteSchemaPlan {
  const counts = `${tableName}_counts`;
  return {
    table,
    tableName,
    createTable: createTableSql('sqlite', table, TASK_TABLE),
    added: [],
    indexes: [index(table, tableName, PRINCIPAL_INDEX), index(table, tableName, EXPIRY_INDEX)],
    sideTables: [{ name: counts, create: createTableSql('sqlite', `"${counts}"`, COUNTS_TABLE) }],
  };
}

const INDEX_SQL = "SELECT 1 AS found FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE AND tbl_name = ? COLLATE NOCASE";
const TABLE_SQL = "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE";

const all = (db: SqliteDatabaseLike, sql: string): Record<string, unknown>[] =>
  (db.prepare(sql) as unknown as { all(): Record<string, unknown>[] }).all();

/**
 * The DDL the catalog says is missing (read without a write lock). SQLite has no ADD COLUMN IF NOT EXISTS, so the
 * catalog says which added columns a table of an earlier version lacks.
 */
function missingDdl(db: SqliteDatabaseLike, plan: SqliteSchemaPlan): string[] {
  const columns = new Set(all(db, `PRAGMA table_info(${plan.table})`).map((column) => column.name));
  const ddl: string[] = [];
  if (columns.size === 0) ddl.push(plan.createTable);
  else {
    for (const column of plan.added) {
      if (!columns.has(column)) ddl.push(`ALTER TABLE ${plan.table} ADD COLUMN ${column} ${addedColumnType('sqlite', column)}`);
    }
  }
  for (const { name, create } of plan.indexes) if (db.prepare(INDEX_SQL).get(name, plan.tableName) === undefined) ddl.push(create);
  for (const { name, create } of plan.sideTables) if (db.prepare(TABLE_SQL).get(name) === undefined) ddl.push(create);
  return ddl;
}

/**
 * Creates what is missing of `plan`. Nothing missing (every start but the first): no DDL and no write lock. Else
 * BEGIN IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so two processes creating the schema
 * at once run one after the other, and the catalog is read again (another process may have finished meanwhile).
 */
export function ensureSqliteSchema(db: SqliteDatabaseLike, plan: SqliteSchemaPlan): void {
  if (missingDdl(db, plan).length === 0) return;
  inWriteTransaction(
    db,
    () => db.exec('BEGIN IMMEDIATE'),
    () => {
      for (const sql of missingDdl(db, plan)) db.exec(sql);
    },
  );
}

/** Where a schema check looks: the table (unquoted). */
export interface SqliteSchemaCheckOptions {
  table: string;
}

/** The table's shape from the catalog; `undefined` when it does not exist. */
function readShape(db: SqliteDatabaseLike, table: string): TableShape | undefined {
  const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;
  const columns = all(db, `PRAGMA table_info(${quote(table)})`) as { name: string; type: string; notnull: number; pk: number }[];
  if (columns.length === 0) return undefined;
  const pk = columns
    .filter((c) => c.pk > 0)
    .sort((a, b) => a.pk - b.pk)
    .map((c) => c.name);
  const indexes = (all(db, `PRAGMA index_list(${quote(table)})`) as { name: string }[]).map((i) =>
    (all(db, `PRAGMA index_info(${quote(i.name)})`) as { seqno: number; name: string }[])
      .sort((a, b) => a.seqno - b.seqno)
      .map((c) => c.name)
      .join(','),
  );
  return {
    columns: columns.map((c) => ({ name: c.name, type: c.type, nullable: c.notnull !== 1 })),
    primaryKey: pk.length === 0 ? undefined : pk.join(','),
    indexes,
  };
}

/**
 * Checks the replay table against the schema the store creates (read-only, from the catalog): `undefined` when the
 * table does not exist, else its problems and warnings (see {@link SqlSchemaCheck}).
 */
export function checkSqliteSchema(db: SqliteDatabaseLike, options: SqliteSchemaCheckOptions): SqlSchemaCheck | undefined {
  const shape = readShape(db, options.table);
  return shape === undefined ? undefined : checkReplayShape('sqlite', options.table, shape);
}

/** {@link checkSqliteSchema} for the task table of `createSqliteTaskStore`. */
export function checkSqliteTaskSchema(db: SqliteDatabaseLike, options: SqliteSchemaCheckOptions): SqlSchemaCheck | undefined {
  const shape = readShape(db, options.table);
  return shape === undefined ? undefined : checkTaskShape('sqlite', options.table, shape);
}

import type { SqliteDatabaseLike } from '../shared/drivers.js';
import { addedColumnType, checkedSideTables, checkShape, type SchemaPlan, type SqlSchemaCheck, type TableShape } from '../shared/schema.js';
import { inWriteTransaction } from './connection.js';

const INDEX_SQL = "SELECT 1 AS found FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE AND tbl_name = ? COLLATE NOCASE";
const TABLE_SQL = "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE";

const all = (db: SqliteDatabaseLike, sql: string): Record<string, unknown>[] =>
  (db.prepare(sql) as unknown as { all(): Record<string, unknown>[] }).all();

/**
 * The DDL the catalog says is missing (read without a write lock). SQLite has no ADD COLUMN IF NOT EXISTS, so the
 * catalog says which added columns a table of an earlier version lacks.
 */
function missingDdl(db: SqliteDatabaseLike, plan: SchemaPlan): string[] {
  const columns = new Set(all(db, `PRAGMA table_info(${plan.table})`).map((column) => column.name));
  const ddl: string[] = [];
  if (columns.size === 0) ddl.push(plan.createTable);
  else {
    for (const column of plan.added) {
      if (!columns.has(column)) ddl.push(`ALTER TABLE ${plan.table} ADD COLUMN ${column} ${addedColumnType('sqlite', column)}`);
    }
  }
  for (const { name, create } of plan.indexes) if (db.prepare(INDEX_SQL).get(name, plan.tableName) === undefined) ddl.push(create);
  for (const side of plan.sides) if (db.prepare(TABLE_SQL).get(side.name) === undefined) ddl.push(side.create);
  return ddl;
}

/**
 * Creates what is missing of `plan`. Nothing missing (every start but the first): no DDL and no write lock. Else
 * BEGIN IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so two processes creating the schema
 * at once run one after the other, and the catalog is read again (another process may have finished meanwhile).
 */
export function ensureSqliteSchema(db: SqliteDatabaseLike, plan: SchemaPlan): void {
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
  if (shape === undefined) return undefined;
  return checkShape(
    'sqlite',
    'replay',
    options.table,
    shape,
    checkedSideTables(options.table).map((table) => readShape(db, table)),
  );
}

/** {@link checkSqliteSchema} for the task table of `createSqliteTaskStore`. */
export function checkSqliteTaskSchema(db: SqliteDatabaseLike, options: SqliteSchemaCheckOptions): SqlSchemaCheck | undefined {
  return checkShape('sqlite', 'task', options.table, readShape(db, options.table));
}

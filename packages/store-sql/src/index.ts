export type { SqlReplayStore, SqlStoreCommonOptions } from './common.js';
export type {
  PgPoolClientLike,
  PgPoolLike,
  PgQueryConfigLike,
  PgQueryResultLike,
  PostgresConnectionOptions,
  SqliteConnectionOptions,
  SqliteDatabaseLike,
  SqliteStatementLike,
} from './drivers.js';
export { createPostgresStore, type PostgresStoreOptions } from './postgres.js';
export {
  type ConfigureSqliteOptions,
  configureSqliteDatabase,
  createSqliteStore,
  type SqliteStoreOptions,
} from './sqlite.js';
export type { SqlTaskStore, SqlTaskStoreCommonOptions } from './task-common.js';
export { createPostgresTaskStore, type PostgresTaskStoreOptions } from './task-postgres.js';
export { createSqliteTaskStore, type SqliteTaskStoreOptions } from './task-sqlite.js';

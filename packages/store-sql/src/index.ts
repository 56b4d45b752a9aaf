export { checkPostgresSchema, checkPostgresTaskSchema, type PostgresSchemaCheckOptions } from './postgres/schema.js';
export { createPostgresStore, type PostgresStoreOptions } from './postgres/store.js';
export { createPostgresTaskStore, type PostgresTaskStoreOptions } from './postgres/tasks.js';
export type {
  PgPoolClientLike,
  PgPoolLike,
  PgQueryConfigLike,
  PgQueryResultLike,
  PostgresConnectionOptions,
  SqliteConnectionOptions,
  SqliteDatabaseLike,
  SqliteStatementLike,
} from './shared/drivers.js';
export type { SqlStoreCommonOptions } from './shared/options.js';
export type { SqlSchemaCheck } from './shared/schema.js';
export type { SqlTaskStore, SqlTaskStoreCommonOptions } from './shared/tasks.js';
export type { SqlReplayStore } from './shared/types.js';
export { type ConfigureSqliteOptions, configureSqliteDatabase } from './sqlite/connection.js';
export { checkSqliteSchema, checkSqliteTaskSchema, type SqliteSchemaCheckOptions } from './sqlite/schema.js';
export { createSqliteStore, type SqliteStoreOptions } from './sqlite/store.js';
export { createSqliteTaskStore, type SqliteTaskStoreOptions } from './sqlite/tasks.js';

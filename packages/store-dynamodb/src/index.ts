export type { ClockOffset } from './clock.js';
export { createDynamoStore, type DynamoReplayStore, type DynamoStoreOptions } from './store.js';
export { type CreateTableOptions, createTable, type DynamoConnectionOptions } from './table.js';
export { createDynamoTaskStore, type DynamoTaskStore, type DynamoTaskStoreOptions } from './tasks.js';

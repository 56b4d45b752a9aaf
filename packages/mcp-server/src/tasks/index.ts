/**
 * `@mrtr/mcp-server/tasks`: the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on top of protected
 * MRTR. Turn it on with `createMrtr({ tasks: { store } })` (a `TaskStore`: `createMemoryTaskStore` of
 * `@mrtr/store-memory`, `createRedisTaskStore` of `@mrtr/store-redis`, `createPostgresTaskStore` /
 * `createSqliteTaskStore` of `@mrtr/store-sql`), register a tool with `task: 'optional' | 'required'` and return
 * `need.task(async (task) => ...)` from its handler. This entry holds the names a server writes against: the
 * options, what the work receives, the records a store keeps.
 */
export type { TaskError, TaskInputRequest, TaskRecord, TaskStatus, TaskStore } from '@mrtr/core/tasks';
export { TaskLimitError } from '@mrtr/core/errors';
export { isTerminalStatus } from '@mrtr/core/tasks';
export type { TaskHandle, TaskStartOptions, TaskWork } from '../rounds/handoff.js';
export { TASKS_EXTENSION } from './gate.js';
export type { TaskOptions } from './options.js';

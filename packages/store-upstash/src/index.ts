export type { UpstashConnectionOptions } from './link.js';
export { createUpstashStore, type UpstashReplayStore, type UpstashStoreOptions } from './store.js';
export { createUpstashTaskStore, type UpstashTaskStore, type UpstashTaskStoreOptions } from './tasks.js';

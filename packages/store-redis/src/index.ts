export { hashSlot } from './hash-slot.js';
export type { EvictionCheck, PersistenceCheck } from './eviction.js';
export type { RedisReplayStore, RedisStoreOptions } from './options.js';
export { createRedisStore } from './store.js';
export { createRedisTaskStore, type RedisTaskStore, type RedisTaskStoreOptions } from './tasks.js';

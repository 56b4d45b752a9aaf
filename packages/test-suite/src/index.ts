export type { CodecFactory } from '@mrtr/core';
export { type CappedCodecFactory, type CodecComplianceOptions, codecCompliance } from './codec.js';
export { sampleClaims, samplePayloads } from './claims.js';
export { type FaultLogEntry, type FaultyStore, withFaults } from './faults.js';
export { createHistory, type History, type HistoryAnswer, type HistoryEvent, type HistoryOptions } from './history.js';
export { type LostReplyMode, lossyStoreThroughProxy, type ReplyLosingProxy, startReplyLosingProxy } from './reply-proxy.js';
export { type LossyStore, type StoreComplianceOptions, type StoreFactory, storeCompliance } from './store.js';
export type { TestFn } from './types.js';
export { type TaskStoreComplianceOptions, type TaskStoreFactory, taskStoreCompliance } from './task-store.js';

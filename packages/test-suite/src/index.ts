export { type CodecComplianceOptions, type CodecFactory, codecCompliance } from './codec.js';
export { sampleClaims, samplePayloads } from './claims.js';
export { type StoreComplianceOptions, type StoreFactory, storeCompliance } from './store.js';
export type { TestFn } from './types.js';

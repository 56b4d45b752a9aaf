/**
 * `@mrtr/core/store`: for replay store authors (the `ReplayStore` itself is in `@mrtr/core`) — the claim and
 * capability types, `storeCapabilities` (the only reader of what a store declares), the outcome limits, the fleet
 * key offer, lease and owner arguments, a batcher, `withDeadline`, `redactUrl` and `BackgroundError`.
 */
export { type BatchEntry, type Batcher, type BatcherOptions, type BatchFlush, createBatcher } from './util/batcher.js';
export { storeCapabilities } from './capabilities.js';
export { withDeadline } from './util/deadline.js';
export { applyKeyFingerprintOffer, fleetKeysFull, MAX_FLEET_KEYS, parseKeyFingerprintOffer } from './keys/fleet.js';
export type {
  ClaimOptions,
  ClaimResult,
  KeyFingerprint,
  RecordingReplayStore,
  SpendOptions,
  StoreCapabilities,
} from './interfaces.js';
export { checkLeaseMs, checkOwner } from './util/lease-args.js';
export {
  DEFAULT_MAX_OUTCOME_BYTES,
  DEFAULT_OUTCOME_BUDGET_BYTES,
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  type ParsedOutcomeStoreLimits,
  parseOutcomeStoreLimits,
} from './outcomes/limits.js';
export { ownerValues } from './util/random.js';
export { redactUrl } from './util/redact.js';
export { BackgroundError } from './util/validate.js';
export { fullStoreCapabilities } from './store-support.js';

/**
 * `@mrtr/core/store`: for replay store authors (the `ReplayStore` itself is in `@mrtr/core`) — the claim and
 * capability types, `storeCapabilities` (the only reader of what a store declares), the outcome limits, the fleet
 * key offer, lease and owner arguments, a batcher, `withDeadline`, `redactUrl` and `BackgroundError`.
 */
export { type BatchEntry, type Batcher, type BatcherOptions, type BatchFlush, createBatcher } from './batcher.js';
export { storeCapabilities } from './capabilities.js';
export { withDeadline } from './deadline.js';
export { applyKeyFingerprintOffer, fleetKeysFull, MAX_FLEET_KEYS, parseKeyFingerprintOffer } from './fleet.js';
export type {
  ClaimOptions,
  ClaimResult,
  KeyFingerprint,
  RecordingReplayStore,
  SpendOptions,
  StoreCapabilities,
} from './interfaces.js';
export { checkLeaseMs, checkOwner } from './lease-args.js';
export {
  DEFAULT_MAX_OUTCOME_BYTES,
  DEFAULT_OUTCOME_BUDGET_BYTES,
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  type ParsedOutcomeStoreLimits,
  parseOutcomeStoreLimits,
} from './outcome-limits.js';
export { ownerValues } from './random.js';
export { redactUrl } from './redact.js';
export { BackgroundError } from './validate.js';

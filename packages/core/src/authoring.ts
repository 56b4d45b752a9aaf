/**
 * `@mrtr/core/authoring`: what codec, store and integration authors need beyond the application API —
 * the concrete error classes to throw, option parsing and validators, strict base64url, random bytes, UTF-8, the claims
 * shape check, the token prefix scanner, canonical JSON, a deadline helper, URL redaction.
 */
export { type BatchEntry, type Batcher, type BatcherOptions, type BatchFlush, createBatcher } from './util/batcher.js';
export { storeCapabilities } from './capabilities.js';
export { fullStoreCapabilities } from './store-support.js';
export { assertStateClaims, CLAIMS_VERSION, isStateClaims } from './claims.js';
export {
  type CodecOptionLimits,
  type CodecOptions,
  type ParsedCodecOptions,
  parseCodecOptions,
} from './codec-options.js';
export { codecFormat } from './codec-format.js';
export { andThen, type Awaitable, isPromiseLike } from './crypto/awaitable.js';
export { isCanonicalBase64url } from './crypto/base64url.js';
export { withDeadline } from './util/deadline.js';
export {
  DEFAULT_MAX_OUTCOME_BYTES,
  DEFAULT_OUTCOME_BUDGET_BYTES,
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type ParsedOutcomeStoreLimits,
  parseOutcomeStoreLimits,
} from './outcomes/limits.js';
export { isIdempotencyKey, keyTtlMs } from './guard/key-state.js';
export { STATE_GUARD_OPTIONS } from './guard/options.js';
export { createPrincipalTagger, type Principal, principalPolicy } from './guard/principal.js';
export { redactUrl } from './util/redact.js';
export * from './error-classes.js';
export { createEventSink, createFlowTagger, safeEmitter } from './events.js';
export { canonicalJson, utf8Decode, utf8Encode } from './util/json.js';
export {
  applyKeyFingerprintOffer,
  checkFleetKeys,
  fleetKeysFull,
  keyFingerprint,
  MAX_FLEET_KEYS,
  parseKeyFingerprintOffer,
} from './keys/fleet.js';
export { MAX_RING_KEYS, MIN_KEY_BYTES } from './keys/keys.js';
export { checkLeaseMs, checkOwner } from './util/lease-args.js';
export type { ClientCapabilities, InputRequest } from './protocol.js';
export { base64urlDecode, base64urlEncode, ownerValues, randomBytes } from './util/random.js';
export {
  asTaskRecord,
  assertTaskChange,
  isTerminalStatus,
  parseTaskStoreLimits,
  roomFromAtLeast,
  TASK_STORE_LIMIT_OPTIONS,
  taskExpiresAt,
} from './tasks/tasks.js';
export {
  assertTaskCreateArguments,
  assertTaskUpdateArguments,
  parseTaskUpdateOptions,
  runTaskUpdate,
  TASK_UPDATE_OPTIONS,
  type TaskUpdateOptions,
  type TaskUpdateSteps,
} from './tasks/options.js';
export { readTokenPrefix, type TokenPrefix } from './util/token.js';
export {
  BackgroundError,
  boolOption,
  fnOption,
  intOption,
  isObject,
  oneOfOption,
  type OptionNames,
  optionsObject,
  rejectUnknownOptions,
  stringOption,
} from './util/validate.js';

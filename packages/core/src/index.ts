/**
 * `@mrtr/core` for application authors: the key ring, the state guard, the codec and store interfaces,
 * and the errors to match on. Codec and store authors find their helpers in `@mrtr/core/authoring`.
 */
export type { FlowClaims, RequestBinding, StateClaims } from './claims.js';
export type { Awaitable } from './crypto/awaitable.js';
export {
  type AnyMrtrError,
  isServerFault,
  type KeyMismatch,
  type KeyMismatchOptions,
  MRTR_ERROR_CODES,
  MRTR_REJECTION_CODES,
  MrtrError,
  type MrtrErrorCode,
  type MrtrErrorOptions,
  type TaskLimit,
} from './errors.js';
export * from './error-classes.js';
export type {
  AnswerEvent,
  EventBase,
  EventHook,
  EventSink,
  FlowCompletedEvent,
  FlowStartedEvent,
  GuardEvent,
  MrtrEvent,
  OutcomeDropReason,
  OutcomeDroppedEvent,
  StateMintedEvent,
  StateOpenedEvent,
  StateRejectedEvent,
  StateRetriedEvent,
  RoundUnknownEvent,
  StoreClockEvent,
  StoreErrorEvent,
} from './events.js';
export {
  type AdmitOptions,
  createStateGuard,
  type GuardRequest,
  type MintedState,
  type MintOptions,
  type MintQuota,
  type OpenedState,
  type RequestContext,
  type StateGuard,
  type StateGuardOptions,
} from './guard/guard.js';
export type { Admission } from './outcomes/outcomes.js';
export type {
  ClaimOptions,
  ClaimResult,
  CodecFactory,
  CodecInput,
  KeyFingerprint,
  OpenedToken,
  RecordingReplayStore,
  ReplayStore,
  SpendOptions,
  StateCodec,
  StoreCapabilities,
} from './interfaces.js';
export type { OutcomeStoreLimits } from './outcomes/limits.js';
export type { ClockSample } from './guard/store-clock.js';
export type { FleetKeyCheck } from './keys/fleet.js';
export { KeyProvider, type KeyProviderOptions } from './keys/provider.js';
export {
  deriveKey,
  type KeySetInput,
  keysFromEnv,
  type KeysFromEnvOptions,
  type OctJwk,
  type OctJwkSet,
  parseJwks,
  parseKeySet,
  type RotationScheduleOptions,
  scheduleRotation,
  toJwks,
} from './keys/sources.js';
export { generateKey, type KeyInput, KeyRing, type ScheduledKey } from './keys/keys.js';
export type { JsonObject, JsonPrimitive, JsonValue } from './protocol.js';
export type {
  ParsedTaskStoreLimits,
  TaskError,
  TaskInputRequest,
  TaskRecord,
  TaskStatus,
  TaskStore,
  TaskStoreLimits,
} from './tasks/tasks.js';

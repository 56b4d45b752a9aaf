/**
 * `@mrtr/core` for application (server) authors: the state guard and its options, the key ring and the key
 * provider, the contracts a guard is built from (`StateCodec`, `ReplayStore`) and `MrtrError` to catch. The rest is
 * behind one door per audience: `/errors` (every error class and code list), `/events` (what `onEvent` receives),
 * `/keys` (key sets, JWK Sets and rotation), `/node` (key files), and for authors `/codec`, `/store`, `/tasks`,
 * `/adapter`, `/options`, `/encoding`.
 */
export type { Awaitable } from './crypto/awaitable.js';
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
export { MrtrError, type MrtrErrorCode } from './errors.js';
export type { Admission } from './outcomes/outcomes.js';
export type { CodecFactory, ReplayStore, StateCodec } from './interfaces.js';
export type { ClockSample } from './guard/store-clock.js';
export type { FleetKeyCheck } from './keys/fleet.js';
export { KeyProvider, type KeyProviderOptions } from './keys/provider.js';
export { keysFromEnv, type KeysFromEnvOptions } from './keys/sources.js';
export { generateKey, type KeyInput, KeyRing } from './keys/keys.js';
export type { JsonObject, JsonPrimitive, JsonValue } from './protocol.js';

/**
 * `@mrtr/core/keys`: key sets beyond `KeyRing` and `keysFromEnv` — the key-set and JWK Set formats a `KeyProvider`
 * source returns (`parseKeySet`, `parseJwks`, `toJwks`), keys derived from a secret the app holds (`deriveKey`),
 * a rotation schedule (`scheduleRotation`, what `mrtr keys rotate --file` writes) and the ring's bounds.
 */
export {
  deriveKey,
  type KeySetInput,
  type OctJwk,
  type OctJwkSet,
  parseJwks,
  parseKeySet,
  type RotationScheduleOptions,
  scheduleRotation,
  toJwks,
} from './keys/sources.js';
export { MAX_RING_KEYS, MIN_KEY_BYTES, type ScheduledKey } from './keys/keys.js';

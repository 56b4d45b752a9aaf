import type { KeyRing } from '@mrtr/core';
import { type JweCodec, type JweCodecOptions, createCodecWithEngine } from './codec.js';
import { engine } from '#engine';

export {
  JWE_LIMITS,
  JWE_KEY_PURPOSE,
  type JweCodec,
  type JweCodecOptions,
} from './codec.js';
export { JWE_ALG, JWE_ENC } from './header.js';

/**
 * A `StateCodec` that seals claims as a standard compact JWE (`alg: "dir"`, `enc: "A256GCM"`, `kid`
 * in the protected header) whose plaintext is a JWT Claims Set. Confidential and authenticated.
 * On Node it runs synchronously on `node:crypto`; on other runtimes it runs on jose (async WebCrypto).
 *
 * A codec factory: pass it as `codec: createJweCodec` (or `(keys) => createJweCodec(keys, options)`).
 */
export function createJweCodec(keys: KeyRing, options?: JweCodecOptions): JweCodec {
  return createCodecWithEngine(engine, keys, options);
}

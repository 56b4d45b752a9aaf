import type { KeyRing } from '@mrtr/core';
import { type BuildCodec, createCodec } from '#engine';
import type { HmacCodecOptions } from './format.js';

export {
  HMAC_FORMAT_VERSION,
  HMAC_KEY_PURPOSE,
  HMAC_LIMITS,
  type HmacCodecOptions,
} from './format.js';
export type { HmacCodec } from './types.js';

/**
 * The HMAC codec: `m1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256)>`.
 *
 * Integrity only — the claims are readable by anyone holding the token. The MAC covers the whole
 * text before the last dot (`m1.<kid>.<body>`), so the format version and key id are authenticated.
 * One cached HKDF subkey per key id.
 *
 * Two builds, chosen by the `node` export condition, one type ({@link HmacCodec}): on Node (and unbundled Bun and
 * Deno) `seal` and `unseal` answer synchronously on `node:crypto`; everywhere else (browsers, workerd, web bundles)
 * they run on WebCrypto and return promises. `await` their results (the state guard does).
 *
 * A codec factory: pass it as `codec: createHmacCodec` (or `(keys) => createHmacCodec(keys, options)`).
 */
export function createHmacCodec(keys: KeyRing, options?: HmacCodecOptions): BuildCodec {
  return createCodec(keys, options);
}

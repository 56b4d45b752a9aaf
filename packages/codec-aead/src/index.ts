import type { KeyRing } from '@mrtr/core';
import { type BuildCodec, createCodec } from '#engine';
import type { AeadCodecOptions } from './format.js';

export { MAX_NESTING as AEAD_MAX_NESTING } from './decode.js';
export {
  AEAD_LIMITS,
  AEAD_FORMAT_VERSION,
  AEAD_KEY_PURPOSE,
  type AeadCodecOptions,
} from './format.js';
export type { AeadCodec } from './types.js';

/**
 * The AEAD codec: `x1.<kid>.<base64url(nonce ‖ ciphertext ‖ tag)>`, where the plaintext is the
 * MessagePack encoding of the claims and the cipher is XChaCha20-Poly1305 (@noble/ciphers) with a
 * fresh random 24-byte nonce per seal and the ASCII text `x1.<kid>` as associated data.
 *
 * Confidential and authenticated. Decryption happens before any unpacking, and the unpacker is a
 * bounded validating decoder for the JSON subset (see `decode.ts`). One cached HKDF subkey per key id;
 * nonces from `@mrtr/core`'s CSPRNG.
 *
 * Two builds, chosen by the `node` export condition, one type ({@link AeadCodec}): on Node (and unbundled Bun and
 * Deno) `seal` and `unseal` answer synchronously and msgpackr packs; everywhere else (browsers, workerd, web bundles)
 * the subkey is derived with async WebCrypto, a small packer writes the same bytes, and `seal`/`unseal` return
 * promises. `await` their results (the state guard does).
 *
 * A codec factory: pass it as `codec: createAeadCodec` (or `(keys) => createAeadCodec(keys, options)`).
 */
export function createAeadCodec(keys: KeyRing, options?: AeadCodecOptions): BuildCodec {
  return createCodec(keys, options);
}

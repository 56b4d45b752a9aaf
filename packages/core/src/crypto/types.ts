export type { Awaitable } from './awaitable.js';
import type { Awaitable } from './awaitable.js';

/**
 * The primitives core needs. On Node they are synchronous `node:crypto` calls; on runtimes that only
 * have WebCrypto they are async `crypto.subtle` calls. The build picks one through `exports` conditions.
 */
export interface CryptoProvider {
  readonly name: 'node' | 'web';
  sha256(data: Uint8Array): Awaitable<Uint8Array>;
  /** base64url SHA-256 of the UTF-8 of `text` (lone surrogates as U+FFFD, as `TextEncoder` writes them). */
  sha256Text(text: string): Awaitable<string>;
  hmacSha256(key: Uint8Array, data: Uint8Array): Awaitable<Uint8Array>;
  hkdfSha256(ikm: Uint8Array, salt: Uint8Array, info: Uint8Array, length: number): Awaitable<Uint8Array>;
  /** CSPRNG bytes; on Node drawn from a pooled buffer refilled with `randomFillSync`. */
  randomBytes(length: number): Uint8Array;
  base64urlEncode(bytes: Uint8Array): string;
  /** Strict, canonical base64url (no padding, no other alphabet, zero trailing bits); `undefined` if not. */
  base64urlDecode(text: string): Uint8Array | undefined;
}

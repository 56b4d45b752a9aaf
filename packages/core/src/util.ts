import { cryptoProvider } from './crypto/impl.js';

/** CSPRNG bytes; on Node from a pooled buffer refilled with `randomFillSync` (≈0.1 µs instead of ≈5 µs). */
export function randomBytes(length: number): Uint8Array {
  return cryptoProvider.randomBytes(length);
}

/** Unpadded base64url. */
export function base64urlEncode(bytes: Uint8Array): string {
  return cryptoProvider.base64urlEncode(bytes);
}

/** Strict canonical base64url decode; `undefined` for anything else (other alphabet, padding, stray bits). */
export function base64urlDecode(text: string): Uint8Array | undefined {
  return cryptoProvider.base64urlDecode(text);
}

export { isCanonicalBase64url } from './crypto/base64url.js';

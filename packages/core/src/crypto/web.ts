import { decodeBase64urlPortable, encodeBase64urlPortable } from './base64url.js';
import type { CryptoProvider } from './types.js';

interface SubtleLike {
  digest(algorithm: string, data: Uint8Array): Promise<ArrayBuffer>;
  importKey(format: 'raw', key: Uint8Array, algorithm: unknown, extractable: boolean, usages: string[]): Promise<unknown>;
  sign(algorithm: string, key: unknown, data: Uint8Array): Promise<ArrayBuffer>;
  deriveBits(algorithm: unknown, key: unknown, length: number): Promise<ArrayBuffer>;
}
interface WebCryptoLike {
  subtle: SubtleLike;
  getRandomValues<T extends Uint8Array>(array: T): T;
}

function webCrypto(): WebCryptoLike {
  const c = (globalThis as { crypto?: WebCryptoLike }).crypto;
  if (!c?.subtle) throw new TypeError('@mrtr/core: this runtime has no WebCrypto (globalThis.crypto.subtle)');
  return c;
}

export const cryptoProvider: CryptoProvider = {
  name: 'web',
  async sha256(data) {
    return new Uint8Array(await webCrypto().subtle.digest('SHA-256', data));
  },
  async sha256Text(text) {
    const digest = await webCrypto().subtle.digest('SHA-256', new TextEncoder().encode(text));
    return encodeBase64urlPortable(new Uint8Array(digest));
  },
  async hmacSha256(key, data) {
    const subtle = webCrypto().subtle;
    const k = await subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    return new Uint8Array(await subtle.sign('HMAC', k, data));
  },
  async hkdfSha256(ikm, salt, info, length) {
    const subtle = webCrypto().subtle;
    const k = await subtle.importKey('raw', ikm, 'HKDF', false, ['deriveBits']);
    return new Uint8Array(await subtle.deriveBits({ name: 'HKDF', hash: 'SHA-256', salt, info }, k, length * 8));
  },
  randomBytes(length) {
    if (!Number.isInteger(length) || length < 0) throw new RangeError('randomBytes: length must be a non-negative integer');
    const out = new Uint8Array(length);
    // getRandomValues fills at most 65536 bytes per call.
    for (let i = 0; i < length; i += 65536) webCrypto().getRandomValues(out.subarray(i, Math.min(length, i + 65536)));
    return out;
  },
  base64urlEncode: encodeBase64urlPortable,
  base64urlDecode: decodeBase64urlPortable,
};

import { utf8Decode, utf8Encode } from '@mrtr/core/encoding';
import { StateIntegrityError, StateMalformedError } from '@mrtr/core/errors';
import { CompactEncrypt, type CryptoKey, compactDecrypt } from 'jose';
import type { JweEngine, JweParts } from './types.js';

interface SubtleImport {
  importKey(format: 'raw', key: Uint8Array, algorithm: 'AES-GCM', extractable: false, usages: string[]): Promise<CryptoKey>;
}

function subtle(): SubtleImport {
  const c = (globalThis as { crypto?: { subtle?: SubtleImport } }).crypto;
  if (!c?.subtle) throw new TypeError('@mrtr/codec-jwe: this runtime has no WebCrypto (globalThis.crypto.subtle)');
  return c.subtle;
}

const DECRYPT_OPTIONS = { keyManagementAlgorithms: ['dir'], contentEncryptionAlgorithms: ['A256GCM'] };

/**
 * jose (WebCrypto, async) for runtimes without `node:crypto`. The key is imported once as a
 * non-extractable `CryptoKey`, so jose does not run `importKey` on every call.
 */
export const engine: JweEngine<CryptoKey> = {
  name: 'web',
  importKey: (cek) => subtle().importKey('raw', cek, 'AES-GCM', false, ['encrypt', 'decrypt']),
  encrypt: (key, header, plaintext) =>
    new CompactEncrypt(utf8Encode(plaintext)).setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid: header.kid }).encrypt(key),
  async decrypt(key: CryptoKey, parts: JweParts): Promise<string> {
    let plaintext: Uint8Array;
    try {
      ({ plaintext } = await compactDecrypt(parts.token, key, DECRYPT_OPTIONS));
    } catch (error) {
      // The header, segments and sizes were checked before; what is left is a tag that does not verify.
      if ((error as { code?: unknown } | null)?.code === 'ERR_JWE_DECRYPTION_FAILED') throw new StateIntegrityError();
      throw new StateMalformedError();
    }
    try {
      return utf8Decode(plaintext);
    } catch {
      throw new StateMalformedError();
    }
  },
};

import { isUtf8 } from 'node:buffer';
import { type KeyObject, createCipheriv, createDecipheriv, createSecretKey } from 'node:crypto';
import { randomBytes } from '@mrtr/core/encoding';
import { StateIntegrityError, StateMalformedError } from '@mrtr/core/errors';
import type { JweEngine, JweHeader, JweParts } from './types.js';

const IV_BYTES = 12;
const TAG_BYTES = 16;

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/**
 * Compact JWE (RFC 7516 §7.1) with `dir` + `A256GCM`, built with synchronous `node:crypto`:
 * `header..iv.ciphertext.tag`, AAD = ASCII(header segment). Exported for the byte-compatibility test.
 */
export function encryptWithIv(key: KeyObject, header: JweHeader, plaintext: string, iv: Uint8Array): string {
  const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(header.aad);
  const ciphertext = cipher.update(plaintext, 'utf8');
  cipher.final(); // GCM is a stream mode: final() emits no bytes, it computes the tag.
  const tag = cipher.getAuthTag();
  return `${header.segment}..${asBuffer(iv).toString('base64url')}.${ciphertext.toString('base64url')}.${tag.toString('base64url')}`;
}

export const engine: JweEngine<KeyObject> = {
  name: 'node',
  importKey: (cek) => createSecretKey(cek),
  encrypt: (key, header, plaintext) => encryptWithIv(key, header, plaintext, randomBytes(IV_BYTES)),
  decrypt(key: KeyObject, parts: JweParts): string {
    let plaintext: Buffer | undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, parts.iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(parts.header.aad);
      decipher.setAuthTag(parts.tag);
      plaintext = decipher.update(parts.ciphertext);
      decipher.final(); // throws when the tag does not verify
    } catch {
      plaintext?.fill(0); // unauthenticated plaintext never leaves this function
      throw new StateIntegrityError();
    }
    if (!isUtf8(plaintext)) throw new StateMalformedError();
    return plaintext.toString('utf8');
  },
};

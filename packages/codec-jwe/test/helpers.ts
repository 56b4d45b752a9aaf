import { createCipheriv } from 'node:crypto';
import { type JsonValue, type KeyRing, MrtrError, type MrtrErrorCode } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { randomBytes } from '@mrtr/core/encoding';
import { sampleClaims } from '@mrtr/test-suite';
import { expect } from 'vitest';
import { JWE_KEY_PURPOSE } from '../src/codec.js';
import type { JweEngine } from '../src/engine/types.js';

/** The 32-byte CEK the codec uses for `kid` (what a jose peer is given). */
export function cekOf(keys: KeyRing, kid: string = keys.primaryKid): Uint8Array {
  const cek = keys.subkeySync(kid, JWE_KEY_PURPOSE);
  if (cek === undefined) throw new Error(`no key ${kid}`);
  return cek;
}

/** Claims shaped as the guard mints them (the shared suite's sample, in its second round). */
export function claimsOf<P extends JsonValue>(data: P, overrides: Partial<StateClaims<P>> = {}): StateClaims<P> {
  const claims = sampleClaims(data);
  return { ...claims, flow: { ...claims.flow, round: 2 }, ...overrides };
}

/** The JWT Claims Set the codec writes for `claims` (as an object). */
export function jwtOf(claims: StateClaims): Record<string, unknown> {
  return {
    iat: claims.iat / 1000,
    exp: claims.exp / 1000,
    jti: claims.jti,
    aud: claims.aud,
    sub: claims.sub,
    mrtr: { v: claims.v, req: claims.req, flow: claims.flow, data: claims.data },
  };
}

export const b64 = (bytes: Uint8Array | string): string =>
  Buffer.from(typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes).toString('base64url');

export interface HandTokenOptions {
  /** Raw protected header text (not validated in any way). */
  header: string;
  /** Plaintext bytes or text. */
  plaintext: Uint8Array | string;
  encryptedKey?: string;
  ivBytes?: number;
  tagBytes?: number;
}

/**
 * A compact JWE built by hand with node:crypto: AES-256-GCM under `cek`, AAD = ASCII(header segment),
 * so the tag is valid for whatever header text is given. Used to show that a forbidden header is
 * refused because of the header, not because of the tag.
 */
export function handToken(cek: Uint8Array, options: HandTokenOptions): string {
  const segment = b64(options.header);
  const iv = randomBytes(options.ivBytes ?? 12);
  const tagBytes = options.tagBytes ?? 16;
  const cipher = createCipheriv('aes-256-gcm', cek, iv, { authTagLength: tagBytes });
  cipher.setAAD(Buffer.from(segment, 'ascii'));
  const plaintext = typeof options.plaintext === 'string' ? Buffer.from(options.plaintext, 'utf8') : options.plaintext;
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return [segment, options.encryptedKey ?? '', b64(iv), b64(ciphertext), b64(cipher.getAuthTag())].join('.');
}

/** Wraps an engine and counts decrypt calls, to show that a rejection happened before decryption. */
export function countingEngine<K>(engine: JweEngine<K>): {
  engine: JweEngine<K>;
  decrypts: () => number;
  imports: () => number;
} {
  let decrypts = 0;
  let imports = 0;
  return {
    engine: {
      name: engine.name,
      importKey: (cek) => {
        imports++;
        return engine.importKey(cek);
      },
      encrypt: (key, header, plaintext) => engine.encrypt(key, header, plaintext),
      decrypt: (key, parts) => {
        decrypts++;
        return engine.decrypt(key, parts);
      },
    },
    decrypts: () => decrypts,
    imports: () => imports,
  };
}

/** Awaits `fn` and returns the MrtrError it threw or rejected with; fails the test otherwise. */
export async function mrtrErrorOf(fn: () => unknown, code?: MrtrErrorCode): Promise<MrtrError> {
  let caught: unknown;
  try {
    await fn();
  } catch (error) {
    caught = error;
  }
  expect(caught, 'expected a rejection').toBeInstanceOf(MrtrError);
  const error = caught as MrtrError;
  if (code !== undefined) expect(error.code).toBe(code);
  return error;
}

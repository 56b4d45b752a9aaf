import type { Awaitable, KeyRing, StateCodec } from '@mrtr/core';
import { andThen, type CodecOptionLimits, isPromiseLike, type OpenedToken, parseCodecOptions, type StateClaims } from '@mrtr/core/codec';
import { base64urlDecode } from '@mrtr/core/encoding';
import { KeyUnknownError, StateMalformedError, StateTooLargeError } from '@mrtr/core/errors';
import { decodeClaims, encodeClaims } from './claims.js';
import type { JweEngine, JweHeader, JweParts } from './engine/types.js';
import { headerFor, parseHeader } from './header.js';

/** Options of `createJweCodec` (after the key ring; the CEK is the HKDF subkey `mrtr/codec/jwe/v1` of a key). */
export interface JweCodecOptions {
  /** Largest token `unseal` accepts (and `seal` produces), in characters. @default 16384 */
  maxTokenBytes?: number;
}

/** HKDF `info` of the 32-byte content encryption key (per key in the ring). */
export const JWE_KEY_PURPOSE = 'mrtr/codec/jwe/v1';
/**
 * The `maxTokenBytes` this codec accepts: `defaultMaxTokenBytes` 16 KiB (the state guard's default cap), at least 256
 * (room for a header, IV, tag and a small claims set), at most just under 1 MiB.
 */
export const JWE_LIMITS: Readonly<CodecOptionLimits> = Object.freeze({
  defaultMaxTokenBytes: 16 * 1024,
  minMaxTokenBytes: 256,
  maxMaxTokenBytes: 1024 * 1024 - 1,
});

const IV_SEGMENT_CHARS = 16; // 12 bytes
const TAG_SEGMENT_CHARS = 22; // 16 bytes

/**
 * Builds the codec on an engine. `createJweCodec` passes the engine of this build (node:crypto on
 * Node, jose elsewhere); tests pass either one directly.
 */
export function createCodecWithEngine<K>(engine: JweEngine<K>, keys: KeyRing, options?: JweCodecOptions): JweCodec {
  const { maxTokenBytes } = parseCodecOptions('createJweCodec', keys, options, JWE_LIMITS);
  const primary = headerFor(keys.primaryKid);
  // The ring's own header spellings: opening a token with one of them skips the header parse.
  const knownHeaders = new Map<string, JweHeader>();
  for (const kid of keys.kids) {
    const header = kid === primary.kid ? primary : headerFor(kid);
    knownHeaders.set(header.segment, header);
  }
  const keyCache = new Map<string, Awaitable<K>>();

  const keyFor = (kid: string): Awaitable<K> => {
    let key = keyCache.get(kid);
    if (key === undefined) {
      const cek = keys.subkey(kid, JWE_KEY_PURPOSE, 32);
      if (cek === undefined) throw new KeyUnknownError();
      key = andThen(cek, (bytes) => engine.importKey(bytes));
      if (isPromiseLike(key)) {
        const pending = key;
        pending.then(
          (resolved) => keyCache.set(kid, resolved),
          () => {
            if (keyCache.get(kid) === pending) keyCache.delete(kid);
          },
        );
      }
      keyCache.set(kid, key);
    }
    return key;
  };

  const checkSize = (token: string): string => {
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    return token;
  };

  const seal = (claims: StateClaims): Awaitable<string> => {
    const plaintext = encodeClaims(claims);
    return andThen(
      andThen(keyFor(primary.kid), (key) => engine.encrypt(key, primary, plaintext)),
      checkSize,
    );
  };

  const unseal = (token: string): Awaitable<OpenedToken> => {
    if (typeof token !== 'string') throw new StateMalformedError();
    // Size first, before any decoding. A string longer than the cap in UTF-16 units is longer in bytes too.
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    // Compact serialization: exactly five segments, header.encryptedKey.iv.ciphertext.tag.
    const d1 = token.indexOf('.');
    const d2 = token.indexOf('.', d1 + 1);
    const d3 = token.indexOf('.', d2 + 1);
    const d4 = token.indexOf('.', d3 + 1);
    if (d1 <= 0 || d2 < 0 || d3 < 0 || d4 < 0 || token.indexOf('.', d4 + 1) >= 0) throw new StateMalformedError();
    const headerSegment = token.slice(0, d1);
    const header = knownHeaders.get(headerSegment) ?? parseHeader(headerSegment);
    // dir: the JWE Encrypted Key must be the empty octet sequence (RFC 7516 §5.1 step 6).
    if (d2 !== d1 + 1) throw new StateMalformedError();
    if (d3 - d2 - 1 !== IV_SEGMENT_CHARS || token.length - d4 - 1 !== TAG_SEGMENT_CHARS || d4 === d3 + 1) {
      throw new StateMalformedError();
    }
    const iv = base64urlDecode(token.slice(d2 + 1, d3));
    const ciphertext = base64urlDecode(token.slice(d3 + 1, d4));
    const tag = base64urlDecode(token.slice(d4 + 1));
    if (iv === undefined || ciphertext === undefined || tag === undefined) throw new StateMalformedError();
    // A well-formed token for a key this ring does not hold: refused before any decryption.
    if (!keys.has(header.kid)) throw new KeyUnknownError();
    const parts: JweParts = { token, header, iv, ciphertext, tag };
    const kid = header.kid;
    const finish = (plaintext: string): OpenedToken => ({ claims: decodeClaims(plaintext), kid });
    return andThen(
      andThen(keyFor(kid), (key) => engine.decrypt(key, parts)),
      finish,
    );
  };

  if (engine.name === 'node') {
    return Object.freeze({ id: 'jwe' as const, confidential: true as const, maxTokenBytes, keys, seal, unseal });
  }
  // Async engine: every failure is a rejected promise, never a synchronous throw.
  const unsealAsync = async (token: string): Promise<OpenedToken> => unseal(token);
  return Object.freeze({
    id: 'jwe' as const,
    confidential: true as const,
    maxTokenBytes,
    keys,
    seal: async (claims: StateClaims) => seal(claims),
    unseal: unsealAsync,
  });
}

/**
 * The JWE codec: a `StateCodec` whose `seal` and `unseal` answer synchronously on the Node build (`node:crypto`) and
 * with a promise on other runtimes (jose on WebCrypto); `await` their results.
 */
export interface JweCodec extends StateCodec {
  readonly id: 'jwe';
  readonly confidential: true;
}

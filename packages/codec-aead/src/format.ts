import type { KeyRing } from '@mrtr/core';
import { codecFormat, isStateClaims, type CodecOptionLimits, type CodecOptions, type StateClaims } from '@mrtr/core/codec';
import { base64urlDecode } from '@mrtr/core/encoding';
import { StateMalformedError, StateTooLargeError } from '@mrtr/core/errors';
import { MAX_NESTING, type Slicer, decodeClaims } from './decode.js';

/**
 * Options of {@link createAeadCodec} (after the key ring): `maxTokenBytes`, the largest token (in characters) that
 * `open` accepts and `seal` produces (longer input is refused with `ERR_STATE_TOO_LARGE` before any decoding), an
 * integer within {@link AEAD_LIMITS}: 256 – 524 288, 16384 by default.
 */
export type AeadCodecOptions = CodecOptions;

/** Format version tag: the first segment of every token, bound as associated data. */
export const AEAD_FORMAT_VERSION = 'x1' as const;
/** HKDF purpose of the encryption subkey (`KeyRing.subkey(kid, purpose)`). */
export const AEAD_KEY_PURPOSE = 'mrtr/codec/aead/v1' as const;

const FORMAT = codecFormat('createAeadCodec', AEAD_FORMAT_VERSION);
/**
 * The `maxTokenBytes` this codec accepts: `defaultMaxTokenBytes` 16,384 (the guard's default cap), at least 256, at
 * most 524,288.
 */
export const AEAD_LIMITS: Readonly<CodecOptionLimits> = FORMAT.limits;

export const NONCE_BYTES = 24;
export const TAG_BYTES = 16;

/** Characters of unpadded base64url for `bytes` bytes. */
const base64urlLength = (bytes: number): number => Math.floor((bytes * 4 + 2) / 3);

/** The associated data `x1.<kid>` (ASCII) of a key id. */
export const adTextFor = (kid: string): string => `${AEAD_FORMAT_VERSION}.${kid}`;

/** The key material of a key id. */
export interface KidKeys {
  key: Uint8Array;
  /** Associated data: ASCII `x1.<kid>`. */
  ad: Uint8Array;
}

/** Option parsing shared by both builds. */
export function parseAeadOptions(keys: KeyRing, options: AeadCodecOptions | undefined): { maxTokenBytes: number } {
  return FORMAT.parseOptions(keys, options);
}

/** The token prefix `x1.<kid>.` of a key id. */
export const prefixFor: (kid: string) => string = FORMAT.prefixFor;

/** Largest nonce ‖ ciphertext ‖ tag whose token (with `prefix`) fits `maxTokenBytes`. */
export const maxSealedBytesFor = (maxTokenBytes: number, prefix: string): number => Math.floor(((maxTokenBytes - prefix.length) * 3) / 4);

const isWellFormed = (text: string): boolean => (text as unknown as { isWellFormed(): boolean }).isWellFormed();

/**
 * True when `value` is already exactly what the JSON data model would give back: finite numbers,
 * well-formed strings, plain arrays without holes or `undefined`, plain objects (prototype
 * `Object.prototype` or `null`) without `undefined`/function members and without `toJSON`, nesting
 * ≤ {@link MAX_NESTING}. Such a tree packs to MessagePack that `decodeClaims` returns unchanged.
 */
function isPlainJson(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
      return isWellFormed(value);
    case 'number':
      return Number.isFinite(value);
    case 'boolean':
      return true;
    case 'object': {
      if (value === null) return true;
      if (depth >= MAX_NESTING) return false;
      if (Array.isArray(value)) {
        if (Object.getPrototypeOf(value) !== Array.prototype) return false;
        for (let i = 0; i < value.length; i++) {
          if (!(i in value) || !isPlainJson(value[i], depth + 1)) return false;
        }
        return true;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      const record = value as Record<string, unknown>;
      if (typeof record['toJSON'] === 'function') return false;
      const names = Object.keys(record);
      for (let i = 0; i < names.length; i++) {
        const name = names[i]!;
        if (!isWellFormed(name) || !isPlainJson(record[name], depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** The value to pack for `claims` (both builds): the claims themselves, or the JSON data model's answer. */
export function packableClaims(claims: StateClaims): unknown {
  if (!isStateClaims(claims) || claims.data === undefined) {
    throw new TypeError('AeadCodec.seal: claims must be StateClaims');
  }
  let value: unknown = claims;
  if (!isPlainJson(claims, 0)) {
    // Rare path: give the JSON data model's answer (toJSON, dropped undefined members, …), as the
    // HMAC and JWE codecs do; JSON.stringify throws the TypeError for bigint and cycles.
    value = JSON.parse(JSON.stringify(claims));
    if (!isStateClaims(value) || !isPlainJson(value, 0)) {
      throw new TypeError(`AeadCodec.seal: claims must be JSON with well-formed Unicode strings, nested at most ${MAX_NESTING} deep`);
    }
  }
  return value;
}

/** Throws `ERR_STATE_TOO_LARGE` when the sealed bytes would not fit. */
export function checkSealedLength(sealedLength: number, maxSealedBytes: number): void {
  if (sealedLength > maxSealedBytes) throw new StateTooLargeError();
}

/**
 * Steps 1–2 of `open`, shared by both builds: type and size cap before anything looks at the content,
 * then the format "x1." kid "." body, with a body of strict canonical base64url long enough for a
 * nonce, a tag and at least one byte of plaintext.
 */
export function parseAeadToken(token: string, maxTokenBytes: number): { kid: string; sealed: Uint8Array } {
  const prefix = FORMAT.readPrefix(token, maxTokenBytes, base64urlLength(NONCE_BYTES + 1 + TAG_BYTES));
  const body = token.slice(prefix.end);
  if (body.length < base64urlLength(NONCE_BYTES + 1 + TAG_BYTES)) throw new StateMalformedError();
  // Canonical: one byte string has exactly one text (also refuses a second '.').
  const sealed = base64urlDecode(body);
  if (sealed === undefined) throw new StateMalformedError();
  return { kid: prefix.kid, sealed };
}

/** Step 5 of `open`: bounded unpacking of authentic bytes, then the shape. */
export function claimsFromPlaintext(plaintext: Uint8Array, makeSlicer?: (bytes: Uint8Array) => Slicer): StateClaims {
  const claims = decodeClaims(plaintext, makeSlicer);
  if (!isStateClaims(claims)) throw new StateMalformedError();
  return claims;
}

import {
  type KeyRing,
  KeyUnknownError,
  type OpenedToken,
  type StateClaims,
  type StateCodec,
  StateIntegrityError,
  StateMalformedError,
  StateTooLargeError,
  base64urlDecode,
  isStateClaims,
  randomBytes,
  parseCodecOptions,
} from '@mrtr/core';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { Packr } from 'msgpackr';
import { MAX_NESTING, decodeClaims } from './decode.js';

export { MAX_NESTING as AEAD_MAX_NESTING } from './decode.js';

/** Options of {@link createAeadCodec}. */
export interface AeadCodecOptions {
  /** Key ring: the primary key seals, every key opens. Each key gets its own HKDF subkey for this codec. */
  keys: KeyRing;
  /**
   * Largest token (in characters) that `open` accepts and `seal` produces. Longer input is refused
   * with `ERR_STATE_TOO_LARGE` before any decoding. Integer, 256 – 524 288. @default 16384
   */
  maxTokenBytes?: number;
}

/** The AEAD codec: a `StateCodec` whose `seal` and `open` are synchronous. */
export interface AeadCodec extends StateCodec {
  readonly id: 'aead';
  readonly confidential: true;
  seal(claims: StateClaims): string;
  open(token: string): OpenedToken;
}

/** Format version tag: the first segment of every token, bound as associated data. */
export const AEAD_FORMAT_VERSION = 'x1' as const;
/** HKDF purpose of the encryption subkey (`KeyRing.subkey(kid, purpose)`). */
export const AEAD_KEY_PURPOSE = 'mrtr/codec/aead/v1' as const;
/** Default and allowed range of `maxTokenBytes`. */
export const AEAD_DEFAULT_MAX_TOKEN_BYTES = 16_384;
export const AEAD_MIN_MAX_TOKEN_BYTES = 256;
export const AEAD_MAX_MAX_TOKEN_BYTES = 524_288;

const PREFIX = `${AEAD_FORMAT_VERSION}.`;
const PREFIX_LENGTH = PREFIX.length;
const NONCE_BYTES = 24;
const TAG_BYTES = 16;
const MAX_KID_CHARS = 32;
const DOT = 0x2e;

/** Characters of unpadded base64url for `bytes` bytes. */
const base64urlLength = (bytes: number): number => Math.floor((bytes * 4 + 2) / 3);

function isKidChar(c: number): boolean {
  return (
    (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x5f
  );
}

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

/**
 * The AEAD codec: `x1.<kid>.<base64url(nonce ‖ ciphertext ‖ tag)>`, where the plaintext is the
 * MessagePack (msgpackr) encoding of the claims and the cipher is XChaCha20-Poly1305 (@noble/ciphers)
 * with a fresh random 24-byte nonce per seal and the ASCII text `x1.<kid>` as associated data.
 *
 * Confidential and authenticated. Decryption happens before any unpacking, and the unpacker is a
 * bounded validating decoder for the JSON subset (see `decode.ts`). Synchronous; one cached HKDF
 * subkey per key id; nonces from `@mrtr/core`'s pooled CSPRNG.
 */
export function createAeadCodec(options: AeadCodecOptions): AeadCodec {
  const { keys, maxTokenBytes } = parseCodecOptions('createAeadCodec', options, {
    defaultMaxTokenBytes: AEAD_DEFAULT_MAX_TOKEN_BYTES,
    minMaxTokenBytes: AEAD_MIN_MAX_TOKEN_BYTES,
    maxMaxTokenBytes: AEAD_MAX_MAX_TOKEN_BYTES,
  });

  interface KidKeys {
    key: Uint8Array;
    /** Associated data: ASCII `x1.<kid>`. */
    ad: Uint8Array;
    /** Token prefix `x1.<kid>.`. */
    prefix: string;
  }
  // kid → key material, derived once. Only kids present in the (immutable) ring are ever inserted.
  const cache = new Map<string, KidKeys>();
  const keysFor = (kid: string): KidKeys | undefined => {
    let entry = cache.get(kid);
    if (entry === undefined) {
      if (!keys.has(kid)) return undefined;
      const key = keys.subkeySync(kid, AEAD_KEY_PURPOSE);
      if (key === undefined) return undefined;
      entry = { key, ad: Buffer.from(`${PREFIX}${kid}`, 'latin1'), prefix: `${PREFIX}${kid}.` };
      cache.set(kid, entry);
    }
    return entry;
  };
  const sealKeys = keysFor(keys.primaryKid);
  if (sealKeys === undefined) throw new TypeError('createAeadCodec: the primary key is missing from the ring');
  const maxSealedBytes = Math.floor(((maxTokenBytes - sealKeys.prefix.length) * 3) / 4);

  const packr = new Packr({
    useRecords: false,
    variableMapSize: true,
    moreTypes: false,
    structuredClone: false,
    bundleStrings: false,
    useToJSON: false,
    encodeUndefinedAsNil: false,
  });
  // Reused output buffer for seal (everything is synchronous, so no call can interleave).
  let sealBuffer = Buffer.allocUnsafe(4096);

  const seal = (claims: StateClaims): string => {
    if (!isStateClaims(claims) || claims.data === undefined) {
      throw new TypeError('AeadCodec.seal: claims must be StateClaims');
    }
    let value: unknown = claims;
    if (!isPlainJson(claims, 0)) {
      // Rare path: give the JSON data model's answer (toJSON, dropped undefined members, …), as the
      // HMAC and JWE codecs do; JSON.stringify throws the TypeError for bigint and cycles.
      value = JSON.parse(JSON.stringify(claims));
      if (!isStateClaims(value) || !isPlainJson(value, 0)) {
        throw new TypeError(
          `AeadCodec.seal: claims must be JSON with well-formed Unicode strings, nested at most ${MAX_NESTING} deep`,
        );
      }
    }
    const plaintext = packr.pack(value);
    const sealedLength = NONCE_BYTES + plaintext.length + TAG_BYTES;
    if (sealedLength > maxSealedBytes) throw new StateTooLargeError();
    if (sealBuffer.length < sealedLength) sealBuffer = Buffer.allocUnsafe(Math.max(sealedLength, sealBuffer.length * 2));
    const nonce = randomBytes(NONCE_BYTES);
    sealBuffer.set(nonce, 0);
    xchacha20poly1305(sealKeys.key, nonce, sealKeys.ad).encrypt(
      plaintext,
      sealBuffer.subarray(NONCE_BYTES, sealedLength),
    );
    return sealKeys.prefix + sealBuffer.toString('base64url', 0, sealedLength);
  };

  const open = (token: string): OpenedToken => {
    // 1. Type and size cap, before anything looks at the content.
    if (typeof token !== 'string') throw new StateMalformedError();
    const n = token.length;
    if (n > maxTokenBytes) throw new StateTooLargeError();
    // 2. Format: "x1." kid "." body, with a body of strict canonical base64url long enough for a
    //    nonce, a tag and at least one byte of plaintext.
    if (n < PREFIX_LENGTH + 2 + base64urlLength(NONCE_BYTES + 1 + TAG_BYTES) || !token.startsWith(PREFIX)) {
      throw new StateMalformedError();
    }
    let i = PREFIX_LENGTH;
    const kidEnd = Math.min(n, PREFIX_LENGTH + MAX_KID_CHARS + 1);
    for (; i < kidEnd; i++) {
      const c = token.charCodeAt(i);
      if (c === DOT) break;
      if (!isKidChar(c)) throw new StateMalformedError();
    }
    if (i === PREFIX_LENGTH || i === kidEnd || token.charCodeAt(i) !== DOT) throw new StateMalformedError();
    const kid = token.slice(PREFIX_LENGTH, i);
    const body = token.slice(i + 1);
    if (body.length < base64urlLength(NONCE_BYTES + 1 + TAG_BYTES)) throw new StateMalformedError();
    // Canonical: one byte string has exactly one text (also refuses a second '.').
    const sealed = base64urlDecode(body);
    if (sealed === undefined) throw new StateMalformedError();
    // 3. Key, only once the format is known to be right.
    const entry = keysFor(kid);
    if (entry === undefined) throw new KeyUnknownError();
    // 4. Decrypt and verify (version and kid are the associated data). Nothing is unpacked before this.
    let plaintext: Uint8Array;
    try {
      // Into a Buffer, which the decoder slices strings from natively.
      plaintext = xchacha20poly1305(entry.key, sealed.subarray(0, NONCE_BYTES), entry.ad).decrypt(
        sealed.subarray(NONCE_BYTES),
        Buffer.allocUnsafe(sealed.length - NONCE_BYTES - TAG_BYTES),
      );
    } catch {
      throw new StateIntegrityError();
    }
    // 5. Bounded unpacking of authentic bytes, then the shape.
    const claims = decodeClaims(plaintext);
    if (!isStateClaims(claims)) throw new StateMalformedError();
    return { claims, kid };
  };

  return Object.freeze({ id: 'aead' as const, confidential: true as const, maxTokenBytes, seal, open });
}

import { type KeyObject, createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
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
  parseCodecOptions,
} from '@mrtr/core';

/** Options of {@link createHmacCodec}. */
export interface HmacCodecOptions {
  /** Key ring: the primary key seals, every key opens. Each key gets its own HKDF subkey for this codec. */
  keys: KeyRing;
  /**
   * Largest token (in characters) that `open` accepts and `seal` produces. Longer input is refused
   * with `ERR_STATE_TOO_LARGE` before any decoding. Integer, 256 – 524 288. @default 16384
   */
  maxTokenBytes?: number;
}

/** The HMAC codec: a `StateCodec` whose `seal` and `open` are synchronous. */
export interface HmacCodec extends StateCodec {
  readonly id: 'hmac';
  readonly confidential: false;
  seal(claims: StateClaims): string;
  open(token: string): OpenedToken;
}

/** Format version tag: the first segment of every token, covered by the MAC. */
export const HMAC_FORMAT_VERSION = 'm1' as const;
/** HKDF purpose of the MAC subkey (`KeyRing.subkey(kid, purpose)`). */
export const HMAC_KEY_PURPOSE = 'mrtr/codec/hmac/v1' as const;
/** Default and allowed range of `maxTokenBytes`. */
export const HMAC_DEFAULT_MAX_TOKEN_BYTES = 16_384;
export const HMAC_MIN_MAX_TOKEN_BYTES = 256;
export const HMAC_MAX_MAX_TOKEN_BYTES = 524_288;

const PREFIX = `${HMAC_FORMAT_VERSION}.`;
const PREFIX_LENGTH = PREFIX.length;
/** base64url of a 32-byte HMAC-SHA256 tag. */
const MAC_CHARS = 43;
const MAX_KID_CHARS = 32;
const DOT = 0x2e;

const bodyText = (bytes: Uint8Array): string =>
  Buffer.isBuffer(bytes) ? bytes.toString('utf8') : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');

/** `A-Z a-z 0-9 - _`, the key-id alphabet of `KeyRing`. */
function isKidChar(c: number): boolean {
  return (
    (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x5f
  );
}

/**
 * The HMAC codec: `m1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256)>`.
 *
 * Integrity only — the claims are readable by anyone holding the token. The MAC covers the whole
 * text before the last dot (`m1.<kid>.<body>`), so the format version and key id are authenticated.
 * Synchronous `node:crypto`; one cached HKDF subkey per key id.
 */
export function createHmacCodec(options: HmacCodecOptions): HmacCodec {
  const { keys, maxTokenBytes } = parseCodecOptions('createHmacCodec', options, {
    defaultMaxTokenBytes: HMAC_DEFAULT_MAX_TOKEN_BYTES,
    minMaxTokenBytes: HMAC_MIN_MAX_TOKEN_BYTES,
    maxMaxTokenBytes: HMAC_MAX_MAX_TOKEN_BYTES,
  });

  // kid → MAC key, derived once. Only kids present in the (immutable) ring are ever inserted.
  const macKeys = new Map<string, KeyObject>();
  const macKeyFor = (kid: string): KeyObject | undefined => {
    let key = macKeys.get(kid);
    if (key === undefined) {
      if (!keys.has(kid)) return undefined;
      const bytes = keys.subkeySync(kid, HMAC_KEY_PURPOSE);
      if (bytes === undefined) return undefined;
      key = createSecretKey(bytes);
      macKeys.set(kid, key);
    }
    return key;
  };

  const sealKid = keys.primaryKid;
  const sealKey = macKeyFor(sealKid);
  if (sealKey === undefined) throw new TypeError('createHmacCodec: the primary key is missing from the ring');
  const sealPrefix = `${PREFIX}${sealKid}.`;

  const seal = (claims: StateClaims): string => {
    if (!isStateClaims(claims) || claims.data === undefined) {
      throw new TypeError('HmacCodec.seal: claims must be StateClaims');
    }
    // JSON.stringify throws the TypeError for bigint and cycles.
    const signed = sealPrefix + Buffer.from(JSON.stringify(claims), 'utf8').toString('base64url');
    if (signed.length + 1 + MAC_CHARS > maxTokenBytes) throw new StateTooLargeError();
    return `${signed}.${createHmac('sha256', sealKey).update(signed, 'latin1').digest('base64url')}`;
  };

  const open = (token: string): OpenedToken => {
    // 1. Type and size cap, before anything looks at the content.
    if (typeof token !== 'string') throw new StateMalformedError();
    const n = token.length;
    if (n > maxTokenBytes) throw new StateTooLargeError();
    // 2. Format: "m1." kid "." body "." mac, each segment in its own strict alphabet.
    if (n < PREFIX_LENGTH + 1 + 1 + 1 + 1 + 1 + MAC_CHARS || !token.startsWith(PREFIX)) throw new StateMalformedError();
    let i = PREFIX_LENGTH;
    const kidEnd = Math.min(n, PREFIX_LENGTH + MAX_KID_CHARS + 1);
    for (; i < kidEnd; i++) {
      const c = token.charCodeAt(i);
      if (c === DOT) break;
      if (!isKidChar(c)) throw new StateMalformedError();
    }
    if (i === PREFIX_LENGTH || i === kidEnd || token.charCodeAt(i) !== DOT) throw new StateMalformedError();
    const kid = token.slice(PREFIX_LENGTH, i);
    const macStart = n - MAC_CHARS;
    const bodyStart = i + 1;
    if (macStart - 1 <= bodyStart || token.charCodeAt(macStart - 1) !== DOT) throw new StateMalformedError();
    // Strict canonical base64url for both (one byte string, one text; also refuses a fifth '.').
    const body = base64urlDecode(token.slice(bodyStart, macStart - 1));
    const mac = base64urlDecode(token.slice(macStart));
    if (body === undefined || mac === undefined) throw new StateMalformedError();
    // 3. Key, only once the format is known to be right.
    const key = macKeyFor(kid);
    if (key === undefined) throw new KeyUnknownError();
    // 4. MAC over the ASCII text "m1.<kid>.<body>", compared in constant time, before any parsing.
    const expected = createHmac('sha256', key).update(token.slice(0, macStart - 1), 'latin1').digest();
    if (!timingSafeEqual(expected, mac)) throw new StateIntegrityError();
    // 5. Only authentic bytes are parsed.
    let claims: unknown;
    try {
      claims = JSON.parse(bodyText(body));
    } catch {
      // No cause: a JSON.parse message can quote the payload.
      throw new StateMalformedError();
    }
    if (!isStateClaims(claims)) throw new StateMalformedError();
    return { claims, kid };
  };

  return Object.freeze({ id: 'hmac' as const, confidential: false as const, maxTokenBytes, seal, open });
}

import type { KeyRing } from '@mrtr/core';
import { codecFormat, isStateClaims, type CodecOptionLimits, type CodecOptions, type StateClaims } from '@mrtr/core/codec';
import { base64urlDecode } from '@mrtr/core/encoding';
import { StateMalformedError, StateTooLargeError } from '@mrtr/core/errors';

/**
 * Options of {@link createHmacCodec} (after the key ring): `maxTokenBytes`, the largest token (in characters) that
 * `open` accepts and `seal` produces (longer input is refused with `ERR_STATE_TOO_LARGE` before any decoding), an
 * integer within {@link HMAC_LIMITS}: 256 – 524 288, 16384 by default.
 */
export type HmacCodecOptions = CodecOptions;

/** Format version tag: the first segment of every token, covered by the MAC. */
export const HMAC_FORMAT_VERSION = 'm1' as const;
/** HKDF purpose of the MAC subkey (`KeyRing.subkey(kid, purpose)`). */
export const HMAC_KEY_PURPOSE = 'mrtr/codec/hmac/v1' as const;

const FORMAT = codecFormat('createHmacCodec', HMAC_FORMAT_VERSION);
/**
 * The `maxTokenBytes` this codec accepts: `defaultMaxTokenBytes` 16,384 (the guard's default cap), at least 256, at
 * most 524,288.
 */
export const HMAC_LIMITS: Readonly<CodecOptionLimits> = FORMAT.limits;

/** base64url of a 32-byte HMAC-SHA256 tag. */
const MAC_CHARS = 43;
const DOT = 0x2e;

/** Option parsing shared by both builds. */
export function parseHmacOptions(keys: KeyRing, options: HmacCodecOptions | undefined): { maxTokenBytes: number } {
  return FORMAT.parseOptions(keys, options);
}

/** `m1.<kid>.`: what every token sealed with `kid` starts with. */
export const sealPrefixFor: (kid: string) => string = FORMAT.prefixFor;

/**
 * The text a new token's MAC covers (both builds): `sealPrefix` and the base64url of the claims' JSON as
 * `encodeJson` gives it; `ERR_STATE_TOO_LARGE` when the token would be longer than `maxTokenBytes`.
 */
export function signedText(sealPrefix: string, claims: StateClaims, encodeJson: (json: string) => string, maxTokenBytes: number): string {
  if (!isStateClaims(claims) || claims.data === undefined) {
    throw new TypeError('HmacCodec.seal: claims must be StateClaims');
  }
  // JSON.stringify throws the TypeError for bigint and cycles.
  return signedJsonText(sealPrefix, JSON.stringify(claims), encodeJson, maxTokenBytes);
}

/**
 * {@link signedText} of claims given as their JSON text (`sealJson`: the caller guarantees it is `JSON.stringify` of
 * valid claims): the same text, the JSON not written again.
 */
export function signedJsonText(sealPrefix: string, json: string, encodeJson: (json: string) => string, maxTokenBytes: number): string {
  if (typeof json !== 'string') throw new TypeError('HmacCodec.sealJson: json must be a string');
  const signed = sealPrefix + encodeJson(json);
  if (signed.length + 1 + MAC_CHARS > maxTokenBytes) throw new StateTooLargeError();
  return signed;
}

/** The parts of a token whose format is right; nothing in it is authenticated yet. */
export interface HmacTokenParts {
  kid: string;
  /** End of the MAC'd text `m1.<kid>.<body>` (index of the last dot). */
  signedEnd: number;
  body: Uint8Array;
  mac: Uint8Array;
}

/**
 * Steps 1–2 of `open`, shared by both builds: type and size cap before anything looks at the content,
 * then the format ("m1." kid "." body "." mac), each segment in its own strict alphabet.
 */
export function parseHmacToken(token: string, maxTokenBytes: number): HmacTokenParts {
  // After the prefix: a body character, a dot and the MAC.
  const { kid, end: bodyStart } = FORMAT.readPrefix(token, maxTokenBytes, 1 + 1 + MAC_CHARS);
  const n = token.length;
  const macStart = n - MAC_CHARS;
  if (macStart - 1 <= bodyStart || token.charCodeAt(macStart - 1) !== DOT) throw new StateMalformedError();
  // Strict canonical base64url for both (one byte string, one text; also refuses a fifth '.').
  const body = base64urlDecode(token.slice(bodyStart, macStart - 1));
  const mac = base64urlDecode(token.slice(macStart));
  if (body === undefined || mac === undefined) throw new StateMalformedError();
  return { kid, signedEnd: macStart - 1, body, mac };
}

/** Step 5 of `open`: only authentic text is parsed. */
export function parseClaimsJson(text: string): StateClaims {
  let claims: unknown;
  try {
    claims = JSON.parse(text);
  } catch {
    // No cause: a JSON.parse message can quote the payload.
    throw new StateMalformedError();
  }
  if (!isStateClaims(claims)) throw new StateMalformedError();
  return claims;
}

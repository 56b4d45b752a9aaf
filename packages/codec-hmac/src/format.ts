import type { KeyRing, StateClaims } from '@mrtr/core';
import {
  type CodecOptionLimits,
  type CodecOptions,
  DEFAULT_CODEC_LIMITS,
  StateMalformedError,
  StateTooLargeError,
  base64urlDecode,
  isStateClaims,
  parseCodecOptions,
  readTokenHead,
} from '@mrtr/core/authoring';

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
/**
 * The `maxTokenBytes` this codec accepts: `defaultMaxTokenBytes` 16,384 (the guard's default cap), at least 256, at
 * most 524,288 (core's `DEFAULT_CODEC_LIMITS`).
 */
export const HMAC_LIMITS: Readonly<CodecOptionLimits> = DEFAULT_CODEC_LIMITS;

const PREFIX = `${HMAC_FORMAT_VERSION}.`;
const PREFIX_LENGTH = PREFIX.length;
/** base64url of a 32-byte HMAC-SHA256 tag. */
const MAC_CHARS = 43;
const DOT = 0x2e;

/**
 * The format half of the codec, the same on both builds: the options parsed, the sealing key id, the text a new
 * token's MAC covers, and the parts of a presented token. The builds add the MAC (node:crypto or WebCrypto).
 */
export interface HmacFormat {
  readonly maxTokenBytes: number;
  /** The key id new tokens are sealed with (the ring's primary). */
  readonly sealKid: string;
  /**
   * `m1.<sealKid>.<body>`, the text the MAC of a new token covers, with `body` the base64url of the claims' JSON as
   * `encodeJson` gives it (`ERR_STATE_TOO_LARGE` when the token would be past the cap).
   */
  signedText(claims: StateClaims, encodeJson: (json: string) => string): string;
  /** Steps 1–2 of `open`: see {@link parseHmacToken}. */
  parse(token: string): HmacTokenParts;
}

/** The format of a codec on `keys` with `options` (validated here, labelled `createHmacCodec`). */
export function hmacFormat(keys: KeyRing, options: HmacCodecOptions | undefined): HmacFormat {
  const { maxTokenBytes } = parseCodecOptions('createHmacCodec', keys, options, HMAC_LIMITS);
  const sealKid = keys.primaryKid;
  const sealPrefix = `${PREFIX}${sealKid}.`;
  return {
    maxTokenBytes,
    sealKid,
    signedText(claims, encodeJson) {
      if (!isStateClaims(claims) || claims.data === undefined) {
        throw new TypeError('HmacCodec.seal: claims must be StateClaims');
      }
      // JSON.stringify throws the TypeError for bigint and cycles.
      const signed = sealPrefix + encodeJson(JSON.stringify(claims));
      if (signed.length + 1 + MAC_CHARS > maxTokenBytes) throw new StateTooLargeError();
      return signed;
    },
    parse: (token) => parseHmacToken(token, maxTokenBytes),
  };
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
  const prefix = readTokenHead(token, HMAC_FORMAT_VERSION, maxTokenBytes, PREFIX_LENGTH + 1 + 1 + 1 + 1 + 1 + MAC_CHARS);
  const n = token.length;
  const { kid, end: bodyStart } = prefix;
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

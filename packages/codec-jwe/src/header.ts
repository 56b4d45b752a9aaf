import { base64urlDecode, base64urlEncode, utf8Encode } from '@mrtr/core/encoding';
import { StateMalformedError } from '@mrtr/core/errors';
import type { JweHeader } from './engine/types.js';

/** The only accepted key management algorithm: the key is the CEK (RFC 7518 §4.5). */
export const JWE_ALG = 'dir';
/** The only accepted content encryption: AES-256-GCM, 96-bit IV, 128-bit tag (RFC 7518 §5.3). */
export const JWE_ENC = 'A256GCM';
/** Longest header segment looked at. `{"alg":"dir","enc":"A256GCM","kid":<32 chars>}` is 86 characters. */
const MAX_HEADER_SEGMENT = 256;

/**
 * The header this codec writes for `kid`: `{"alg":"dir","enc":"A256GCM","kid":"<kid>"}`, members in
 * that order and no white space (the bytes jose writes for the same object).
 */
export function headerFor(kid: string): JweHeader {
  const segment = base64urlEncode(utf8Encode(JSON.stringify({ alg: JWE_ALG, enc: JWE_ENC, kid })));
  return { kid, segment, aad: utf8Encode(segment) };
}

/**
 * Strict check of a protected header segment written by someone else (another member order or
 * white space). Accepted: canonical base64url of a JSON object with exactly the members `alg: "dir"`,
 * `enc: "A256GCM"` and a string `kid`, in any order. Refused (`StateMalformedError`): any other
 * `alg`/`enc`, `zip`, `crit`, `typ`, `cty` or any other member, a duplicate member (JSON.parse would
 * keep the last one silently), non-string values, escapes, non-ASCII bytes and trailing bytes.
 * Whether `kid` is in the ring is the caller's check.
 */
export function parseHeader(segment: string): JweHeader {
  if (segment.length === 0 || segment.length > MAX_HEADER_SEGMENT) throw new StateMalformedError();
  const bytes = base64urlDecode(segment);
  if (bytes === undefined) throw new StateMalformedError();
  const members = parseFlatStringObject(bytes);
  if (members === undefined || members.size !== 3) throw new StateMalformedError();
  if (members.get('alg') !== JWE_ALG || members.get('enc') !== JWE_ENC) throw new StateMalformedError();
  const kid = members.get('kid');
  if (kid === undefined) throw new StateMalformedError();
  return { kid, segment, aad: utf8Encode(segment) };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const isWhiteSpace = (c: number | undefined): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/**
 * Parses a JSON object whose members all have string values made of printable ASCII without escapes
 * (all a valid header can contain). Returns `undefined` for anything else, including a member name
 * that occurs twice.
 */
function parseFlatStringObject(bytes: Uint8Array): Map<string, string> | undefined {
  const n = bytes.length;
  let i = 0;
  const skipWhiteSpace = (): void => {
    while (i < n && isWhiteSpace(bytes[i])) i++;
  };
  const readString = (): string | undefined => {
    if (bytes[i] !== QUOTE) return undefined;
    const start = ++i;
    while (i < n && bytes[i] !== QUOTE) {
      const c = bytes[i]!;
      if (c < 0x20 || c > 0x7e || c === BACKSLASH) return undefined;
      i++;
    }
    if (i >= n) return undefined;
    const text = String.fromCharCode(...bytes.subarray(start, i));
    i++;
    return text;
  };
  const members = new Map<string, string>();
  skipWhiteSpace();
  if (bytes[i] !== 0x7b) return undefined; // {
  i++;
  skipWhiteSpace();
  if (bytes[i] === 0x7d) {
    i++; // }
  } else {
    for (;;) {
      const name = readString();
      if (name === undefined) return undefined;
      skipWhiteSpace();
      if (bytes[i] !== 0x3a) return undefined; // :
      i++;
      skipWhiteSpace();
      const value = readString();
      if (value === undefined || members.has(name)) return undefined;
      members.set(name, value);
      skipWhiteSpace();
      if (bytes[i] === 0x2c) {
        i++; // ,
        skipWhiteSpace();
        continue;
      }
      if (bytes[i] !== 0x7d) return undefined;
      i++; // }
      break;
    }
  }
  skipWhiteSpace();
  return i === n ? members : undefined;
}

import type { CodecFactory, KeyRing } from '@mrtr/core';
import { readTokenPrefix } from '@mrtr/core/codec';
import { base64urlDecode } from '@mrtr/core/encoding';

export const CODECS = ['hmac', 'jwe', 'aead'] as const;
export type CodecName = (typeof CODECS)[number];

/** Loads a codec package only when it is used. */
export async function codecFactory(name: CodecName): Promise<CodecFactory> {
  switch (name) {
    case 'hmac':
      return (await import('@mrtr/codec-hmac')).createHmacCodec;
    case 'jwe':
      return (await import('@mrtr/codec-jwe')).createJweCodec;
    case 'aead':
      return (await import('@mrtr/codec-aead')).createAeadCodec;
  }
}

/** Builds a codec on a ring. */
export async function buildCodec(name: CodecName, keys: KeyRing) {
  return (await codecFactory(name))(keys);
}

/** What can be read from a token without any key. */
export interface Detected {
  codec: CodecName | undefined;
  /** `m1`, `x1`, or `JWE compact (alg dir, enc A256GCM)`. */
  format: string | undefined;
  kid: string | undefined;
  /** HMAC only: the body as parsed JSON, NOT verified. */
  unverifiedClaims?: unknown;
  /** Why the token does not look like a well-formed token of its codec. */
  problem?: string;
}

const decodeJson = (segment: string): unknown => {
  const bytes = base64urlDecode(segment);
  if (bytes === undefined) return undefined;
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    return undefined;
  }
};

/** A JWE kid worth showing: short and printable (a ring's kids are 1-32 characters of [A-Za-z0-9_-]). */
const JWE_KID_PATTERN = /^[A-Za-z0-9._~-]{1,64}$/;
/** A JOSE algorithm name worth showing (`dir`, `A256GCM`, `RSA-OAEP-256`, `PBES2-HS256+A128KW`). */
const ALG_PATTERN = /^[A-Za-z0-9._~+-]{1,64}$/;

/** A protected-header field as shown: itself when it matches `pattern`, else `(none)` or `(malformed)`. */
const headerField = (value: unknown, pattern: RegExp): string =>
  value === undefined ? '(none)' : typeof value === 'string' && pattern.test(value) ? value : '(malformed)';

/** Reads the codec, format version and kid of a token (the kid is authenticated only once opened). */
export function detect(token: string): Detected {
  if (token.startsWith('m1.')) {
    const prefix = readTokenPrefix(token, 'm1');
    if (prefix === undefined) return { codec: 'hmac', format: 'm1', kid: undefined, problem: 'no valid kid after "m1."' };
    const rest = token.slice(prefix.end);
    const dot = rest.lastIndexOf('.');
    if (dot <= 0) return { codec: 'hmac', format: 'm1', kid: prefix.kid, problem: 'missing the body or the MAC segment' };
    const body = decodeJson(rest.slice(0, dot));
    if (body === undefined) return { codec: 'hmac', format: 'm1', kid: prefix.kid, problem: 'the body is not base64url JSON' };
    return { codec: 'hmac', format: 'm1', kid: prefix.kid, unverifiedClaims: body };
  }
  if (token.startsWith('x1.')) {
    const prefix = readTokenPrefix(token, 'x1');
    if (prefix === undefined) return { codec: 'aead', format: 'x1', kid: undefined, problem: 'no valid kid after "x1."' };
    return { codec: 'aead', format: 'x1', kid: prefix.kid };
  }
  const segments = token.split('.');
  if (segments.length === 5) {
    const header = decodeJson(segments[0]!);
    if (header !== null && typeof header === 'object' && !Array.isArray(header)) {
      // The header is not authenticated until the token opens: a field is shown only when it is a short
      // printable token, and a kid that is not one is reported as malformed, never echoed.
      const { alg, enc, kid } = header as Record<string, unknown>;
      const format = `JWE compact (alg ${headerField(alg, ALG_PATTERN)}, enc ${headerField(enc, ALG_PATTERN)})`;
      const validKid = typeof kid === 'string' && JWE_KID_PATTERN.test(kid) ? kid : undefined;
      const problem =
        alg !== 'dir' || enc !== 'A256GCM'
          ? 'only alg "dir" with enc "A256GCM" is accepted'
          : kid === undefined
            ? 'no kid in the protected header'
            : validKid === undefined
              ? `the kid in the protected header is malformed (${typeof kid === 'string' ? `${kid.length} characters, ` : 'not a string, '}not 1-64 characters of [A-Za-z0-9._~-])`
              : undefined;
      return { codec: 'jwe', format, kid: validKid, ...(problem === undefined ? {} : { problem }) };
    }
  }
  return {
    codec: undefined,
    format: undefined,
    kid: undefined,
    problem: 'not a token of any mrtr codec (m1.…, x1.… or a five-part compact JWE)',
  };
}

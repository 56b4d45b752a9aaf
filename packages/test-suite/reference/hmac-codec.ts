import { createHmac, timingSafeEqual } from 'node:crypto';
import type { KeyRing, StateCodec } from '@mrtr/core';
import { type CodecOptions, isStateClaims, type OpenedToken, parseCodecOptions, readTokenPrefix, type StateClaims } from '@mrtr/core/codec';
import { base64urlDecode, base64urlEncode, utf8Decode, utf8Encode } from '@mrtr/core/encoding';
import { KeyUnknownError, StateIntegrityError, StateMalformedError, StateTooLargeError } from '@mrtr/core/errors';

const VERSION = 'h1'; // format version: authenticated, and a new one for any change of the format
const PURPOSE = 'example/codec/hmac/v1'; // HKDF purpose of the MAC key: one subkey per (key, purpose)

/** `h1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256 of "h1.<kid>.<body>")>`: integrity only. */
export function createExampleHmacCodec(keys: KeyRing, options?: CodecOptions): StateCodec {
  const limits = { defaultMaxTokenBytes: 16_384, minMaxTokenBytes: 256, maxMaxTokenBytes: 524_288 };
  const { maxTokenBytes } = parseCodecOptions('createExampleHmacCodec', keys, options, limits);
  const mac = (kid: string, text: string): Uint8Array | undefined => {
    const key = keys.subkeySync(kid, PURPOSE); // undefined for a kid that is not in the ring
    return key && createHmac('sha256', key).update(text, 'latin1').digest();
  };
  const seal = (claims: StateClaims): string => {
    if (!isStateClaims(claims)) throw new TypeError('seal: claims must be StateClaims');
    const signed = `${VERSION}.${keys.primaryKid}.${base64urlEncode(utf8Encode(JSON.stringify(claims)))}`;
    const token = `${signed}.${base64urlEncode(mac(keys.primaryKid, signed)!)}`;
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    return token;
  };
  const unseal = (token: string): OpenedToken => {
    if (typeof token !== 'string') throw new StateMalformedError();
    if (token.length > maxTokenBytes) throw new StateTooLargeError(); // 1. the cap, before reading anything
    const prefix = readTokenPrefix(token, VERSION); // 2. the format: version, kid, two strict segments
    const dot = token.lastIndexOf('.');
    if (prefix === undefined || dot < prefix.end) throw new StateMalformedError();
    const body = base64urlDecode(token.slice(prefix.end, dot)); // canonical only; refuses a third '.'
    const tag = base64urlDecode(token.slice(dot + 1));
    if (body === undefined || tag === undefined) throw new StateMalformedError();
    const expected = mac(prefix.kid, token.slice(0, dot)); // 3. the key, 4. the MAC over version.kid.body
    if (expected === undefined) throw new KeyUnknownError();
    if (tag.length !== expected.length || !timingSafeEqual(tag, expected)) throw new StateIntegrityError();
    let claims: unknown; // 5. only authentic bytes are parsed
    try {
      claims = JSON.parse(utf8Decode(body));
    } catch {
      throw new StateMalformedError(); // no cause: a parser's message can quote the payload
    }
    if (!isStateClaims(claims)) throw new StateMalformedError();
    return { claims, kid: prefix.kid };
  };
  return Object.freeze({ id: 'example-hmac', confidential: false, maxTokenBytes, keys, seal, unseal });
}

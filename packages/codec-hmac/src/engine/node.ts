import { type KeyObject, createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
import type { KeyRing } from '@mrtr/core';
import type { OpenedToken, StateClaims } from '@mrtr/core/codec';
import { KeyUnknownError, StateIntegrityError } from '@mrtr/core/errors';
import * as format from '../format.js';
import type { HmacCodec } from '../types.js';

const bodyText = (bytes: Uint8Array): string =>
  Buffer.isBuffer(bytes) ? bytes.toString('utf8') : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');

/** The Node build: synchronous `node:crypto`, one cached `KeyObject` per key id. */
export function createCodec(keys: KeyRing, options: format.HmacCodecOptions | undefined): HmacCodec {
  const { maxTokenBytes } = format.parseHmacOptions(keys, options);

  // kid → MAC key, derived once. Only kids present in the (immutable) ring are ever inserted.
  const macKeys = new Map<string, KeyObject>();
  const macKeyFor = (kid: string): KeyObject | undefined => {
    let key = macKeys.get(kid);
    if (key === undefined) {
      if (!keys.has(kid)) return undefined;
      const bytes = keys.subkeySync(kid, format.HMAC_KEY_PURPOSE);
      if (bytes === undefined) return undefined;
      key = createSecretKey(bytes);
      macKeys.set(kid, key);
    }
    return key;
  };

  const sealKid = keys.primaryKid;
  const sealKey = macKeyFor(sealKid);
  if (sealKey === undefined) throw new TypeError('createHmacCodec: the primary key is missing from the ring');
  const sealPrefix = format.sealPrefixFor(sealKid);
  const base64urlOfJson = (json: string): string => Buffer.from(json, 'utf8').toString('base64url');

  const sign = (signed: string): string => `${signed}.${createHmac('sha256', sealKey).update(signed, 'latin1').digest('base64url')}`;
  const seal = (claims: StateClaims): string => sign(format.signedText(sealPrefix, claims, base64urlOfJson, maxTokenBytes));
  const sealJson = (json: string): string => sign(format.signedJsonText(sealPrefix, json, base64urlOfJson, maxTokenBytes));

  const unseal = (token: string): OpenedToken => {
    // 1–2. Type, size cap, format, strict base64url.
    const { kid, signedEnd, body, mac } = format.parseHmacToken(token, maxTokenBytes);
    // 3. Key, only once the format is known to be right.
    const key = macKeyFor(kid);
    if (key === undefined) throw new KeyUnknownError();
    // 4. MAC over the ASCII text "m1.<kid>.<body>", compared in constant time, before any parsing.
    const expected = createHmac('sha256', key).update(token.slice(0, signedEnd), 'latin1').digest();
    if (!timingSafeEqual(expected, mac)) throw new StateIntegrityError();
    // 5. Only authentic bytes are parsed.
    return { claims: format.parseClaimsJson(bodyText(body)), kid };
  };

  return Object.freeze({ id: 'hmac' as const, confidential: false as const, maxTokenBytes, keys, seal, sealJson, unseal });
}

/** What `createHmacCodec` returns on this build. */
export type BuildCodec = HmacCodec;

import type { KeyRing } from '@mrtr/core';
import type { OpenedToken, StateClaims } from '@mrtr/core/codec';
import { base64urlEncode, utf8Encode } from '@mrtr/core/encoding';
import { KeyUnknownError, StateIntegrityError } from '@mrtr/core/errors';
import * as format from '../format.js';
import type { HmacCodec } from '../types.js';

/** The slice of WebCrypto this build uses. */
interface HmacSubtle {
  importKey(
    format: 'raw',
    key: Uint8Array,
    algorithm: { name: 'HMAC'; hash: 'SHA-256' },
    extractable: false,
    usages: string[],
  ): Promise<unknown>;
  sign(algorithm: 'HMAC', key: unknown, data: Uint8Array): Promise<ArrayBuffer>;
  verify(algorithm: 'HMAC', key: unknown, signature: Uint8Array, data: Uint8Array): Promise<boolean>;
}

function subtle(): HmacSubtle {
  const c = (globalThis as { crypto?: { subtle?: HmacSubtle } }).crypto;
  if (!c?.subtle) throw new TypeError('@mrtr/codec-hmac: this runtime has no WebCrypto (globalThis.crypto.subtle)');
  return c.subtle;
}

// Lenient like Buffer#toString('utf8') on the Node build (the bytes are authentic by then), BOM kept.
const utf8Text = new TextDecoder('utf-8', { ignoreBOM: true });

/**
 * The build for every runtime but Node (browsers, workerd, Deno/Bun when bundled for the web): the key
 * is derived with `KeyRing.subkey` (async WebCrypto HKDF through core's crypto provider) and imported
 * once per key id as a non-extractable HMAC `CryptoKey`; the MAC is checked with `crypto.subtle.verify`
 * (constant-time in every WebCrypto implementation). `seal` and `unseal` return promises, and every
 * failure is a rejection, never a synchronous throw.
 */
export function createCodec(keys: KeyRing, options: format.HmacCodecOptions | undefined): HmacCodec {
  const { maxTokenBytes } = format.parseHmacOptions(keys, options);

  // kid → MAC key (a promise while being derived). Only kids present in the (immutable) ring are inserted;
  // a failed derivation is forgotten so that the next call tries again.
  const macKeys = new Map<string, Promise<unknown>>();
  const macKeyFor = (kid: string): Promise<unknown> | undefined => {
    let key = macKeys.get(kid);
    if (key === undefined) {
      if (!keys.has(kid)) return undefined;
      const bytes = keys.subkey(kid, format.HMAC_KEY_PURPOSE);
      if (bytes === undefined) return undefined;
      key = Promise.resolve(bytes).then((raw) =>
        subtle().importKey('raw', raw, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']),
      );
      const pending = key;
      pending.catch(() => {
        if (macKeys.get(kid) === pending) macKeys.delete(kid);
      });
      macKeys.set(kid, key);
    }
    return key;
  };

  const sealKid = keys.primaryKid;
  if (!keys.has(sealKid)) throw new TypeError('createHmacCodec: the primary key is missing from the ring');
  const sealPrefix = format.sealPrefixFor(sealKid);
  // TextEncoder writes U+FFFD for a lone surrogate, as Buffer does on the Node build.
  const base64urlOfJson = (json: string): string => base64urlEncode(utf8Encode(json));

  const sign = async (signed: string): Promise<string> => {
    const key = await macKeyFor(sealKid);
    // The signed text is ASCII (prefix alphabet + base64url), so its UTF-8 bytes are its latin1 bytes.
    const mac = new Uint8Array(await subtle().sign('HMAC', key, utf8Encode(signed)));
    return `${signed}.${base64urlEncode(mac)}`;
  };
  const seal = async (claims: StateClaims): Promise<string> => sign(format.signedText(sealPrefix, claims, base64urlOfJson, maxTokenBytes));
  const sealJson = async (json: string): Promise<string> => sign(format.signedJsonText(sealPrefix, json, base64urlOfJson, maxTokenBytes));

  const unseal = async (token: string): Promise<OpenedToken> => {
    // 1–2. Type, size cap, format, strict base64url — before anything else, and before any await.
    const { kid, signedEnd, body, mac } = format.parseHmacToken(token, maxTokenBytes);
    // 3. Key, only once the format is known to be right.
    const pending = macKeyFor(kid);
    if (pending === undefined) throw new KeyUnknownError();
    const key = await pending;
    // 4. MAC over the ASCII text "m1.<kid>.<body>", verified by WebCrypto (constant time), before any parsing.
    if (!(await subtle().verify('HMAC', key, mac, utf8Encode(token.slice(0, signedEnd))))) throw new StateIntegrityError();
    // 5. Only authentic bytes are parsed.
    return { claims: format.parseClaimsJson(utf8Text.decode(body)), kid };
  };

  return Object.freeze({ id: 'hmac' as const, confidential: false as const, maxTokenBytes, keys, seal, sealJson, unseal });
}

/** What `createHmacCodec` returns on this build. */
export type BuildCodec = HmacCodec;

import type { KeyRing, OpenedToken, StateClaims } from '@mrtr/core';
import { KeyUnknownError, StateIntegrityError, base64urlEncode, randomBytes, utf8Encode } from '@mrtr/core/authoring';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { webSlicer } from '../decode.js';
import { AEAD_KEY_PURPOSE, type AeadCodecOptions, type KidKeys, NONCE_BYTES, adTextFor, aeadFormat } from '../format.js';
import { packJson } from '../pack.js';
import type { AeadCodec } from '../types.js';

/**
 * The build for every runtime but Node: the subkey comes from `KeyRing.subkey` (async WebCrypto HKDF
 * through core's crypto provider), the plaintext from a small MessagePack packer byte-identical to
 * msgpackr's for the JSON subset (src/pack.ts), no Buffer. XChaCha20-Poly1305 is @noble/ciphers, as on
 * Node. `seal` and `unseal` return promises; every failure is a rejection, never a synchronous throw.
 */
export function createCodec(keys: KeyRing, options: AeadCodecOptions | undefined): AeadCodec {
  const format = aeadFormat(keys, options, packJson, webSlicer);
  const { maxTokenBytes, sealKid, sealPrefix } = format;

  // kid → key material (a promise while derived). Only kids present in the (immutable) ring are
  // inserted; a failed derivation is forgotten so that the next call tries again.
  const cache = new Map<string, Promise<KidKeys>>();
  const keysFor = (kid: string): Promise<KidKeys> | undefined => {
    let entry = cache.get(kid);
    if (entry === undefined) {
      if (!keys.has(kid)) return undefined;
      const key = keys.subkey(kid, AEAD_KEY_PURPOSE);
      if (key === undefined) return undefined;
      entry = Promise.resolve(key).then((bytes) => ({ key: bytes, ad: utf8Encode(adTextFor(kid)) }));
      const pending = entry;
      pending.catch(() => {
        if (cache.get(kid) === pending) cache.delete(kid);
      });
      cache.set(kid, entry);
    }
    return entry;
  };
  if (!keys.has(sealKid)) throw new TypeError('createAeadCodec: the primary key is missing from the ring');

  const seal = async (claims: StateClaims): Promise<string> => {
    const { plaintext, sealedLength } = format.plaintext(claims);
    const entry = await keysFor(sealKid)!;
    const sealed = new Uint8Array(sealedLength);
    sealed.set(randomBytes(NONCE_BYTES), 0);
    xchacha20poly1305(entry.key, sealed.subarray(0, NONCE_BYTES), entry.ad).encrypt(plaintext, sealed.subarray(NONCE_BYTES));
    plaintext.fill(0);
    return sealPrefix + base64urlEncode(sealed);
  };

  const unseal = async (token: string): Promise<OpenedToken> => {
    // 1–2. Type, size cap, format, strict base64url — before anything else, and before any await.
    const { kid, sealed } = format.parse(token);
    // 3. Key, only once the format is known to be right.
    const pending = keysFor(kid);
    if (pending === undefined) throw new KeyUnknownError();
    const entry = await pending;
    // 4. Decrypt and verify (version and kid are the associated data). Nothing is unpacked before this.
    let plaintext: Uint8Array;
    try {
      plaintext = xchacha20poly1305(entry.key, sealed.subarray(0, NONCE_BYTES), entry.ad).decrypt(sealed.subarray(NONCE_BYTES));
    } catch {
      throw new StateIntegrityError();
    }
    // 5. Bounded unpacking of authentic bytes, then the shape.
    return { claims: format.claims(plaintext), kid };
  };

  return Object.freeze({ id: 'aead' as const, confidential: true as const, maxTokenBytes, keys, seal, unseal });
}

/** What `createAeadCodec` returns on this build. */
export type BuildCodec = AeadCodec;

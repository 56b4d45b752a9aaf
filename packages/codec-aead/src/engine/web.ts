import type { KeyRing } from '@mrtr/core';
import type { OpenedToken, StateClaims } from '@mrtr/core/codec';
import { base64urlEncode, randomBytes, utf8Encode } from '@mrtr/core/encoding';
import { KeyUnknownError, StateIntegrityError } from '@mrtr/core/errors';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { webSlicer } from '../decode.js';
import * as format from '../format.js';
import { packJson } from '../pack.js';
import type { AeadCodec } from '../types.js';

/**
 * The build for every runtime but Node: the subkey comes from `KeyRing.subkey` (async WebCrypto HKDF
 * through core's crypto provider), the plaintext from a small MessagePack packer byte-identical to
 * msgpackr's for the JSON subset (src/pack.ts), no Buffer. XChaCha20-Poly1305 is @noble/ciphers, as on
 * Node. `seal` and `unseal` return promises; every failure is a rejection, never a synchronous throw.
 */
export function createCodec(keys: KeyRing, options: format.AeadCodecOptions | undefined): AeadCodec {
  const { maxTokenBytes } = format.parseAeadOptions(keys, options);

  // kid → key material (a promise while derived). Only kids present in the (immutable) ring are
  // inserted; a failed derivation is forgotten so that the next call tries again.
  const cache = new Map<string, Promise<format.KidKeys>>();
  const keysFor = (kid: string): Promise<format.KidKeys> | undefined => {
    let entry = cache.get(kid);
    if (entry === undefined) {
      if (!keys.has(kid)) return undefined;
      const key = keys.subkey(kid, format.AEAD_KEY_PURPOSE);
      if (key === undefined) return undefined;
      entry = Promise.resolve(key).then((bytes) => ({ key: bytes, ad: utf8Encode(format.adTextFor(kid)) }));
      const pending = entry;
      pending.catch(() => {
        if (cache.get(kid) === pending) cache.delete(kid);
      });
      cache.set(kid, entry);
    }
    return entry;
  };
  const sealKid = keys.primaryKid;
  if (!keys.has(sealKid)) throw new TypeError('createAeadCodec: the primary key is missing from the ring');
  const sealPrefix = format.prefixFor(sealKid);
  const maxSealedBytes = format.maxSealedBytesFor(maxTokenBytes, sealPrefix);

  const seal = async (claims: StateClaims): Promise<string> => {
    const plaintext = packJson(format.packableClaims(claims));
    const sealedLength = format.NONCE_BYTES + plaintext.length + format.TAG_BYTES;
    format.checkSealedLength(sealedLength, maxSealedBytes);
    const entry = await keysFor(sealKid)!;
    const sealed = new Uint8Array(sealedLength);
    sealed.set(randomBytes(format.NONCE_BYTES), 0);
    xchacha20poly1305(entry.key, sealed.subarray(0, format.NONCE_BYTES), entry.ad).encrypt(plaintext, sealed.subarray(format.NONCE_BYTES));
    plaintext.fill(0);
    return sealPrefix + base64urlEncode(sealed);
  };

  const unseal = async (token: string): Promise<OpenedToken> => {
    // 1–2. Type, size cap, format, strict base64url — before anything else, and before any await.
    const { kid, sealed } = format.parseAeadToken(token, maxTokenBytes);
    // 3. Key, only once the format is known to be right.
    const pending = keysFor(kid);
    if (pending === undefined) throw new KeyUnknownError();
    const entry = await pending;
    // 4. Decrypt and verify (version and kid are the associated data). Nothing is unpacked before this.
    let plaintext: Uint8Array;
    try {
      plaintext = xchacha20poly1305(entry.key, sealed.subarray(0, format.NONCE_BYTES), entry.ad).decrypt(
        sealed.subarray(format.NONCE_BYTES),
      );
    } catch {
      throw new StateIntegrityError();
    }
    // 5. Bounded unpacking of authentic bytes, then the shape.
    return { claims: format.claimsFromPlaintext(plaintext, webSlicer), kid };
  };

  return Object.freeze({ id: 'aead' as const, confidential: true as const, maxTokenBytes, keys, seal, unseal });
}

/** What `createAeadCodec` returns on this build. */
export type BuildCodec = AeadCodec;

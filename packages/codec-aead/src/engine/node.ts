import type { KeyRing } from '@mrtr/core';
import type { OpenedToken, StateClaims } from '@mrtr/core/codec';
import { randomBytes } from '@mrtr/core/encoding';
import { KeyUnknownError, StateIntegrityError } from '@mrtr/core/errors';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
// The `pack` subpath: on Node its ESM file is msgpackr's portable entry, which (unlike the main entry)
// reads no environment variable and loads no native unpacking add-on — the codec only packs, and
// Deno runs it without `--allow-env`.
import { Packr } from 'msgpackr/pack';
import * as format from '../format.js';
import type { AeadCodec } from '../types.js';

/** The Node build: synchronous, msgpackr's packer, Buffers. */
export function createCodec(keys: KeyRing, options: format.AeadCodecOptions | undefined): AeadCodec {
  const { maxTokenBytes } = format.parseAeadOptions(keys, options);

  // kid → key material, derived once. Only kids present in the (immutable) ring are ever inserted.
  const cache = new Map<string, format.KidKeys>();
  const keysFor = (kid: string): format.KidKeys | undefined => {
    let entry = cache.get(kid);
    if (entry === undefined) {
      if (!keys.has(kid)) return undefined;
      const key = keys.subkeySync(kid, format.AEAD_KEY_PURPOSE);
      if (key === undefined) return undefined;
      entry = { key, ad: Buffer.from(format.adTextFor(kid), 'latin1') };
      cache.set(kid, entry);
    }
    return entry;
  };
  const sealKid = keys.primaryKid;
  const sealKeys = keysFor(sealKid);
  if (sealKeys === undefined) throw new TypeError('createAeadCodec: the primary key is missing from the ring');
  const sealPrefix = format.prefixFor(sealKid);
  const maxSealedBytes = format.maxSealedBytesFor(maxTokenBytes, sealPrefix);

  const packr = new Packr({
    useRecords: false,
    variableMapSize: true,
    moreTypes: false,
    structuredClone: false,
    bundleStrings: false,
    useToJSON: false,
    encodeUndefinedAsNil: false,
  });
  // Reused output buffer for seal (everything is synchronous, so no call can interleave).
  let sealBuffer = Buffer.allocUnsafe(4096);

  const seal = (claims: StateClaims): string => {
    const plaintext = packr.pack(format.packableClaims(claims));
    const sealedLength = format.NONCE_BYTES + plaintext.length + format.TAG_BYTES;
    format.checkSealedLength(sealedLength, maxSealedBytes);
    if (sealBuffer.length < sealedLength) sealBuffer = Buffer.allocUnsafe(Math.max(sealedLength, sealBuffer.length * 2));
    const nonce = randomBytes(format.NONCE_BYTES);
    sealBuffer.set(nonce, 0);
    xchacha20poly1305(sealKeys.key, nonce, sealKeys.ad).encrypt(plaintext, sealBuffer.subarray(format.NONCE_BYTES, sealedLength));
    return sealPrefix + sealBuffer.toString('base64url', 0, sealedLength);
  };

  const unseal = (token: string): OpenedToken => {
    // 1–2. Type, size cap, format, strict base64url.
    const { kid, sealed } = format.parseAeadToken(token, maxTokenBytes);
    // 3. Key, only once the format is known to be right.
    const entry = keysFor(kid);
    if (entry === undefined) throw new KeyUnknownError();
    // 4. Decrypt and verify (version and kid are the associated data). Nothing is unpacked before this.
    let plaintext: Uint8Array;
    try {
      // Into a Buffer, which the decoder slices strings from natively.
      plaintext = xchacha20poly1305(entry.key, sealed.subarray(0, format.NONCE_BYTES), entry.ad).decrypt(
        sealed.subarray(format.NONCE_BYTES),
        Buffer.allocUnsafe(sealed.length - format.NONCE_BYTES - format.TAG_BYTES),
      );
    } catch {
      throw new StateIntegrityError();
    }
    // 5. Bounded unpacking of authentic bytes, then the shape.
    return { claims: format.claimsFromPlaintext(plaintext), kid };
  };

  return Object.freeze({ id: 'aead' as const, confidential: true as const, maxTokenBytes, keys, seal, unseal });
}

/** What `createAeadCodec` returns on this build. */
export type BuildCodec = AeadCodec;

import { type KeyRing, MrtrError, type MrtrErrorCode } from '@mrtr/core';
import { randomBytes } from '@mrtr/core/encoding';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { AEAD_KEY_PURPOSE } from '../src/index.js';

export function codeOf(fn: () => unknown): MrtrErrorCode | 'accepted' | 'non-mrtr' {
  try {
    fn();
    return 'accepted';
  } catch (error) {
    return MrtrError.is(error) ? error.code : 'non-mrtr';
  }
}

/**
 * Seals arbitrary plaintext bytes exactly as the codec would (same subkey, nonce size and associated
 * data), so tests can hand the decoder authentic but hostile MessagePack.
 */
export function sealRaw(keys: KeyRing, kid: string, plaintext: Uint8Array, options: { version?: string; ad?: string } = {}): string {
  const version = options.version ?? 'x1';
  const key = keys.subkeySync(kid, AEAD_KEY_PURPOSE)!;
  const nonce = randomBytes(24);
  const ad = Buffer.from(options.ad ?? `${version}.${kid}`, 'latin1');
  const sealed = xchacha20poly1305(key, nonce, ad).encrypt(plaintext);
  return `${version}.${kid}.${Buffer.concat([nonce, sealed]).toString('base64url')}`;
}

/** Opens a token by hand (the documented wire format), returning the plaintext bytes. */
export function openRaw(keys: KeyRing, token: string): Uint8Array {
  const [version, kid, body] = token.split('.') as [string, string, string];
  const bytes = Buffer.from(body, 'base64url');
  const key = keys.subkeySync(kid, AEAD_KEY_PURPOSE)!;
  return xchacha20poly1305(key, bytes.subarray(0, 24), Buffer.from(`${version}.${kid}`, 'latin1')).decrypt(bytes.subarray(24));
}

/** Small deterministic PRNG (mulberry32) so fuzz loops are reproducible. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** MessagePack bytes from parts: numbers are single bytes, strings are fixstr/str8, arrays are spliced in. */
export function mp(...parts: (number | string | Uint8Array | number[])[]): Uint8Array {
  const out: number[] = [];
  for (const part of parts) {
    if (typeof part === 'number') out.push(part);
    else if (typeof part === 'string') {
      const bytes = Buffer.from(part, 'utf8');
      if (bytes.length < 32) out.push(0xa0 | bytes.length);
      else out.push(0xd9, bytes.length);
      for (const b of bytes) out.push(b);
    } else for (const b of part) out.push(b);
  }
  return Uint8Array.from(out);
}

const MARKER = '@@data-goes-here@@';

/**
 * MessagePack of `claims` with the `data` value replaced by `dataBytes` verbatim, so the envelope is
 * valid claims and only `data` is hostile.
 */
export function claimsWithData(claims: object, dataBytes: Uint8Array, pack: (value: unknown) => Uint8Array): Uint8Array {
  const packed = Buffer.from(pack({ ...claims, data: MARKER }));
  const needle = Buffer.from(mp(MARKER));
  const at = packed.indexOf(needle);
  if (at < 0 || packed.indexOf(needle, at + 1) >= 0) throw new Error('marker not found exactly once');
  return Buffer.concat([packed.subarray(0, at), dataBytes, packed.subarray(at + needle.length)]);
}

/** A seeded generator of random JSON values (already in their JSON form: `JSON.parse(JSON.stringify(v))`). */
export function randomJson(seed: number): () => unknown {
  const random = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const value = (depth: number): unknown => {
    const r = random();
    if (depth > 3 || r < 0.4) {
      return pick([
        null,
        true,
        false,
        Math.floor(random() * 2 ** 33) - 2 ** 32,
        random() * 1e6 - 5e5,
        Math.floor(random() * 300) - 150,
        'x'.repeat(Math.floor(random() * 80)),
        String.fromCodePoint(...Array.from({ length: 1 + Math.floor(random() * 20) }, () => Math.floor(random() * 0xd000))),
        '😀é\u0000\u2028\ufeff',
      ]);
    }
    if (r < 0.7) return Array.from({ length: Math.floor(random() * 8) }, () => value(depth + 1));
    return Object.fromEntries(
      Array.from({ length: Math.floor(random() * 8) }, (_, i) => [
        pick(['a', 'b', '__proto__', 'constructor', `k${i}`, 'é', 'toJSON', 'hasOwnProperty']),
        value(depth + 1),
      ]),
    );
  };
  return () => JSON.parse(JSON.stringify(value(0)));
}

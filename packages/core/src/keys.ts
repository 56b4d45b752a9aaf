import { cryptoProvider } from '#crypto';
import { type Awaitable, isPromiseLike } from './crypto/awaitable.js';
import { utf8Encode } from './json.js';

/** Smallest accepted secret: 32 bytes (256 bits). */
export const MIN_KEY_BYTES = 32;
const KID_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;
const RING_BRAND: unique symbol = Symbol.for('@mrtr/core/KeyRing') as never;
const HKDF_SALT = utf8Encode('mrtr/key-ring/v1');

export interface KeyInput {
  /** Key id, 1–32 characters of `[A-Za-z0-9_-]`. Travels in every token so the right key opens it. */
  kid: string;
  /** The secret: ≥ 32 bytes, or its base64url (or standard base64) text. */
  secret: Uint8Array | string;
}

/**
 * Keys with ids. The first key is the primary: it seals. Every key opens (rotation: add the new key
 * first, keep the old one until its tokens have expired, then remove it). A secret never serves two
 * constructions: each purpose gets its own HKDF-SHA256 subkey (`subkey(kid, purpose)`).
 */
export class KeyRing {
  /**
   * `instanceof` by brand, so a ring from another copy of this package (its ESM or CJS build, or a
   * duplicate install) is still recognised.
   */
  static [Symbol.hasInstance](value: unknown): boolean {
    return value !== null && typeof value === 'object' && (value as { [RING_BRAND]?: unknown })[RING_BRAND] === true;
  }
  readonly #secrets: ReadonlyMap<string, Uint8Array>;
  readonly #subkeys = new Map<string, Awaitable<Uint8Array>>();
  /** Key ids, primary first. */
  readonly kids: readonly string[];
  /** The id of the key that seals. */
  readonly primaryKid: string;

  constructor(keys: Iterable<KeyInput>) {
    if (keys === null || typeof keys !== 'object' || !(Symbol.iterator in keys)) {
      throw new TypeError('KeyRing: keys must be an iterable of { kid, secret }');
    }
    const secrets = new Map<string, Uint8Array>();
    for (const key of keys) {
      if (key === null || typeof key !== 'object') throw new TypeError('KeyRing: each key must be { kid, secret }');
      const { kid, secret } = key;
      if (typeof kid !== 'string' || !KID_PATTERN.test(kid)) {
        throw new TypeError('KeyRing: kid must be 1-32 characters of [A-Za-z0-9_-]');
      }
      if (secrets.has(kid)) throw new TypeError(`KeyRing: duplicate kid "${kid}"`);
      const bytes = toSecretBytes(secret, kid);
      secrets.set(kid, bytes);
    }
    if (secrets.size === 0) {
      throw new RangeError('KeyRing: at least one key is required: set MRTR_KEYS (make one with `npx @mrtr/cli keygen`)');
    }
    this.#secrets = secrets;
    this.kids = Object.freeze([...secrets.keys()]);
    this.primaryKid = this.kids[0]!;
  }

  /**
   * Parses `"k2:<secret>,k1:<secret>"` (first = primary), the `MRTR_KEYS` format. A secret is base64url
   * or standard base64 of ≥ 32 bytes (`openssl rand -base64 32` works).
   */
  static parse(text: string): KeyRing {
    if (typeof text !== 'string') throw new TypeError('KeyRing.parse: expected a string');
    const entries = text
      .split(',')
      .map((part) => part.trim())
      .filter((part) => part.length > 0)
      .map((part) => {
        const colon = part.indexOf(':');
        if (colon <= 0) throw new TypeError('KeyRing.parse: each entry must be "kid:<base64url secret>"');
        return { kid: part.slice(0, colon), secret: part.slice(colon + 1) };
      });
    return new KeyRing(entries);
  }

  /** A ring with one freshly generated key (for tests and single-process demos). */
  static generate(kid = 'k1'): KeyRing {
    return new KeyRing([{ kid, secret: generateKey() }]);
  }

  /** True when `kid` is in the ring. */
  has(kid: string): boolean {
    return this.#secrets.has(kid);
  }

  /** A new ring without `kid` (rotation's last step). */
  without(kid: string): KeyRing {
    return new KeyRing([...this.#secrets].filter(([k]) => k !== kid).map(([k, secret]) => ({ kid: k, secret })));
  }

  /** A new ring with `key` as the new primary, the current keys kept for opening. */
  withPrimary(key: KeyInput): KeyRing {
    return new KeyRing([key, ...[...this.#secrets].map(([kid, secret]) => ({ kid, secret }))]);
  }

  /**
   * HKDF-SHA256(secret, salt "mrtr/key-ring/v1", info `purpose`) — one subkey per (key, purpose),
   * derived once and cached. Returns `undefined` for an unknown kid. Async only on WebCrypto runtimes.
   */
  subkey(kid: string, purpose: string, length = 32): Awaitable<Uint8Array> | undefined {
    const secret = this.#secrets.get(kid);
    if (secret === undefined) return undefined;
    if (typeof purpose !== 'string' || purpose.length === 0) throw new TypeError('KeyRing.subkey: purpose must be a non-empty string');
    if (!Number.isInteger(length) || length < 16 || length > 64) throw new RangeError('KeyRing.subkey: length must be 16-64');
    const cacheKey = `${kid}\u0000${purpose}\u0000${length}`;
    let derived = this.#subkeys.get(cacheKey);
    if (derived === undefined) {
      derived = cryptoProvider.hkdfSha256(secret, HKDF_SALT, utf8Encode(purpose), length);
      if (isPromiseLike(derived)) {
        // Cache the bytes once derived; forget a failed derivation so the next call tries again.
        derived.then(
          (bytes) => this.#subkeys.set(cacheKey, bytes),
          () => this.#subkeys.delete(cacheKey),
        );
      }
      this.#subkeys.set(cacheKey, derived);
    }
    return derived;
  }

  /**
   * Synchronous `subkey` for codecs built on `node:crypto`. Throws a `TypeError` on runtimes whose
   * crypto is async (use `subkey` there).
   */
  subkeySync(kid: string, purpose: string, length = 32): Uint8Array | undefined {
    const derived = this.subkey(kid, purpose, length);
    if (isPromiseLike(derived)) throw new TypeError('KeyRing.subkeySync: this runtime only has async crypto; use subkey()');
    return derived;
  }
}

Object.defineProperty(KeyRing.prototype, RING_BRAND, { value: true });

/** Standard padded base64 (what `openssl rand -base64 32` prints), checked strictly. */
const STANDARD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Secret text: unpadded base64url, or standard base64 (`+`, `/`, `=` padding); `undefined` otherwise. */
function decodeSecretText(text: string): Uint8Array | undefined {
  if (/[+/=]/.test(text)) {
    if (!STANDARD_BASE64.test(text)) return undefined;
    text = text.replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_');
  }
  return cryptoProvider.base64urlDecode(text);
}

function toSecretBytes(secret: Uint8Array | string, kid: string): Uint8Array {
  let bytes: Uint8Array | undefined;
  if (typeof secret === 'string') {
    bytes = decodeSecretText(secret.trim());
    if (bytes === undefined) throw new TypeError(`KeyRing: secret of "${kid}" is not valid base64url or base64`);
  } else if (secret instanceof Uint8Array) {
    bytes = new Uint8Array(secret);
  } else {
    throw new TypeError(`KeyRing: secret of "${kid}" must be a Uint8Array or a base64url string`);
  }
  if (bytes.length < MIN_KEY_BYTES) {
    throw new RangeError(`KeyRing: secret of "${kid}" must be at least ${MIN_KEY_BYTES} bytes`);
  }
  return bytes;
}

/** A fresh 32-byte secret as base64url text (for `MRTR_KEYS`). */
export function generateKey(): string {
  return cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(32));
}

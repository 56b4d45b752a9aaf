import { cryptoProvider } from '#crypto';
import { type Awaitable, isPromiseLike } from '../crypto/awaitable.js';
import { KeyConflictError, KeysUnavailableError } from '../errors.js';
import { utf8Encode } from '../util/json.js';

/** Smallest accepted secret: 32 bytes (256 bits). */
export const MIN_KEY_BYTES = 32;
/** Most keys one ring (or one key set a source returns) holds. */
export const MAX_RING_KEYS = 64;
const KID_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;
const RING_BRAND: unique symbol = Symbol.for('@mrtr/core/KeyRing') as never;
const HKDF_SALT = utf8Encode('mrtr/key-ring/v1');
/** Key ids (with their secrets) a refreshing ring remembers after they leave it, so that none comes back with another secret. */
const REMEMBERED_KIDS = 1024;

export interface KeyInput {
  /** Key id, 1–32 characters of `[A-Za-z0-9_-]`. Travels in every token so the right key opens it. */
  kid: string;
  /** The secret: ≥ 32 bytes, or its base64url (or standard base64) text. */
  secret: Uint8Array | string;
}

/**
 * A key with its schedule, as a refreshing ring ({@link KeyProvider}) reads it from its source. Times are ms since
 * the epoch. Before `notBefore` the key only opens (it is published ahead, so that every replica can open what it
 * will seal); from `notBefore` it seals, while no key with a later `notBefore` has started; from `notAfter` it is
 * gone (it neither seals nor opens).
 */
export interface ScheduledKey extends KeyInput {
  /** When the key starts sealing; absent: it may seal at once. */
  notBefore?: number | undefined;
  /** When the key stops opening (and sealing); absent: never. */
  notAfter?: number | undefined;
}

/** A scheduled key checked: its secret decoded, its times set (±∞ for absent). */
interface KeyEntry {
  readonly kid: string;
  readonly bytes: Uint8Array;
  readonly notBefore: number;
  readonly notAfter: number;
}

/** The state of a refreshing ring: its key set and the fixed ring in force between two schedule boundaries. */
interface LiveState {
  readonly now: () => number;
  entries: readonly KeyEntry[];
  /** Every kid this ring has held, with its secret (a kid never changes secret). */
  readonly known: Map<string, Uint8Array>;
  /** The fixed ring in force on [from, until), or undefined before the first computation. */
  view: KeyRing | undefined;
  from: number;
  until: number;
}

type SubkeyCache = Map<string, Awaitable<Uint8Array>>;

/** Internal hooks of the ring, for {@link KeyProvider} (same package, not exported from the entry points). */
export const ringInternals: {
  live(now: () => number, keys: readonly ScheduledKey[]): KeyRing;
  replace(ring: KeyRing, keys: readonly ScheduledKey[]): boolean;
} = {} as never;

/**
 * Keys with ids. The first key is the primary: it seals. Every key opens (rotation: add the new key
 * first, keep the old one until its tokens have expired, then remove it). A secret never serves two
 * constructions: each purpose gets its own HKDF-SHA256 subkey (`subkey(kid, purpose)`).
 *
 * A ring is fixed (`new KeyRing`, `KeyRing.parse`) or refreshing (`KeyProvider`'s `keys`): a refreshing ring's keys
 * change when its source does and when a key's schedule says so; {@link KeyRing.current} is the fixed ring in force
 * now, which is what codecs are built on (the state guard rebuilds its codec when it changes).
 */
export class KeyRing {
  /**
   * `instanceof` by brand, so a ring from another copy of this package (its ESM or CJS build, or a
   * duplicate install) is still recognised.
   */
  static [Symbol.hasInstance](value: unknown): boolean {
    return value !== null && typeof value === 'object' && (value as { [RING_BRAND]?: unknown })[RING_BRAND] === true;
  }
  /** The subkey cache the next constructed ring shares (a refreshing ring's views share one). */
  static #sharedCache: SubkeyCache | undefined;
  readonly #secrets: ReadonlyMap<string, Uint8Array>;
  readonly #subkeys: SubkeyCache;
  readonly #kids: readonly string[];
  #live: LiveState | undefined;
  #ephemeral = false;
  /** Key ids, primary first (of the ring in force now, for a refreshing ring). */
  readonly kids: readonly string[];
  /** The id of the key that seals (now, for a refreshing ring: `ERR_KEYS_UNAVAILABLE` when no key may seal). */
  readonly primaryKid: string;

  constructor(keys: Iterable<KeyInput>) {
    const cache = KeyRing.#sharedCache;
    KeyRing.#sharedCache = undefined;
    const entries = checkKeys(keys, 'KeyRing');
    if (entries.length === 0) {
      throw new RangeError('KeyRing: at least one key is required: set MRTR_KEYS (make one with `npx @mrtr/cli keygen`)');
    }
    this.#secrets = new Map(entries.map((e) => [e.kid, e.bytes]));
    this.#subkeys = cache ?? new Map();
    this.#kids = Object.freeze(entries.map((e) => e.kid));
    // Plain properties on a fixed ring (an object whose prototype is a ring reads them too); a refreshing ring
    // replaces them with getters on the ring in force.
    this.kids = this.#kids;
    this.primaryKid = this.#kids[0]!;
  }

  /** The state of a refreshing ring; undefined for a fixed ring, or an object that only inherits from a ring. */
  static #liveOf(ring: KeyRing): LiveState | undefined {
    return #live in ring ? ring.#live : undefined;
  }

  /** True for a refreshing ring (made by a `KeyProvider`). */
  get refreshing(): boolean {
    return KeyRing.#liveOf(this) !== undefined;
  }

  /**
   * True for a ring made of a key generated in this process (`KeyRing.generate`): no other process has it, so the
   * guard refuses it with a store shared across processes unless told otherwise (`allowEphemeralKeys`).
   */
  get ephemeral(): boolean {
    return #ephemeral in this && this.#ephemeral;
  }

  /**
   * The fixed ring in force now: the ring itself when fixed; for a refreshing ring, the keys that open now with
   * the one that seals now first. The same object until the key set or the schedule changes it (cheap to call
   * per operation). Throws `ERR_KEYS_UNAVAILABLE` when no key may seal now (every key is scheduled later or gone).
   */
  current(): KeyRing {
    const live = KeyRing.#liveOf(this);
    if (live === undefined) return this;
    const t = live.now();
    if (live.view !== undefined && t >= live.from && t < live.until) return live.view;
    return this.#recompute(live, t);
  }

  #recompute(live: LiveState, t: number): KeyRing {
    let from = Number.NEGATIVE_INFINITY;
    let until = Number.POSITIVE_INFINITY;
    let sealer: KeyEntry | undefined;
    const opening: KeyEntry[] = [];
    for (const e of live.entries) {
      for (const edge of [e.notBefore, e.notAfter]) {
        if (edge <= t) from = Math.max(from, edge);
        else until = Math.min(until, edge);
      }
      if (t >= e.notAfter) continue;
      opening.push(e);
      // The key that started sealing last seals; on a tie, the first listed (MRTR_KEYS: the first key seals).
      if (e.notBefore <= t && (sealer === undefined || e.notBefore > sealer.notBefore)) sealer = e;
    }
    if (sealer === undefined) {
      live.view = undefined;
      throw new KeysUnavailableError();
    }
    const ordered = [sealer, ...opening.filter((e) => e !== sealer)];
    const previous = live.view;
    // A kid never changes secret in a refreshing ring: the same kids in the same order are the same ring.
    const same = previous !== undefined && previous.#kids.length === ordered.length && ordered.every((e, i) => previous.#kids[i] === e.kid);
    if (!same) {
      KeyRing.#sharedCache = this.#subkeys;
      live.view = new KeyRing(ordered.map((e) => ({ kid: e.kid, secret: e.bytes })));
    }
    live.from = from;
    live.until = until;
    return live.view!;
  }

  /**
   * Parses `"k2:<secret>,k1:<secret>"` (first = primary), the `MRTR_KEYS` format. A secret is base64url
   * or standard base64 of ≥ 32 bytes (`openssl rand -base64 32` works).
   */
  static parse(text: string): KeyRing {
    if (typeof text !== 'string') throw new TypeError('KeyRing.parse: expected a string');
    return new KeyRing(parseKeysText(text));
  }

  /**
   * A ring with one freshly generated key (for tests and single-process demos). It is `ephemeral`: the guard
   * refuses it with a store shared across processes (another replica cannot open what it seals).
   */
  static generate(kid = 'k1'): KeyRing {
    const ring = new KeyRing([{ kid, secret: generateKey() }]);
    ring.#ephemeral = true;
    return ring;
  }

  /** True when `kid` is in the ring (opens now, for a refreshing ring). */
  has(kid: string): boolean {
    return KeyRing.#liveOf(this) === undefined ? this.#secrets.has(kid) : this.current().#secrets.has(kid);
  }

  /** A new fixed ring without `kid` (rotation's last step). */
  without(kid: string): KeyRing {
    const ring = this.current();
    return new KeyRing([...ring.#secrets].filter(([k]) => k !== kid).map(([k, secret]) => ({ kid: k, secret })));
  }

  /** A new fixed ring with `key` as the new primary, the current keys kept for opening. */
  withPrimary(key: KeyInput): KeyRing {
    const ring = this.current();
    return new KeyRing([key, ...[...ring.#secrets].map(([kid, secret]) => ({ kid, secret }))]);
  }

  /**
   * HKDF-SHA256(secret, salt "mrtr/key-ring/v1", info `purpose`) — one subkey per (key, purpose),
   * derived once and cached (for a refreshing ring, across refreshes: a kid never changes secret). Returns
   * `undefined` for an unknown kid. Async only on WebCrypto runtimes.
   */
  subkey(kid: string, purpose: string, length = 32): Awaitable<Uint8Array> | undefined {
    if (KeyRing.#liveOf(this) !== undefined) return this.current().subkey(kid, purpose, length);
    const secret = this.#secrets.get(kid);
    if (secret === undefined) return undefined;
    if (typeof purpose !== 'string' || purpose.length === 0) throw new TypeError('KeyRing.subkey: purpose must be a non-empty string');
    if (!Number.isInteger(length) || length < 16 || length > 64) throw new RangeError('KeyRing.subkey: length must be 16-64');
    const cacheKey = `${kid}\u0000${purpose}\u0000${length}`;
    const cache = this.#subkeys;
    let derived = cache.get(cacheKey);
    if (derived === undefined) {
      derived = cryptoProvider.hkdfSha256(secret, HKDF_SALT, utf8Encode(purpose), length);
      if (isPromiseLike(derived)) {
        const pending = derived;
        // Cache the bytes once derived; forget a failed derivation so the next call tries again.
        pending.then(
          (bytes) => {
            if (cache.get(cacheKey) === pending) cache.set(cacheKey, bytes);
          },
          () => {
            if (cache.get(cacheKey) === pending) cache.delete(cacheKey);
          },
        );
      }
      cache.set(cacheKey, derived);
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

  static {
    const live = (now: () => number, keys: readonly ScheduledKey[]): KeyRing => {
      const entries = checkScheduled(keys, 'KeyProvider');
      const first = entries[0];
      if (first === undefined) throw new RangeError('KeyProvider: the key source returned no key');
      // A placeholder key makes the ring; its state is the live one from here on.
      const ring = new KeyRing([{ kid: first.kid, secret: first.bytes }]);
      const known = new Map<string, Uint8Array>();
      for (const e of entries) known.set(e.kid, e.bytes);
      ring.#live = { now, entries, known, view: undefined, from: 0, until: 0 };
      Object.defineProperties(ring, {
        kids: { get: () => ring.current().#kids, enumerable: true },
        primaryKid: { get: () => ring.current().#kids[0]!, enumerable: true },
      });
      return ring;
    };
    /** Swaps a refreshing ring's key set; false when nothing changed. A kid with another secret is refused. */
    const replace = (ring: KeyRing, keys: readonly ScheduledKey[]): boolean => {
      const live = ring.#live;
      if (live === undefined) throw new TypeError('KeyRing: not a refreshing ring');
      const entries = checkScheduled(keys, 'KeyProvider');
      if (entries.length === 0) throw new RangeError('KeyProvider: the key source returned no key');
      for (const e of entries) {
        const known = live.known.get(e.kid);
        if (known !== undefined && !sameBytes(known, e.bytes)) throw new KeyConflictError(e.kid);
      }
      const unchanged =
        entries.length === live.entries.length &&
        entries.every((e, i) => {
          const p = live.entries[i]!;
          return p.kid === e.kid && p.notBefore === e.notBefore && p.notAfter === e.notAfter;
        });
      if (unchanged) return false;
      for (const e of entries) {
        const known = live.known.get(e.kid);
        if (known === undefined) {
          if (live.known.size >= REMEMBERED_KIDS) live.known.delete(live.known.keys().next().value!);
          live.known.set(e.kid, e.bytes);
        }
      }
      live.entries = entries;
      // Subkeys of kids that left the ring are forgotten (they come back with the same secret, or not at all).
      const kept = new Set(entries.map((e) => e.kid));
      for (const key of ring.#subkeys.keys()) if (!kept.has(key.slice(0, key.indexOf('\u0000')))) ring.#subkeys.delete(key);
      live.until = live.from; // recompute the view on next use
      return true;
    };
    Object.assign(ringInternals, { live, replace });
  }
}

Object.defineProperty(KeyRing.prototype, RING_BRAND, { value: true });

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** The entries of an `MRTR_KEYS` value (`kid:<secret>` separated by commas; empty entries skipped). */
export function parseKeysText(text: string): KeyInput[] {
  const parts = text.split(',');
  if (parts.length > MAX_RING_KEYS * 2) throw new RangeError(`KeyRing.parse: at most ${MAX_RING_KEYS} keys`);
  return parts
    .map((part) => part.trim())
    .filter((part) => part.length > 0)
    .map((part) => {
      const colon = part.indexOf(':');
      if (colon <= 0) throw new TypeError('KeyRing.parse: each entry must be "kid:<base64url secret>"');
      return { kid: part.slice(0, colon), secret: part.slice(colon + 1) };
    });
}

/** Validates keys (labelled errors; never a secret in a message). */
function checkKeys(keys: Iterable<KeyInput>, label: string): { kid: string; bytes: Uint8Array }[] {
  if (keys === null || typeof keys !== 'object' || !(Symbol.iterator in keys)) {
    throw new TypeError(`${label}: keys must be an iterable of { kid, secret }`);
  }
  const out: { kid: string; bytes: Uint8Array }[] = [];
  const seen = new Set<string>();
  for (const key of keys) {
    if (out.length >= MAX_RING_KEYS) throw new RangeError(`${label}: at most ${MAX_RING_KEYS} keys`);
    if (key === null || typeof key !== 'object') throw new TypeError(`${label}: each key must be { kid, secret }`);
    const { kid, secret } = key;
    if (typeof kid !== 'string' || !KID_PATTERN.test(kid)) {
      throw new TypeError(`${label}: kid must be 1-32 characters of [A-Za-z0-9_-]`);
    }
    if (seen.has(kid)) throw new TypeError(`${label}: duplicate kid "${kid}"`);
    seen.add(kid);
    out.push({ kid, bytes: secretBytes(secret, kid, label) });
  }
  return out;
}

function checkScheduled(keys: readonly ScheduledKey[], label: string): KeyEntry[] {
  const checked = checkKeys(keys, label);
  return checked.map((e, i) => {
    const key = keys[i]!;
    const notBefore = key.notBefore ?? Number.NEGATIVE_INFINITY;
    const notAfter = key.notAfter ?? Number.POSITIVE_INFINITY;
    for (const [name, value] of [
      ['notBefore', key.notBefore],
      ['notAfter', key.notAfter],
    ] as const) {
      if (value !== undefined && (typeof value !== 'number' || !Number.isFinite(value))) {
        throw new TypeError(`${label}: ${name} of "${e.kid}" must be a finite number (ms since the epoch)`);
      }
    }
    if (!(notBefore < notAfter)) throw new RangeError(`${label}: notBefore of "${e.kid}" must be before its notAfter`);
    return { kid: e.kid, bytes: e.bytes, notBefore, notAfter };
  });
}

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

/** A secret's bytes (base64url/base64 text decoded, bytes copied), ≥ 32 bytes; labelled errors, never the secret. */
export function secretBytes(secret: Uint8Array | string, kid: string, label: string): Uint8Array {
  let bytes: Uint8Array | undefined;
  if (typeof secret === 'string') {
    bytes = decodeSecretText(secret.trim());
    if (bytes === undefined) throw new TypeError(`${label}: secret of "${kid}" is not valid base64url or base64`);
  } else if (secret instanceof Uint8Array) {
    bytes = new Uint8Array(secret);
  } else {
    throw new TypeError(`${label}: secret of "${kid}" must be a Uint8Array or a base64url string`);
  }
  if (bytes.length < MIN_KEY_BYTES) {
    throw new RangeError(`${label}: secret of "${kid}" must be at least ${MIN_KEY_BYTES} bytes`);
  }
  return bytes;
}

/** A fresh 32-byte secret as base64url text (for `MRTR_KEYS`). */
export function generateKey(): string {
  return cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(32));
}

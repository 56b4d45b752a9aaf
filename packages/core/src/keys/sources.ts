import { cryptoProvider } from '#crypto';
import { type Awaitable, andThen } from '../crypto/awaitable.js';
import { isCanonicalBase64url } from '../crypto/base64url.js';
import { utf8Encode } from '../util/json.js';
import { type KeyInput, KeyRing, MAX_RING_KEYS, MIN_KEY_BYTES, type ScheduledKey, parseKeysText, secretBytes } from './keys.js';
import { type OptionNames, optionsObject, rejectUnknownOptions } from '../util/validate.js';

/** Largest key set text a source may return (a JWKS of {@link MAX_RING_KEYS} keys is far below it). */
export const MAX_KEY_SET_CHARS: number = 64 * 1024;

/** One symmetric key of a JWK Set (RFC 7517 `oct`), with the schedule members mrtr reads. */
export interface OctJwk {
  kty: 'oct';
  kid: string;
  /** The secret, base64url without padding (≥ 32 bytes). */
  k: string;
  /** When the key starts sealing, seconds since the epoch (a JWT NumericDate); absent: at once. */
  nbf?: number;
  /** When the key stops opening, seconds since the epoch; absent: never. */
  exp?: number;
  alg?: string;
  use?: string;
  key_ops?: string[];
  ext?: boolean;
}

/** A JWK Set of `oct` keys: the exchange format of `mrtr keygen --jwks` and `mrtr keys rotate --file`. */
export interface OctJwkSet {
  keys: OctJwk[];
}

/** What a key source may return: an `MRTR_KEYS` value, a JWK Set (its JSON text or the object), or keys. */
export type KeySetInput = string | OctJwkSet | readonly ScheduledKey[];

const JWK_MEMBERS = new Set(['kty', 'kid', 'k', 'nbf', 'exp', 'alg', 'use', 'key_ops', 'ext']);
const isRecord = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * Reads a JWK Set of `oct` keys (its JSON text or the parsed object), strictly: an object with exactly a `keys`
 * array of at most {@link MAX_RING_KEYS} keys, each `kty: "oct"` with a `kid` and a canonical unpadded base64url
 * `k` of ≥ 32 bytes; optional `nbf`/`exp` (seconds since the epoch, `nbf < exp`), `alg`, `use`, `key_ops`, `ext`;
 * any other member (an asymmetric key's `d`, `x`, …) is refused. Never puts a secret in a message.
 */
export function parseJwks(input: string | OctJwkSet): ScheduledKey[] {
  let set: unknown = input;
  if (typeof input === 'string') {
    if (input.length > MAX_KEY_SET_CHARS) throw new RangeError(`parseJwks: the JWK Set is longer than ${MAX_KEY_SET_CHARS} characters`);
    try {
      set = JSON.parse(input);
    } catch {
      throw new TypeError('parseJwks: not valid JSON');
    }
  }
  if (!isRecord(set) || !Array.isArray(set.keys)) throw new TypeError('parseJwks: a JWK Set is an object with a "keys" array');
  for (const name of Object.keys(set)) if (name !== 'keys') throw new TypeError(`parseJwks: unknown member "${name}" in the set`);
  if (set.keys.length > MAX_RING_KEYS) throw new RangeError(`parseJwks: at most ${MAX_RING_KEYS} keys`);
  return set.keys.map((jwk: unknown, index: number) => {
    const at = `parseJwks: key ${index + 1}`;
    if (!isRecord(jwk)) throw new TypeError(`${at} is not an object`);
    for (const name of Object.keys(jwk)) if (!JWK_MEMBERS.has(name)) throw new TypeError(`${at}: unsupported member "${name}"`);
    if (jwk.kty !== 'oct') throw new TypeError(`${at}: kty must be "oct" (a symmetric key)`);
    if (typeof jwk.kid !== 'string') throw new TypeError(`${at}: kid is required`);
    if (typeof jwk.k !== 'string' || !isCanonicalBase64url(jwk.k)) throw new TypeError(`${at}: k must be unpadded base64url`);
    const secret = cryptoProvider.base64urlDecode(jwk.k);
    if (secret === undefined) throw new TypeError(`${at}: k must be unpadded base64url`);
    if (secret.length < MIN_KEY_BYTES) throw new RangeError(`${at}: k must be at least ${MIN_KEY_BYTES} bytes`);
    for (const name of ['nbf', 'exp'] as const) {
      const value = jwk[name];
      if (value !== undefined && (typeof value !== 'number' || !Number.isFinite(value) || value < 0)) {
        throw new TypeError(`${at}: ${name} must be seconds since the epoch`);
      }
    }
    if (jwk.alg !== undefined && typeof jwk.alg !== 'string') throw new TypeError(`${at}: alg must be a string`);
    if (jwk.use !== undefined && typeof jwk.use !== 'string') throw new TypeError(`${at}: use must be a string`);
    if (jwk.ext !== undefined && typeof jwk.ext !== 'boolean') throw new TypeError(`${at}: ext must be a boolean`);
    if (jwk.key_ops !== undefined && (!Array.isArray(jwk.key_ops) || jwk.key_ops.some((op) => typeof op !== 'string'))) {
      throw new TypeError(`${at}: key_ops must be an array of strings`);
    }
    const key: ScheduledKey = { kid: jwk.kid, secret };
    if (typeof jwk.nbf === 'number') key.notBefore = Math.round(jwk.nbf * 1000);
    if (typeof jwk.exp === 'number') key.notAfter = Math.round(jwk.exp * 1000);
    return key;
  });
}

/** A JWK Set of `oct` keys for `keys` (secrets as base64url; times in seconds, as `parseJwks` reads them). */
export function toJwks(keys: readonly ScheduledKey[]): OctJwkSet {
  return {
    keys: keys.map((key) => {
      const bytes = secretBytes(key.secret, key.kid, 'toJwks');
      const jwk: OctJwk = { kty: 'oct', kid: key.kid, k: cryptoProvider.base64urlEncode(bytes) };
      if (key.notBefore !== undefined) jwk.nbf = key.notBefore / 1000;
      if (key.notAfter !== undefined) jwk.exp = key.notAfter / 1000;
      return jwk;
    }),
  };
}

/**
 * The keys of a key set: an `MRTR_KEYS` value (`"k2:<secret>,k1:<secret>"`, the first seals), a JWK Set's JSON text
 * (a value starting with `{`), a JWK Set object, or keys. Strict: throws a labelled `TypeError`/`RangeError`.
 * An empty value is an error, never an empty ring.
 */
export function parseKeySet(input: KeySetInput): ScheduledKey[] {
  if (typeof input === 'string') {
    if (input.length > MAX_KEY_SET_CHARS) throw new RangeError(`parseKeySet: longer than ${MAX_KEY_SET_CHARS} characters`);
    const text = input.trim();
    if (text === '') throw new RangeError('parseKeySet: the key set is empty (make one with `npx @mrtr/cli keygen`)');
    if (text.startsWith('{')) return parseJwks(text);
    return parseKeysText(text);
  }
  if (Array.isArray(input)) {
    if (input.length > MAX_RING_KEYS) throw new RangeError(`parseKeySet: at most ${MAX_RING_KEYS} keys`);
    return input.map((key: ScheduledKey) => {
      if (!isRecord(key)) throw new TypeError('parseKeySet: each key must be { kid, secret, notBefore?, notAfter? }');
      return { ...key };
    });
  }
  if (isRecord(input)) return parseJwks(input as OctJwkSet);
  throw new TypeError('parseKeySet: expected an MRTR_KEYS value, a JWK Set or an array of keys');
}

/** Options of {@link keysFromEnv}. */
export interface KeysFromEnvOptions {
  /** The variable to read. @default "MRTR_KEYS" */
  name?: string;
  /**
   * What to do when the variable is not set at all: `"error"` throws, `"ephemeral"` generates a key for this process
   * only (an `ephemeral` ring, which the guard refuses with a shared store). A variable set but empty is always an
   * error. @default "error"
   */
  unset?: 'error' | 'ephemeral';
}

/**
 * The fixed ring of an environment variable (`MRTR_KEYS` format or a JWK Set's JSON): `keysFromEnv(process.env)`,
 * or a Workers `env` binding. Fails closed: unset is an error unless `unset: "ephemeral"`; set but empty is an error.
 */
export function keysFromEnv(env: Record<string, string | undefined>, options?: KeysFromEnvOptions): KeyRing {
  if (env === null || typeof env !== 'object') throw new TypeError('keysFromEnv: env must be an object');
  options = optionsObject('keysFromEnv', options, { name: true, unset: true });
  const name = options.name ?? 'MRTR_KEYS';
  if (typeof name !== 'string' || name === '') throw new TypeError('keysFromEnv: name must be a non-empty string');
  const unset = options.unset ?? 'error';
  if (unset !== 'error' && unset !== 'ephemeral') throw new TypeError('keysFromEnv: unset must be "error" or "ephemeral"');
  const text = env[name];
  if (text === undefined) {
    if (unset === 'ephemeral') return KeyRing.generate('ephemeral');
    throw new TypeError(`keysFromEnv: ${name} is not set (make a value with \`npx @mrtr/cli keygen\`)`);
  }
  if (typeof text !== 'string') throw new TypeError(`keysFromEnv: ${name} must be a string`);
  if (text.trim() === '') throw new RangeError(`keysFromEnv: ${name} is set but empty (no key is generated for an empty value)`);
  const keys = parseKeySet(text);
  if (keys.some((k) => k.notBefore !== undefined || k.notAfter !== undefined)) {
    throw new TypeError(`keysFromEnv: ${name} holds a scheduled key set: read it with a KeyProvider, which follows the schedule`);
  }
  return new KeyRing(keys);
}

/** HKDF salt of {@link deriveKey}: a derived key never equals a subkey the ring derives itself. */
const DERIVE_SALT = /* @__PURE__ */ utf8Encode('mrtr/derived-key/v1');

/**
 * A key derived from a secret the application already has (its `ENCRYPTION_KEY`, …): HKDF-SHA256(secret, salt
 * "mrtr/derived-key/v1", info `label`), 32 bytes, so the app keeps one secret and mrtr's key is unrelated to any
 * other use of it. `secret` must be high-entropy (≥ 32 bytes; a string counts its UTF-8 bytes): this is not password
 * hashing. Give each derived key its own `label` and `kid` (rotate by deriving under a new label, e.g. `mrtr/2026-12`).
 * Async on WebCrypto runtimes.
 */
export function deriveKey(secret: Uint8Array | string, options: { kid: string; label: string }): Awaitable<ScheduledKey> {
  const bytes = typeof secret === 'string' ? utf8Encode(secret) : secret instanceof Uint8Array ? new Uint8Array(secret) : undefined;
  if (bytes === undefined) throw new TypeError('deriveKey: secret must be a string or a Uint8Array');
  if (bytes.length < MIN_KEY_BYTES) throw new RangeError(`deriveKey: secret must be at least ${MIN_KEY_BYTES} bytes of high-entropy data`);
  if (options === null || typeof options !== 'object') throw new TypeError('deriveKey: options must be { kid, label }');
  rejectUnknownOptions('deriveKey', options, { kid: true, label: true } satisfies OptionNames<typeof options>);
  const { kid, label } = options;
  if (typeof label !== 'string' || label.length === 0 || label.length > 256) {
    throw new TypeError('deriveKey: label must be a non-empty string of at most 256 characters');
  }
  if (typeof kid !== 'string') throw new TypeError('deriveKey: kid must be a string');
  return andThen(cryptoProvider.hkdfSha256(bytes, DERIVE_SALT, utf8Encode(label), 32), (derived) => ({ kid, secret: derived }));
}

/** Options of {@link scheduleRotation}. */
export interface RotationScheduleOptions {
  /** When the rotation is written (ms since the epoch). */
  now: number;
  /**
   * Time for the new key set to reach every replica (longer than the providers' `refreshMs`, plus the clock skew):
   * the new key starts sealing this long after `now`.
   */
  propagationMs: number;
  /** The guard's `ttlMs`. */
  ttlMs: number;
  /** The guard's `clockSkewMs`. */
  clockSkewMs: number;
}

const ROTATION_OPTIONS: OptionNames<RotationScheduleOptions> = { now: true, propagationMs: true, ttlMs: true, clockSkewMs: true };

/**
 * The key set after a rotation to `next`, with no coordinator: `next` is published now and seals from
 * `now + propagationMs`; every older key stops opening `ttlMs + 2 × clockSkewMs` after that (the last state it
 * seals may carry an `exp` from a clock `skew` ahead and is accepted until `exp + skew`); keys already gone at `now`
 * are left out. Every replica reading the set switches at the same instant, within its clock skew.
 */
export function scheduleRotation(current: readonly ScheduledKey[], next: KeyInput, options: RotationScheduleOptions): ScheduledKey[] {
  if (!Array.isArray(current)) throw new TypeError('scheduleRotation: current must be an array of keys');
  if (options === null || typeof options !== 'object') throw new TypeError('scheduleRotation: options must be an object');
  rejectUnknownOptions('scheduleRotation', options, ROTATION_OPTIONS);
  const { now, propagationMs, ttlMs, clockSkewMs } = options;
  for (const [name, value] of Object.entries({ now, propagationMs, ttlMs, clockSkewMs })) {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`scheduleRotation: ${name} must be a non-negative integer (ms)`);
    }
  }
  if (current.some((k) => k.kid === next.kid)) throw new TypeError(`scheduleRotation: kid "${next.kid}" is already in the set`);
  const starts = now + propagationMs;
  const drop = starts + ttlMs + 2 * clockSkewMs;
  const kept = current
    .filter((k) => k.notAfter === undefined || k.notAfter > now)
    .map((k) => ({ ...k, notAfter: Math.min(k.notAfter ?? drop, drop) }));
  return [{ kid: next.kid, secret: next.secret, notBefore: starts }, ...kept];
}

import type { StateClaims } from './claims.js';
import type { Awaitable } from './crypto/types.js';
import type { KeyRing } from './keys.js';

/** What a codec returns when a token is authentic. */
export interface OpenedToken {
  /** The verified claims. */
  claims: StateClaims;
  /** The id of the key that opened it. */
  kid: string;
}

/**
 * Turns claims into an opaque token string and back. A codec provides integrity (and, when
 * `confidential`, confidentiality); the policy (expiry, principal, binding, single use) lives in the
 * state guard. Contract, checked by `@mrtr/test-suite`'s `codecCompliance`:
 * - `open` checks the size cap before any decoding and throws only `MrtrError`s
 *   (`ERR_STATE_TOO_LARGE`, `ERR_STATE_MALFORMED`, `ERR_STATE_INTEGRITY`, `ERR_KEY_UNKNOWN`);
 * - every modification of a token is rejected; the format version and `kid` are authenticated;
 * - `seal` uses the key ring's primary key, `open` any key in the ring.
 */
export interface StateCodec {
  /** Short stable name, e.g. `"hmac"`, `"jwe"`, `"aead"`. */
  readonly id: string;
  /** True when the token hides the claims from the client (encryption), not only protects them. */
  readonly confidential: boolean;
  /** Largest token `open` accepts; longer input is refused before decoding. */
  readonly maxTokenBytes: number;
  /** The key ring the codec was built on (the guard derives its principal tags from the same ring). */
  readonly keys: KeyRing;
  /** Seals claims with the ring's primary key. */
  seal(claims: StateClaims): Awaitable<string>;
  /** Verifies and opens a token with any key of the ring. */
  open(token: string): Awaitable<OpenedToken>;
}

/** Builds a codec on a key ring: what every codec package exports (`createHmacCodec`, …). */
export type CodecFactory = (keys: KeyRing) => StateCodec;

/**
 * Single-use ledger. `consume` is one atomic operation: it records `id` until at least `expiresAtMs`
 * and resolves `true` only for the first call; every later call before expiry resolves `false`.
 * A backend failure rejects with `ERR_STORE_UNAVAILABLE`, never resolves `true`.
 */
export interface ReplayStore {
  /** Records `id` until at least `expiresAtMs`; `true` only for the first call. */
  consume(id: string, expiresAtMs: number): Promise<boolean>;
  /** Releases connections; calling it twice is harmless. */
  close(): Promise<void>;
}

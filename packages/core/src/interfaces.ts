import type { StateClaims } from './claims.js';
import type { Awaitable } from './crypto/awaitable.js';
import type { KeyFingerprint } from './fleet.js';
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
 * - `unseal` checks the size cap before any decoding and throws only `MrtrError`s
 *   (`ERR_STATE_TOO_LARGE`, `ERR_STATE_MALFORMED`, `ERR_STATE_INTEGRITY`, `ERR_KEY_UNKNOWN`);
 * - every modification of a token is rejected; the format version and `kid` are authenticated;
 * - `seal` uses the key ring's primary key, `unseal` any key in the ring.
 *
 * Sync or async: `seal` and `unseal` may return their result or a promise of it ({@link Awaitable}), and may throw
 * or reject alike; core treats both the same and never needs one or the other. Return the value itself when the work
 * is synchronous (node:crypto): the guard then runs without an extra microtask. Callers `await` the result.
 *
 * `unseal` checks integrity only; the guard's `verify` runs every check of a state, and its `open` also spends it.
 */
export interface StateCodec {
  /** Short stable name, e.g. `"hmac"`, `"jwe"`, `"aead"`. */
  readonly id: string;
  /** True when the token hides the claims from the client (encryption), not only protects them. */
  readonly confidential: boolean;
  /** Largest token `unseal` accepts; longer input is refused before decoding. */
  readonly maxTokenBytes: number;
  /** The key ring the codec was built on (the guard derives its principal tags from the same ring). */
  readonly keys: KeyRing;
  /** Seals claims with the ring's primary key. */
  seal(claims: StateClaims): Awaitable<string>;
  /** Checks a token's integrity with any key of the ring and returns its claims (no policy: see the guard's `verify`). */
  unseal(token: string): Awaitable<OpenedToken>;
}

/**
 * Builds a codec on a key ring: what every codec package exports (`createHmacCodec`, …). The ring is fixed: with a
 * refreshing ring (`KeyProvider`) the guard calls the factory again on each new `keys.current()`.
 */
export type CodecFactory = (keys: KeyRing) => StateCodec;

/** What `createStateGuard` takes as `codec`: a factory (called with the guard's ring) or a codec built on that ring. */
export type CodecInput = CodecFactory | StateCodec;

/**
 * What {@link ReplayStore.claim} found:
 * - `first`: the id was not held; it is now, with this fingerprint and no outcome yet (the caller runs the round);
 * - `pending`: held with the same fingerprint, and its outcome is not recorded yet (the first call is still running,
 *   or died before recording);
 * - `recorded`: held with the same fingerprint, with the outcome the first call recorded;
 * - `replayed`: held by a plain `consume`, with another fingerprint, or with an outcome recorded as not kept (`''`).
 */
export type ClaimResult =
  | { readonly status: 'first' }
  | { readonly status: 'pending' }
  | { readonly status: 'recorded'; readonly outcome: string }
  | { readonly status: 'replayed' };

/**
 * Single-use ledger. `consume` is one atomic operation: it records `id` until at least `expiresAtMs`
 * and resolves `true` only for the first call; every later call before expiry resolves `false`.
 * A backend failure rejects with `ERR_STORE_UNAVAILABLE`, never resolves `true`.
 *
 * A store may also record outcomes (`claim` and `record`, both or neither), so that an identical retry of a
 * round whose response was lost gets that response instead of a replay error: `claim` is `consume` that keeps a
 * fingerprint of the request with the id, `record` stores the round's (sealed) outcome against it. A store
 * without them still works: every retry is a replay.
 */
export interface ReplayStore {
  /** Records `id` until at least `expiresAtMs`; `true` only for the first call. */
  consume(id: string, expiresAtMs: number): Promise<boolean>;
  /**
   * One atomic operation, like `consume`: holds `id` until at least `expiresAtMs` with `fingerprint` (a short
   * opaque string) if it is not held, else reports how it is held (see {@link ClaimResult}). `consume` and `claim`
   * share one ledger: an id taken by either is taken for both. A claim with another fingerprint of an id held by
   * `claim` counts a miss; the `MAX_FINGERPRINT_MISSES`-th (3rd) miss marks the id "done, not kept" (every later claim
   * is `replayed`, a later `record` resolves `false`).
   */
  claim?(id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult>;
  /**
   * Stores `outcome` for an id held by `claim` with this `fingerprint` and no outcome yet, until the id's expiry;
   * `true` when stored, `false` otherwise (another fingerprint, already recorded, expired, or more than the store
   * keeps — a store that cannot keep an outcome records `''`, "done, not kept", so retries become replays). An
   * outcome longer than {@link ReplayStore.maxOutcomeBytes}, or that would take the store past its outcome budget
   * (`OutcomeStoreLimits`), is recorded as `''`.
   */
  record?(id: string, fingerprint: string, outcome: string): Promise<boolean>;
  /**
   * Largest outcome `record` keeps, in bytes, when the store records outcomes: the guard seals nothing longer (it
   * records `''` at once instead).
   */
  readonly maxOutcomeBytes?: number;
  /**
   * `true` when processes other than this one share the ledger (Redis, SQL, any networked store): every replica must
   * then hold the same keys, so the guard refuses a generated (`ephemeral`) ring with such a store unless
   * `allowEphemeralKeys` is set. Absent or `false`: the store lives in this process.
   */
  readonly shared?: boolean;
  /**
   * The fleet check's exchange (see `StateGuard.checkKeys`), for shared stores. For each offered record, atomically:
   * if the store holds no unexpired record for its `kid`, store it until its `expiresAtMs`; if it holds one with the
   * same `fingerprint`, extend its expiry to the later of the two; if it holds one with another fingerprint, keep
   * that one (the first writer wins). Then resolve every unexpired record the store holds (at most 256). A record is a
   * keyed fingerprint, never a key. A backend failure rejects (reported as `ERR_STORE_UNAVAILABLE`).
   */
  keyFingerprints?(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  /** Releases connections; calling it twice is harmless. */
  close(): Promise<void>;
}

/**
 * A {@link ReplayStore} that records outcomes (safe retry): `claim` and `record` present, and the bounds it keeps
 * outcomes under (see `OutcomeStoreLimits`). What every `@mrtr/store-*` store that records returns.
 */
export interface RecordingReplayStore extends ReplayStore {
  /** Largest outcome `record` keeps, in UTF-8 bytes; a larger one is recorded as not kept (`''`). */
  readonly maxOutcomeBytes: number;
  /** Most outcome bytes held at once in the store; past it a round is recorded as not kept. */
  readonly outcomeBudgetBytes: number;
  claim(id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult>;
  record(id: string, fingerprint: string, outcome: string): Promise<boolean>;
}

import type { StateClaims } from './claims.js';
import type { Awaitable } from './crypto/awaitable.js';
import type { KeyRing } from './keys/keys.js';

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
  /**
   * Optional: seals claims given as their JSON text, `json` being exactly `JSON.stringify(claims)` of valid
   * `StateClaims` (the caller's guarantee: the codec does not check it again) — the same token `seal(claims)` makes,
   * without building the text a second time. Core seals recorded outcomes this way when the codec has it (their JSON is
   * written once, for the size check, and reused); a codec whose format is not JSON text leaves it out.
   */
  sealJson?(json: string): Awaitable<string>;
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
 * - `first`: the id was not held; it is now, with this fingerprint (and owner and lease, on a store with `leases`) and
 *   no outcome yet (the caller runs the round). `fence` is present on a store with `leases`: `0` for a first claim,
 *   then one more for each reclaim of a lapsed lease (a fencing token for the effect);
 * - `pending`: held with the same fingerprint, and its outcome is not recorded yet (the first call is still running,
 *   or died before recording). On a store with `leases`, `leaseLeftMs` says how long its lease still runs;
 * - `recorded`: held with the same fingerprint, with the outcome the first call recorded;
 * - `unknown` (stores with `leases` only): held with the same fingerprint, no outcome, and its lease lapsed (the owner
 *   stopped renewing: it died, or lost the store) — the round may or may not have run. Answered to every later claim
 *   with that fingerprint, unless `reclaim` takes it over;
 * - `replayed`: held by a plain `consume`, with another fingerprint, or with an outcome recorded as not kept (`''`).
 */
export type ClaimResult =
  | { readonly status: 'first'; readonly fence?: number }
  | { readonly status: 'pending'; readonly leaseLeftMs?: number }
  | { readonly status: 'recorded'; readonly outcome: string }
  | { readonly status: 'unknown' }
  | { readonly status: 'replayed' };

/**
 * What a store declares it can do; core, the adapter and `@mrtr/test-suite` read it through `storeCapabilities`
 * (never by the shape of the store). A capability declared makes its methods and rules part of the store's contract,
 * which the shared suite checks.
 */
export interface StoreCapabilities {
  /**
   * Other processes share the ledger (Redis, SQL, any networked store): every replica must then hold the same keys,
   * so the guard refuses a generated (`ephemeral`) ring with such a store unless `allowEphemeralKeys` is set.
   */
  readonly shared: boolean;
  /**
   * Most ids the store holds at once, when it is bounded by a count (the memory store's `maxEntries`): the guard's
   * default mint quota is a hundredth of it. Absent: no such bound.
   */
  readonly capacity?: number | undefined;
  /**
   * Outcomes are recorded (`claim` and `record`), within these bounds: the largest outcome `record` keeps, and the most
   * outcome bytes held at once (past either, a round is recorded as not kept, `''`). Absent: every retry is a replay.
   */
  readonly outcomes?: { readonly maxOutcomeBytes: number; readonly outcomeBudgetBytes: number } | undefined;
  /** The fleet check's exchange (`keyFingerprints`) is kept. */
  readonly keyExchange: boolean;
  /**
   * The store has a clock of its own and decides on it (`time`): an id is held until `expiresAtMs` by the store's
   * clock, and a `consume` or `claim` whose `expiresAtMs` the store's clock has passed is refused with
   * `ERR_STATE_EXPIRED` — never written with a past expiry (the guard reports it as clock skew).
   */
  readonly clock: boolean;
  /**
   * Claims carry an owner and a lease (with `outcomes`): `claim` takes `owner` and `leaseMs`, `renew` extends a lease,
   * `release` gives an unrecorded claim back, `record` with the same owner twice answers as once, and a claim whose
   * lease lapsed unrecorded is `unknown` (or, with `reclaim`, taken over with the next `fence`).
   */
  readonly leases: boolean;
  /**
   * The store keeps a ledger epoch — when its ledger began, by its own clock, written when missing (a store restarted
   * empty, flushed, or failed over to an empty replica starts a new one) — and refuses a `consume` or `claim` whose
   * `mintedAtMs` is before it with `ERR_LEDGER_LOST`: it cannot know whether such a state was spent. `ledgerEpoch`
   * writes it ahead of the first mint.
   */
  readonly epoch: boolean;
}

/** What `consume` and `claim` take besides the id (see {@link StoreCapabilities.epoch}). */
export interface SpendOptions {
  /**
   * A time (epoch ms, on the store's clock) at or after which the state was minted: a store with `epoch` refuses it
   * with `ERR_LEDGER_LOST` when its ledger began later (the id's part of the ledger, on a sharded store). The guard
   * passes the ledger epoch the minting guard knew (`ledgerEpoch`, sealed in the state): causal, no clock involved. For
   * a state that carries none, the state's `iat` less the tolerated clock skew.
   */
  readonly mintedAtMs?: number | undefined;
}

/**
 * What `claim` takes on a store with `leases` (others ignore `owner`, `leaseMs` and `reclaim`). A claim without
 * `owner`, or without `leaseMs`, holds no lease: it never lapses (it is `pending` until recorded or expired), as on a
 * store without leases.
 */
export interface ClaimOptions extends SpendOptions {
  /** Who claims: a random value of 16 to 64 base64url characters, unique per attempt (`renew`, `release`, `record` match it). */
  readonly owner?: string | undefined;
  /**
   * How long the claim's lease runs from now, by the store's clock, unless renewed (a positive integer, ms). It lapses
   * when the store's clock passes it with no outcome recorded: later claims with the same fingerprint are `unknown`.
   */
  readonly leaseMs?: number | undefined;
  /**
   * Take over a claim whose lease lapsed unrecorded (at-least-once): it is `first` again for this owner, with the next
   * fence, instead of `unknown`.
   */
  readonly reclaim?: boolean | undefined;
}

/**
 * Single-use ledger. `consume` is one atomic operation: it records `id` until at least `expiresAtMs`
 * and resolves `true` only for the first call; every later call before expiry resolves `false`.
 * A backend failure rejects with `ERR_STORE_UNAVAILABLE`, never resolves `true`.
 *
 * What else a store does it declares in `capabilities` ({@link StoreCapabilities}): recording outcomes (`claim` and
 * `record`, so that an identical retry of a round whose response was lost gets that response instead of a replay
 * error), leases, a clock and an epoch of its own, the fleet key exchange. A store that declares nothing still works:
 * every retry is a replay.
 */
export interface ReplayStore {
  /** What this store does beyond `consume` (see {@link StoreCapabilities}). */
  readonly capabilities: StoreCapabilities;
  /** Records `id` until at least `expiresAtMs`; `true` only for the first call. */
  consume(id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean>;
  /**
   * With `outcomes`. One atomic operation, like `consume`: holds `id` until at least `expiresAtMs` with `fingerprint`
   * (a short opaque string) if it is not held, else reports how it is held (see {@link ClaimResult}). `consume` and
   * `claim` share one ledger: an id taken by either is taken for both. A claim with another fingerprint of an id held
   * by `claim` counts a miss; the `MAX_FINGERPRINT_MISSES`-th (3rd) miss marks the id "done, not kept" (every later
   * claim is `replayed`, a later `record` resolves `false`).
   */
  claim?(id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult>;
  /**
   * With `outcomes`. Stores `outcome` for an id held by `claim` with this `fingerprint` and no outcome yet, until the
   * id's expiry; `true` when stored, `false` otherwise (another fingerprint, already recorded, expired, or more than
   * the store keeps — a store that cannot keep an outcome records `''`, "done, not kept", so retries become replays).
   * An outcome longer than `maxOutcomeBytes`, or that would take the store past its outcome budget, is recorded as
   * `''`. With `leases` and an `owner`: only the claim's owner records (a lapsed lease that nobody reclaimed still
   * records), and a second `record` by the same owner answers what the first did — `true` when the first kept its
   * outcome — so a retry after a lost reply is safe.
   */
  record?(id: string, fingerprint: string, outcome: string, options?: { readonly owner?: string | undefined }): Promise<boolean>;
  /**
   * With `leases`. Extends the lease of `id`'s unrecorded claim held by `owner` to `leaseMs` from now (store's clock);
   * `true` when it did, `false` when `owner` no longer holds an unrecorded claim of it (recorded, released, expired,
   * or reclaimed by another owner). A lapsed lease that nobody reclaimed is renewed (its owner was only slow).
   */
  renew?(id: string, owner: string, leaseMs: number): Promise<boolean>;
  /**
   * With `leases`. Gives back `id` when `owner` holds an unrecorded claim of it (compare-and-delete: the id is free
   * again, as if never claimed). For an owner that knows its round never ran (its claim's reply was lost, or it gave up
   * waiting for it). Resolves `true` when `owner` holds no claim of `id` afterwards (given back now or before, or never
   * landed), `false` when another owner's claim or a recorded outcome holds it (nothing changed). Running it twice answers
   * as once, as long as no other owner claimed the id in between (then `false`: the guard acts on the resolution, not on
   * the boolean).
   */
  release?(id: string, owner: string): Promise<boolean>;
  /**
   * With `epoch`. The ledger's epoch (epoch ms, by the store's clock), written where it is missing — on every part the
   * store spreads ids over (each shard, each hash slot) — resolving the latest of them. The guard calls it before it
   * mints its first state (and again now and then) and seals the answer in each state it mints (`mintedAtMs` at its
   * spend): a state is never minted on a ledger whose epoch does not exist yet, so a brand-new ledger serves every
   * state minted on it, and a ledger lost and begun again after the mint refuses it. Running it again is safe.
   */
  ledgerEpoch?(): Promise<number>;
  /** With `clock`. The store's time, epoch ms, read from the store itself. */
  time?(): Promise<number>;
  /**
   * With `keyExchange`: the fleet check's exchange (see `StateGuard.checkKeys`). For each offered record, atomically:
   * if the store holds no unexpired record for its `kid`, store it until its `expiresAtMs`; if it holds one with the
   * same `fingerprint`, extend its expiry to the later of the two; if it holds one with another fingerprint, keep
   * that one (the first writer wins). Then resolve every unexpired record the store holds (at most 256). A record is a
   * keyed fingerprint, never a key. A backend failure rejects (reported as `ERR_STORE_UNAVAILABLE`).
   */
  keyFingerprints?(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  /**
   * The namespace the store's ledger lives in, when it has one: named in the fleet check's `ERR_KEY_MISMATCH` (which
   * namespace holds the fleet's key fingerprints). Never compared or used as a key.
   */
  readonly namespace?: string | undefined;
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
  claim(id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult>;
  record(id: string, fingerprint: string, outcome: string, options?: { readonly owner?: string | undefined }): Promise<boolean>;
}

/**
 * A keyed fingerprint of one key, never the key: what replicas compare through a shared store. Equal for the same
 * secret under the same kid, unrelated otherwise; only a holder of the secret can compute it.
 */
export interface KeyFingerprint {
  readonly kid: string;
  /** base64url of the first 16 bytes of HMAC-SHA256(subkey(kid, "mrtr/key-fingerprint/v1"), kid). */
  readonly fingerprint: string;
  /** Until when the store keeps the record (ms since the epoch): the fleet may present states sealed under `kid` until then. */
  readonly expiresAtMs: number;
}

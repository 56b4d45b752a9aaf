import type { ClockSample } from './store-clock.js';
import type { FlowClaims, RequestBinding, StateClaims } from '../claims.js';
import type { EventHook, EventSink, GuardEvent, OutcomeDropReason } from '../events.js';
import type { FleetKeyCheck } from '../keys/fleet.js';
import type { CodecInput, ReplayStore, StateCodec } from '../interfaces.js';
import type { KeyRing } from '../keys/keys.js';
import type { JsonValue } from '../protocol.js';
import type { Principal } from './principal.js';

/** The request a state is minted for or presented with. */
export interface RequestContext {
  /** `tools/call`, `prompts/get` or `resources/read`. */
  method: string;
  /** Tool or prompt name, or resource URI. */
  target: string;
  /** The call's arguments (tool/prompt arguments; absent for resources). */
  arguments?: unknown;
  /** The authenticated principal, if any (see `StateGuardOptions.principal` and `unauthenticated`). */
  principal?: string | undefined;
  /**
   * The principal already resolved by the caller with this guard's own policy (`principalPolicy` over the same
   * `unauthenticated`): when set, the guard takes it as it is and reads neither `principal` nor the `principal`
   * option. An authenticated one (`['p', name]`) needs a non-empty name; the unauthenticated one (`['u', name]`) must
   * be this guard's fixed principal. Anything else is a `TypeError`.
   */
  resolvedPrincipal?: Principal | undefined;
}

/**
 * A per-principal bound on minting, so that no principal can fill a bounded store that others depend on.
 *
 * **Guarantee.** Let `H` = max(`windowMs`, `ttlMs` + 2 × `clockSkewMs`): the window is never shorter than the
 * lifetime of a state (a replay store holds its id until `exp` + 2 × skew). For each principal, this guard mints
 * at most `max` states in any interval of length `H`, both ends included, by its clock (a clock that goes back
 * counts as standing still). So at most `max` of one principal's states minted here are alive at any moment,
 * whatever `ttlMs` is: unexpired, or held by a replay store on the same clock (`@mrtr/store-memory`). Each
 * instance of a fleet keeps its own counts.
 *
 * **Cost.** O(1) memory per principal (the window is counted in 10 sub-windows of `H` / 10) and at most
 * `maxPrincipals` principals. Counting by sub-window only errs on the safe side: a state minted at `t` frees its
 * place between `t + H` and `t + H + H / 10`.
 */
export interface MintQuota {
  /** States one principal may mint in any window, hence may hold alive at once. */
  max: number;
  /**
   * Window length in ms; raised to the state lifetime (`ttlMs` + 2 × `clockSkewMs`) when shorter, which is
   * also the default. @default ttlMs + 2 × clockSkewMs
   */
  windowMs?: number;
  /** Most principals tracked at once; past it (after dropping those with nothing in the window) new principals are refused. @default 100_000 */
  maxPrincipals?: number;
}

/**
 * A per-principal bound on the bytes of recorded outcomes (what safe retry keeps in the store for identical retries).
 * Like {@link MintQuota}, in any window of `H` = max(`windowMs`, the state lifetime) a principal records at most
 * `maxBytes` of sealed outcomes through this guard, so at most that much of its outcomes is held at once. An outcome
 * past it is recorded as "done, not kept": the round is answered, and its retries are replays. Each instance of a
 * fleet keeps its own counts; the store's `outcomeBudgetBytes` bounds what all principals hold together.
 */
export interface OutcomeQuota {
  /** Bytes of sealed outcomes one principal may have kept in any window. @default 1_048_576 (1 MiB) */
  maxBytes?: number;
  /** Window length in ms, raised to the state lifetime when shorter. @default ttlMs + 2 × clockSkewMs */
  windowMs?: number;
  /** Most principals tracked at once; past it (after dropping those with nothing in the window) a new principal's outcomes are not kept. @default 100_000 */
  maxPrincipals?: number;
}

/** Bounds on identical retries that wait for a round still in progress (each one holds its request while it waits). */
export interface WaitingRetries {
  /** Most retries of one principal waiting at once on this guard; one more gets `ERR_ROUND_IN_PROGRESS` at once. @default 16 */
  perPrincipal?: number;
  /** Most retries waiting at once on this guard, all principals together. @default 1_024 */
  total?: number;
}

/** Options of {@link createStateGuard}. Validated at construction (labelled `TypeError`/`RangeError`). */
export interface StateGuardOptions {
  /**
   * The key ring: the codec is built on it and the principal tags are derived from it. A refreshing ring
   * (`KeyProvider`'s `keys`) is read per operation: the codec is rebuilt, by its factory, when the ring in force changes.
   */
  keys: KeyRing;
  /**
   * Seals and unseals tokens: a codec factory such as `createHmacCodec`, called with `keys`. A codec
   * instance is accepted only when it was built on this same `keys` ring, and never with a refreshing ring.
   */
  codec: CodecInput;
  /**
   * Accept a generated ring (`KeyRing.generate`, `keysFromEnv(env, { unset: 'ephemeral' })`) with a store that is
   * shared across processes (`store.capabilities.shared`). Off, such a guard is refused at construction: another replica cannot
   * open what this one seals, so every request that lands elsewhere would fail. @default false
   */
  allowEphemeralKeys?: boolean | undefined;
  /** Makes each state single-use. Without it, a state can be replayed until it expires. */
  store?: ReplayStore | undefined;
  /** Who the states are for (e.g. the server's name or URL); a state from another audience is rejected. */
  audience: string;
  /** Lifetime of one round's state. @default 600_000 (10 min) */
  ttlMs?: number | undefined;
  /** Absolute lifetime of a whole flow, fixed at round 1. @default 1_800_000 (30 min) */
  flowTtlMs?: number | undefined;
  /** Most rounds (states minted) in one flow. @default 8 */
  maxRounds?: number | undefined;
  /** Tolerated clock difference between instances. @default 5_000 */
  clockSkewMs?: number | undefined;
  /** Size cap checked before any decoding. @default min(16 KiB, codec.maxTokenBytes) */
  maxTokenBytes?: number | undefined;
  /** Reads the principal from a request. @default (req) => req.principal */
  principal?: ((request: RequestContext) => string | undefined) | undefined;
  /**
   * Requests without a principal: `'reject'` throws `ERR_PRINCIPAL_REQUIRED`; `{ principal }` gives them
   * one fixed identity in a namespace of its own (no authenticated principal can ever share its states).
   *
   * Under that shared identity every anonymous caller is the same principal, so a copy of someone's spent state
   * with the right answers would get the outcome of their round: recorded outcomes are therefore not kept for it
   * (an identical retry is a replay, as without safe retry) unless `recordOutcomes: true` says the callers are one
   * party (a single trusted client, a local tool).
   * @default 'reject'
   */
  unauthenticated?: 'reject' | { principal: string; recordOutcomes?: boolean | undefined } | undefined;
  /**
   * Per-principal bound on minting (no single principal can fill a bounded store others depend on). `false`
   * turns the default off.
   * @default with a store that declares its capacity (`maxEntries`, like the memory store's): `{ max: maxEntries / 100 }`
   * (at least 16), so no principal can fill it; else none
   */
  mintQuota?: MintQuota | false | undefined;
  /** Per-principal bound on the bytes of recorded outcomes. @default { maxBytes: 1_048_576 } */
  outcomeQuota?: OutcomeQuota | undefined;
  /**
   * How long `admit`/`claim` waits for the first attempt of a round when an identical retry arrives while it is
   * still running (locally: until it records; on another instance: one poller per state, pausing 50 ms, doubling up
   * to 1 s), before `ERR_ROUND_IN_PROGRESS`. @default 3_000
   */
  retryWaitMs?: number | undefined;
  /**
   * With a store that declares `leases`: how long a round's claim is held for the instance running it without being
   * renewed, ms. The instance renews it every third of that while the round runs; when the instance dies (or loses the
   * store) the lease lapses and identical retries get `ERR_OUTCOME_UNKNOWN` ("this round may have run") instead of
   * waiting until the state expires. From 3 to 2^31 − 1. @default 30_000
   */
  leaseMs?: number | undefined;
  /**
   * With a store that declares `clock`: how often this instance measures its offset from the store's clock, ms (in the
   * background; the first time on the first spend or mint). Past `clockSkewMs` every spend and mint is refused with
   * `ERR_CLOCK_SKEW` until a measurement is back within it. 0: measure once, then only when the store refuses a state
   * as expired. @default 30_000
   */
  clockCheckMs?: number | undefined;
  /** Bounds on identical retries waiting at once. @default { perPrincipal: 16, total: 1_024 } */
  maxWaitingRetries?: WaitingRetries | undefined;
  /** Clock in ms since the epoch. @default Date.now */
  now?: (() => number) | undefined;
  /**
   * Called synchronously with one typed event per step (state minted/opened/rejected, store error, flow started).
   * A throw or a rejected promise is swallowed; queue slow or async work yourself. Without it no event is built.
   * An adapter that emits events of its own passes an {@link EventSink} built on the same `keys`
   * (`createEventSink` from `@mrtr/core/events`), so that it and the guard share one emitter and one flow tagger.
   * @default none
   */
  onEvent?: EventHook<GuardEvent> | EventSink<GuardEvent> | undefined;
}

/** Options of `StateGuard.mint`. */
export interface MintOptions {
  /** The opened state of the round being continued: keeps its flow id and deadline, round + 1. */
  continues?: OpenedState | undefined;
}

/** A verified state. */
export interface OpenedState<P extends JsonValue = JsonValue> {
  claims: StateClaims<P>;
  data: P;
  flow: FlowClaims;
  kid: string;
}

/** Mints and opens request states with every check. */
export interface StateGuard {
  /** The codec (with a refreshing ring: one that seals and opens with the codec of the ring in force). */
  readonly codec: StateCodec;
  /**
   * The fleet check, for a replica at start (and after its keys change): with a store that keeps key fingerprints
   * (`ReplayStore.keyFingerprints`), publishes a keyed fingerprint of the key this replica seals with and rejects with
   * `ERR_KEY_MISMATCH` (its `kid` and `reason`) when the fleet seals under a kid this ring lacks or holds another
   * secret under one of its kids. Resolves `{ checked: false }` with a store that keeps none.
   */
  checkKeys(): Promise<FleetKeyCheck>;
  readonly store: ReplayStore | undefined;
  readonly maxTokenBytes: number;
  readonly maxRounds: number;
  /** Lifetime of one round's state, ms: also the longest an idempotency key lives (`GuardRequest.claimKey`). */
  readonly ttlMs: number;
  /** Seals `data` for `request` (a new flow, or the next round of `options.continues`): the token. */
  mint<P extends JsonValue>(data: P, request: RequestContext, options?: MintOptions): Promise<string>;
  /** `mint`, also returning the flow the token carries (the new one in round 1). */
  mintFlow<P extends JsonValue>(data: P, request: RequestContext, options?: MintOptions): Promise<MintedState>;
  /**
   * One request's view of the guard: the principal policy runs here, once (`ERR_PRINCIPAL_REQUIRED` is thrown
   * now, and is not reported as an event: the caller has opened nothing yet), and the principal tag and the
   * request binding are computed at most once for every open and mint of this request. For an adapter that
   * opens a state and mints the next one for the same request.
   */
  forRequest(request: RequestContext): GuardRequest;
  /** Every check, then single use (when a store is set). Throws `MrtrError`s. */
  open<P extends JsonValue = JsonValue>(token: unknown, request: RequestContext): Promise<OpenedState<P>>;
  /** Every check except single use; pair with `consume` to consume on commit instead of on read. */
  verify<P extends JsonValue = JsonValue>(token: unknown, request: RequestContext): Promise<OpenedState<P>>;
  /** Marks a verified state used: `ERR_STATE_REPLAYED` if it was, `ERR_STORE_UNAVAILABLE` on outage. */
  consume(state: OpenedState): Promise<void>;
  /**
   * Single use that tells an identical retry from a replay (see {@link Admission}): the first attempt of a round
   * owns it and records its outcome; the same state presented again by the same principal with the same `answers`
   * gets that outcome (after waiting up to `retryWaitMs` for a first attempt still running, else
   * `ERR_ROUND_IN_PROGRESS`); other answers are a replay (`ERR_STATE_REPLAYED`). With a store that does not
   * record outcomes it is `consume`; without a store every attempt owns the round.
   */
  claim<P extends JsonValue = JsonValue>(
    state: OpenedState<P>,
    answers: JsonValue,
    options?: AdmitOptions,
  ): Promise<Admission<OpenedState<P>>>;
  /** `verify`, then `claim`. */
  admit<P extends JsonValue = JsonValue>(
    token: unknown,
    request: RequestContext,
    answers: JsonValue,
    options?: AdmitOptions,
  ): Promise<Admission<OpenedState<P>>>;
  /** The binding of a request (method, target, arguments digest). */
  bind(request: RequestContext): Promise<RequestBinding>;
  /**
   * Measures this instance's offset from the store's clock now (a store that declares `clock`; else an offset of 0),
   * reports it (`store.clock`), and resolves it. Call it at start to refuse to serve with a skewed clock.
   */
  checkClock(): Promise<ClockSample>;
}

/**
 * How `admit` treats a round whose first attempt stopped unrecorded (its lease lapsed), on a store with `leases`.
 */
export interface AdmitOptions {
  /**
   * At-least-once for this round: an identical retry after the lease lapsed runs the round again (`replay: false`,
   * with the next `fence`) instead of `ERR_OUTCOME_UNKNOWN`. The round may then run twice: give the effect the fence
   * (an idempotency or fencing token downstream) so that it can tell. Off (at-most-once) by default.
   */
  reclaim?: boolean | undefined;
}

/** What `StateGuard.mintFlow` returns. */
export interface MintedState {
  /** The sealed state. */
  token: string;
  /** The flow it carries: a new one in round 1, else the continued flow with round + 1. */
  flow: FlowClaims;
}

/** A guard bound to one request (see `StateGuard.forRequest`): the guard's operations without the request argument. */
export interface GuardRequest {
  readonly request: RequestContext;
  open<P extends JsonValue = JsonValue>(token: unknown): Promise<OpenedState<P>>;
  verify<P extends JsonValue = JsonValue>(token: unknown): Promise<OpenedState<P>>;
  admit<P extends JsonValue = JsonValue>(token: unknown, answers: JsonValue, options?: AdmitOptions): Promise<Admission<OpenedState<P>>>;
  /** `StateGuard.mint` for this request: the token. */
  mint<P extends JsonValue>(data: P, options?: MintOptions): Promise<string>;
  /** `StateGuard.mintFlow` for this request: the token and its flow. */
  mintFlow<P extends JsonValue>(data: P, options?: MintOptions): Promise<MintedState>;
  /**
   * Single use of a first-round call by its idempotency key: the call is claimed under (principal, method and target,
   * `key`) — an id derived by HMAC under the primary key, never the key itself — for `ttlMs`, and fingerprinted by
   * the digest of its canonical arguments. The first call owns it (`replay: false`: run it, then `record` its outcome,
   * or `release` it to let a retry run again); a retry with the same arguments gets the recorded outcome
   * (`replay: true`), or waits for the first call still running and then `ERR_ROUND_IN_PROGRESS`; the same key with
   * other arguments (or whose outcome was not kept) is `ERR_IDEMPOTENCY_KEY_CONFLICT`. Past `ttlMs` the key is free
   * again: the call runs anew. Each keyed call counts against the principal's mint quota; its outcome against the
   * outcome quota and the store's bounds, like a round's. A store that does not record outcomes consumes the key
   * (every retry is a conflict). `key`: 1–255 characters of printable ASCII (`TypeError` otherwise); `ttlMs` from
   * 1 000 to the guard's `ttlMs` (its default; `RangeError` otherwise). A primary-key rotation starts new ids: a retry
   * across it runs again.
   */
  claimKey(key: string, options?: { ttlMs?: number | undefined }): Promise<Admission<OpenedState>>;
}

/**
 * What {@link StateGuard.claim} decided for a presented state:
 * - `replay: false`: this call owns the round. Run it, then `record` its outcome (a JSON value: the response, or
 *   what the caller needs to rebuild an error) so that an identical retry gets it; `record` resolves `false` when
 *   nothing was kept (no store that records outcomes, an outcome too large for the codec or the store, past the
 *   principal's `outcomeQuota`: reported as `outcome.dropped`, see {@link OutcomeDropReason}) and rejects with
 *   `ERR_STORE_UNAVAILABLE` when the store failed (answer the round anyway: its effect has happened).
 * - `replay: true`: an identical retry (same state, same principal, same answers) of a round that already ran;
 *   `outcome` is what its first attempt recorded. Run nothing.
 */
export type Admission<S> =
  | {
      readonly state: S;
      readonly replay: false;
      /**
       * 0 for a round's first run; with `reclaim` (at-least-once), one more for each run after an earlier one stopped
       * unrecorded: a fencing token for the effect (pass it downstream so that a second run can be told apart).
       */
      readonly fence: number;
      record(outcome: JsonValue): Promise<boolean>;
      /**
       * Instead of `record`: gives the claim back unrecorded, so that the next identical attempt runs again (for a run
       * whose effect did not happen, e.g. a failure not to be replayed). Resolves `true` when the claim was given back
       * (a store that declares `leases`; or no store: every attempt runs anyway), `false` when it cannot be (then
       * `record` the outcome, which stays usable).
       */
      release(): Promise<boolean>;
    }
  | { readonly state: S; readonly replay: true; readonly outcome: JsonValue };

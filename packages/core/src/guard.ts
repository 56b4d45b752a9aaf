import { CLAIMS_VERSION, type FlowClaims, type RequestBinding, type StateClaims, isStateClaims } from './claims.js';
import { cryptoProvider } from '#crypto';
import {
  FlowExpiredError,
  QuotaExceededError,
  SealFailedError,
  FlowRoundsError,
  KeyUnknownError,
  MrtrError,
  PrincipalRequiredError,
  StateAudienceError,
  StateBindingError,
  StateExpiredError,
  StateMalformedError,
  StatePrincipalError,
  StateReplayedError,
  StateTooLargeError,
  StoreUnavailableError,
} from './errors.js';
import type { CodecFactory, ReplayStore, StateCodec } from './interfaces.js';
import type { Awaitable } from './crypto/types.js';
import { type EventHook, FLOW_ID_SINK, type GuardEvent, observeGuard } from './events.js';
import { assertJson, canonicalJson, timingSafeEqualText, utf8Encode } from './json.js';
import { KeyRing } from './keys.js';
import { type Admission, createOutcomes } from './outcomes.js';
import type { JsonValue } from './protocol.js';

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

/** Options of {@link createStateGuard}. Validated at construction (labelled `TypeError`/`RangeError`). */
export interface StateGuardOptions {
  /** The key ring: the codec is built on it and the principal tags are derived from it. */
  keys: KeyRing;
  /**
   * Seals and opens tokens: a codec factory such as `createHmacCodec`, called with `keys`. A codec
   * instance is accepted only when it was built on this same `keys` ring.
   */
  codec: CodecFactory | StateCodec;
  /** Makes each state single-use. Without it, a state can be replayed until it expires. */
  store?: ReplayStore | undefined;
  /** Who the states are for (e.g. the server's name or URL); a state from another audience is rejected. */
  audience: string;
  /** Lifetime of one round's state. @default 600_000 (10 min) */
  ttlMs?: number;
  /** Absolute lifetime of a whole flow, fixed at round 1. @default 1_800_000 (30 min) */
  flowTtlMs?: number;
  /** Most rounds (states minted) in one flow. @default 8 */
  maxRounds?: number;
  /** Tolerated clock difference between instances. @default 5_000 */
  clockSkewMs?: number;
  /** Size cap checked before any decoding. @default min(16 KiB, codec.maxTokenBytes) */
  maxTokenBytes?: number;
  /** Reads the principal from a request. @default (req) => req.principal */
  principal?: (request: RequestContext) => string | undefined;
  /**
   * Requests without a principal: `'reject'` throws `ERR_PRINCIPAL_REQUIRED`; `{ principal }` gives them
   * one fixed identity in a namespace of its own (no authenticated principal can ever share its states).
   * @default 'reject'
   */
  unauthenticated?: 'reject' | { principal: string };
  /** Per-principal bound on minting (no single principal can fill a bounded store others depend on). @default none */
  mintQuota?: MintQuota | undefined;
  /**
   * How long `admit`/`claim` waits for the first attempt of a round when an identical retry arrives while it is
   * still running (locally: until it records; on another instance: polling the store), before
   * `ERR_ROUND_IN_PROGRESS`. @default 10_000
   */
  retryWaitMs?: number;
  /** Clock in ms since the epoch. @default Date.now */
  now?: () => number;
  /**
   * Called synchronously with one typed event per step (state minted/opened/rejected, store error, flow started).
   * A throw or a rejected promise is swallowed; queue slow or async work yourself. Without it, nothing is wrapped.
   */
  onEvent?: EventHook<GuardEvent> | undefined;
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
  readonly codec: StateCodec;
  readonly store: ReplayStore | undefined;
  readonly maxTokenBytes: number;
  readonly maxRounds: number;
  /** Seals `data` for `request` (a new flow, or the next round of `options.continues`). */
  mint<P extends JsonValue>(data: P, request: RequestContext, options?: MintOptions): Promise<string>;
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
  claim<P extends JsonValue = JsonValue>(state: OpenedState<P>, answers: JsonValue): Promise<Admission<OpenedState<P>>>;
  /** `verify`, then `claim`. */
  admit<P extends JsonValue = JsonValue>(token: unknown, request: RequestContext, answers: JsonValue): Promise<Admission<OpenedState<P>>>;
  /** The binding of a request (method, target, arguments digest). */
  bind(request: RequestContext): Promise<RequestBinding>;
}

const PRINCIPAL_PURPOSE = 'mrtr/principal-tag/v1';
/** Principal tags remembered per guard (the oldest is dropped first): a bound whatever principals a server sees. */
const PRINCIPAL_TAGS_CACHED = 1024;
/** Principals longer than this are tagged on every call, never remembered (bounds the cache's memory). */
const PRINCIPAL_TAG_CACHE_MAX_CHARS = 256;
const DEFAULT_MAX_TOKEN_BYTES = 16 * 1024;

function intOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new TypeError(`createStateGuard: ${name} must be an integer`);
  if (value < min || value > max) throw new RangeError(`createStateGuard: ${name} must be between ${min} and ${max}`);
  return value;
}

const YEAR_MS = 365 * 86_400_000;

/**
 * Composes a codec, an optional replay store and policy. `open` checks, in this order: size cap
 * (before any decoding), integrity, expiry/iat, audience, principal, request binding, flow
 * deadline/round, then single use through the store. Nothing is accepted on a store error.
 */
export function createStateGuard(options: StateGuardOptions): StateGuard {
  if (options === null || typeof options !== 'object') throw new TypeError('createStateGuard: options must be an object');
  const { keys, store, audience } = options;
  if (!(keys instanceof KeyRing)) throw new TypeError('createStateGuard: keys must be a KeyRing');
  const codec = buildCodec(options.codec, keys);
  if (store !== undefined && (store === null || typeof store.consume !== 'function')) {
    throw new TypeError('createStateGuard: store must implement ReplayStore');
  }
  if (typeof audience !== 'string' || audience.length === 0 || audience.length > 4096) {
    throw new TypeError('createStateGuard: audience must be a non-empty string');
  }
  const ttlMs = intOption('ttlMs', options.ttlMs, 600_000, 1, YEAR_MS);
  const flowTtlMs = intOption('flowTtlMs', options.flowTtlMs, 1_800_000, 1, YEAR_MS);
  const maxRounds = intOption('maxRounds', options.maxRounds, 8, 1, 1000);
  const clockSkewMs = intOption('clockSkewMs', options.clockSkewMs, 5_000, 0, 600_000);
  const codecMax = codec.maxTokenBytes;
  if (typeof codecMax !== 'number' || !(codecMax > 0)) throw new TypeError('createStateGuard: codec.maxTokenBytes must be positive');
  const maxTokenBytes = intOption(
    'maxTokenBytes',
    options.maxTokenBytes,
    Math.min(DEFAULT_MAX_TOKEN_BYTES, codecMax),
    1,
    codecMax,
  );
  const readPrincipal = options.principal ?? ((req: RequestContext) => req.principal);
  if (typeof readPrincipal !== 'function') throw new TypeError('createStateGuard: principal must be a function');
  const unauthenticated = options.unauthenticated ?? 'reject';
  if (
    unauthenticated !== 'reject' &&
    (unauthenticated === null ||
      typeof unauthenticated !== 'object' ||
      typeof unauthenticated.principal !== 'string' ||
      unauthenticated.principal === '')
  ) {
    throw new TypeError('createStateGuard: unauthenticated must be "reject" or { principal: string }');
  }
  const quota = options.mintQuota === undefined ? undefined : createQuota(options.mintQuota, ttlMs + 2 * clockSkewMs);
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createStateGuard: now must be a function');
  const retryWaitMs = intOption('retryWaitMs', options.retryWaitMs, 10_000, 0, 600_000);
  if (store !== undefined && (typeof store.claim === 'function') !== (typeof store.record === 'function')) {
    throw new TypeError('createStateGuard: a store implements claim and record, both or neither');
  }
  const { onEvent } = options;
  if (onEvent !== undefined && typeof onEvent !== 'function') throw new TypeError('createStateGuard: onEvent must be a function');

  /** The principal as a namespaced identity: authenticated and unauthenticated ones can never collide. */
  const principalOf = (request: RequestContext): [namespace: 'p' | 'u', name: string] => {
    const principal = readPrincipal(request);
    if (principal === undefined || principal === null || principal === '') {
      if (unauthenticated === 'reject') throw new PrincipalRequiredError();
      return ['u', unauthenticated.principal];
    }
    if (typeof principal !== 'string') throw new TypeError('createStateGuard: principal() must return a string');
    return ['p', principal];
  };

  // principal → { kid, namespace, base64url tag }: an HMAC each guard would otherwise recompute on every
  // mint and open. A pure function of (kid, namespace, principal), all three compared on a hit, so
  // remembering it changes no answer; bounded in entries (oldest dropped first) and in the length of a
  // remembered principal.
  const tags = new Map<string, { kid: string; namespace: string; tag: string }>();
  const remember = (kid: string, principal: [string, string], tag: string): string => {
    if (!tags.has(principal[1]) && tags.size >= PRINCIPAL_TAGS_CACHED) tags.delete(tags.keys().next().value!);
    tags.set(principal[1], { kid, namespace: principal[0], tag });
    return tag;
  };
  const tagText = (mac: Uint8Array): string => cryptoProvider.base64urlEncode(mac.subarray(0, 16));
  const computeTag = (key: Uint8Array, principal: [string, string]): Awaitable<string> => {
    // JSON framing keeps audience, namespace and name apart whatever characters they hold.
    const mac = cryptoProvider.hmacSha256(key, utf8Encode(canonicalJson([audience, principal[0], principal[1]])));
    return mac instanceof Promise ? mac.then(tagText) : tagText(mac);
  };
  /** The principal tag (base64url of 16 bytes) under key `kid`. */
  const principalTag = (kid: string, principal: [string, string]): Awaitable<string> => {
    const cacheable = principal[1].length <= PRINCIPAL_TAG_CACHE_MAX_CHARS;
    if (cacheable) {
      const known = tags.get(principal[1]);
      if (known !== undefined && known.kid === kid && known.namespace === principal[0]) return known.tag;
    }
    const key = keys.subkey(kid, PRINCIPAL_PURPOSE);
    if (key === undefined) throw new KeyUnknownError();
    const tag = key instanceof Promise ? key.then((k) => computeTag(k, principal)) : computeTag(key, principal);
    if (!cacheable) return tag;
    return tag instanceof Promise ? tag.then((t) => remember(kid, principal, t)) : remember(kid, principal, tag);
  };

  const bindNow = (request: RequestContext): Awaitable<RequestBinding> => {
    if (request === null || typeof request !== 'object') throw new TypeError('request must be an object');
    const { method, target } = request;
    if (typeof method !== 'string' || typeof target !== 'string') {
      throw new TypeError('request.method and request.target must be strings');
    }
    const digest = cryptoProvider.sha256Text(canonicalJson(request.arguments ?? {}));
    return digest instanceof Promise ? digest.then((d) => ({ m: method, t: target, d })) : { m: method, t: target, d: digest };
  };
  const bind = async (request: RequestContext): Promise<RequestBinding> => bindNow(request);

  // The ledger entry must outlive every instance's view of the token's validity: an instance accepts
  // until its own clock passes exp + skew, and its clock may lag the store's by up to the skew.
  const ledger = (state: { claims: StateClaims }) => ({
    id: `${state.claims.aud}:${state.claims.jti}`,
    expiresAtMs: state.claims.exp + 2 * clockSkewMs,
  });
  const consume = async (state: OpenedState): Promise<void> => {
    if (store === undefined) return;
    let first: boolean;
    try {
      const { id, expiresAtMs } = ledger(state);
      first = await store.consume(id, expiresAtMs);
    } catch (cause) {
      if (MrtrError.is(cause)) throw cause;
      throw new StoreUnavailableError({ cause });
    }
    if (first !== true) throw new StateReplayedError();
  };
  const claim = createOutcomes({ store, codec, audience, ledger, consume, now, retryWaitMs }) as StateGuard['claim'];

  const verify = async <P extends JsonValue>(token: unknown, request: RequestContext): Promise<OpenedState<P>> => {
    // 1. size cap, before any decoding (string length ≥ UTF-8 byte length for ASCII; non-ASCII is malformed anyway)
    if (typeof token !== 'string' || token.length === 0) throw new StateMalformedError();
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    // 2. integrity (the codec)
    let opened: Awaited<ReturnType<StateCodec['open']>>;
    try {
      const result = codec.open(token);
      opened = isThenable(result) ? await result : result;
    } catch (cause) {
      if (MrtrError.is(cause)) throw cause;
      throw new StateMalformedError({ cause });
    }
    const { claims, kid } = opened;
    if (!isStateClaims(claims) || typeof kid !== 'string') throw new StateMalformedError();
    // 3. expiry and issue time
    const t = now();
    if (t > claims.exp + clockSkewMs || claims.iat > t + clockSkewMs || claims.exp < claims.iat) {
      throw new StateExpiredError();
    }
    // 4. audience
    if (claims.aud !== audience) throw new StateAudienceError();
    // 5. principal
    // (Canonical base64url has one text per byte string: comparing texts is comparing the decoded tags.)
    const tag = principalTag(kid, principalOf(request));
    if (!timingSafeEqualText(claims.sub, typeof tag === 'string' ? tag : await tag)) throw new StatePrincipalError();
    // 6. request binding
    const bound = bindNow(request);
    const binding = bound instanceof Promise ? await bound : bound;
    if (claims.req.m !== binding.m || claims.req.t !== binding.t || claims.req.d !== binding.d) {
      throw new StateBindingError();
    }
    // 7. flow deadline and round
    if (t > claims.flow.deadline + clockSkewMs) throw new FlowExpiredError();
    if (claims.flow.round > maxRounds) throw new FlowRoundsError();
    return { claims: claims as StateClaims<P>, data: claims.data as P, flow: claims.flow, kid };
  };

  const guard: StateGuard = {
    codec,
    store,
    maxTokenBytes,
    maxRounds,
    bind,
    verify,
    consume,
    claim,
    async admit<P extends JsonValue>(token: unknown, request: RequestContext, answers: JsonValue) {
      return claim(await verify<P>(token, request), answers);
    },
    async open<P extends JsonValue>(token: unknown, request: RequestContext): Promise<OpenedState<P>> {
      const state = await verify<P>(token, request);
      // 8. single use
      if (store !== undefined) await consume(state);
      return state;
    },
    async mint<P extends JsonValue>(data: P, request: RequestContext, mintOptions?: MintOptions): Promise<string> {
      const principal = principalOf(request);
      const t = now();
      const previous = mintOptions?.continues;
      let flow: FlowClaims;
      if (previous === undefined) {
        flow = { id: cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(16)), round: 1, deadline: t + flowTtlMs };
      } else {
        flow = { id: previous.flow.id, round: previous.flow.round + 1, deadline: previous.flow.deadline };
        if (flow.round > maxRounds) throw new FlowRoundsError();
        if (t > flow.deadline) throw new FlowExpiredError();
      }
      // Validates that `data` is JSON (throws TypeError otherwise) before sealing.
      assertJson(data);
      const kid = keys.primaryKid;
      const tag = principalTag(kid, principal);
      const sub = typeof tag === 'string' ? tag : await tag;
      const bound = bindNow(request);
      const req = bound instanceof Promise ? await bound : bound;
      const claims: StateClaims<P> = {
        v: CLAIMS_VERSION,
        iat: t,
        // Not capped at the flow deadline: open checks the deadline itself and reports ERR_FLOW_EXPIRED.
        exp: t + ttlMs,
        jti: cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(16)),
        aud: audience,
        sub,
        req,
        flow,
        data,
      };
      if (quota !== undefined && !quota.take(claims.sub, t)) throw new QuotaExceededError();
      let token: string;
      try {
        token = await codec.seal(claims);
      } catch (cause) {
        // The data is JSON (checked above): a codec that still refuses it (a lone surrogate for a codec
        // that needs well-formed strings, a state past its size cap) is a server-side fault.
        if (MrtrError.is(cause) && cause.code !== 'ERR_STATE_TOO_LARGE') throw cause;
        throw new SealFailedError({ cause });
      }
      if (token.length > maxTokenBytes) throw new SealFailedError({ cause: new StateTooLargeError() });
      (mintOptions as { [FLOW_ID_SINK]?: (id: string) => void } | undefined)?.[FLOW_ID_SINK]?.(flow.id);
      return token;
    },
  };
  return onEvent === undefined ? guard : observeGuard(guard, keys, onEvent);
}

const isThenable = <T>(value: T | PromiseLike<T>): value is PromiseLike<T> =>
  typeof (value as { then?: unknown } | null)?.then === 'function';

function buildCodec(codec: unknown, keys: KeyRing): StateCodec {
  let built: unknown = codec;
  if (typeof codec === 'function') {
    built = (codec as CodecFactory)(keys);
  } else if (codec !== null && typeof codec === 'object' && (codec as Partial<StateCodec>).keys !== keys) {
    throw new TypeError(
      'createStateGuard: the codec was built on another KeyRing; pass its factory (e.g. codec: createHmacCodec) so one ring feeds both',
    );
  }
  const c = built as Partial<StateCodec> | null;
  if (c === null || typeof c !== 'object' || typeof c.seal !== 'function' || typeof c.open !== 'function') {
    throw new TypeError('createStateGuard: codec must be a codec factory or a StateCodec');
  }
  if (c.keys !== keys) throw new TypeError('createStateGuard: the codec factory returned a codec built on another KeyRing');
  return c as StateCodec;
}

/** Sub-windows of a mint quota's window: its memory per principal and its slack (a place frees up to H / this late). */
const QUOTA_SUB_WINDOWS = 10;

/** Sliding-window counters per principal tag (see {@link MintQuota}), bounded in the number of principals. */
function createQuota(options: MintQuota, lifetimeMs: number): { take(principal: string, t: number): boolean } {
  if (options === null || typeof options !== 'object') throw new TypeError('createStateGuard: mintQuota must be an object');
  if (options.max === undefined) throw new TypeError('createStateGuard: mintQuota needs max');
  const max = intOption('mintQuota.max', options.max, 0, 1, 1_000_000_000);
  const windowMs = intOption('mintQuota.windowMs', options.windowMs, lifetimeMs, 1, YEAR_MS);
  const maxPrincipals = intOption('mintQuota.maxPrincipals', options.maxPrincipals, 100_000, 1, 100_000_000);
  // H: the window, never shorter than a state's lifetime, so that `max` also bounds the states alive at once.
  const span = Math.max(windowMs, lifetimeMs);
  // Sub-window j covers [j·width, (j+1)·width). A mint at t counts every sub-window from floor((t − H) / width)
  // to floor(t / width): all mints at t' ≥ t − H (and some a little older). That is at most
  // ceil(H / width) + 1 ≤ SLOTS sub-windows, kept in a ring of SLOTS counters indexed by j mod SLOTS.
  const width = Math.ceil(span / QUOTA_SUB_WINDOWS);
  const SLOTS = QUOTA_SUB_WINDOWS + 1;
  const slot = (j: number): number => ((j % SLOTS) + SLOTS) % SLOTS;
  interface Entry {
    /** The newest sub-window with a mint (counters of later ones are 0). */
    last: number;
    counts: number[];
  }
  // Insertion order is last-mint order (an entry moves to the end when it mints), so principals with nothing
  // left in the window are dropped from the front in time proportional to what is dropped.
  const entries = new Map<string, Entry>();
  return {
    take(principal, t) {
      if (!Number.isFinite(t)) return false;
      const oldest = Math.floor((t - span) / width);
      let entry = entries.get(principal);
      if (entry === undefined) {
        if (entries.size >= maxPrincipals) {
          for (const [key, old] of entries) {
            if (old.last >= oldest) break;
            entries.delete(key);
          }
          if (entries.size >= maxPrincipals) return false;
        }
        entry = { last: Number.NEGATIVE_INFINITY, counts: new Array<number>(SLOTS).fill(0) };
      }
      const { counts } = entry;
      // A clock that went back counts as standing still: never earlier than the newest mint.
      const current = Math.max(Math.floor(t / width), entry.last);
      let used = 0;
      for (let j = Math.max(oldest, entry.last - SLOTS + 1); j <= entry.last; j++) used += counts[slot(j)]!;
      if (used >= max) return false;
      if (current > entry.last) {
        // Clear the slots of the sub-windows between the newest mint and now (they held older sub-windows).
        const from = Math.max(entry.last + 1, current - SLOTS + 1);
        for (let j = from; j <= current; j++) counts[slot(j)] = 0;
        entry.last = current;
      }
      counts[slot(current)]!++;
      entries.delete(principal);
      entries.set(principal, entry);
      return true;
    },
  };
}

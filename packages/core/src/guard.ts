import { cryptoProvider } from '#crypto';
import { CLAIMS_VERSION, type FlowClaims, type RequestBinding, type StateClaims, isStateClaims } from './claims.js';
import { type Awaitable, andThen } from './crypto/awaitable.js';
import {
  FlowExpiredError,
  FlowRoundsError,
  MrtrError,
  type MrtrErrorCode,
  QuotaExceededError,
  SealFailedError,
  StateAudienceError,
  StateBindingError,
  StateExpiredError,
  StateMalformedError,
  StatePrincipalError,
  StateReplayedError,
  StateTooLargeError,
  StoreUnavailableError,
} from './errors.js';
import { checkFleetKeys } from './fleet.js';
import { parseGuardOptions } from './guard-options.js';
import type { GuardRequest, MintedState, MintOptions, OpenedState, RequestContext, StateGuard, StateGuardOptions } from './guard-types.js';
import { assertJson, canonicalJson, timingSafeEqualText } from './json.js';
import { type Admission, createOutcomes } from './outcomes.js';
import type { GuardEvent } from './events.js';
import { type Principal, createPrincipalTagger, principalPolicy } from './principal.js';
import type { OpenedToken, StateCodec } from './interfaces.js';
import type { KeyRing } from './keys.js';
import type { JsonValue } from './protocol.js';

export type {
  GuardRequest,
  MintedState,
  MintOptions,
  MintQuota,
  OpenedState,
  RequestContext,
  StateGuard,
  StateGuardOptions,
} from './guard-types.js';

/**
 * One request as the guard sees it: its principal (the policy applied once) and its binding (the arguments
 * digested once), computed on first use and shared by every open and mint of the request.
 */
interface Scope {
  readonly request: RequestContext;
  who: Principal | undefined;
  binding: Awaitable<RequestBinding> | undefined;
}

const elapsed = (start: number): number => performance.now() - start;
const codeOf = (error: unknown): MrtrErrorCode | undefined => (MrtrError.is(error) ? error.code : undefined);

/**
 * Composes a codec, an optional replay store and policy. `open` checks, in this order: size cap
 * (before any decoding), integrity, expiry/iat, audience, principal, request binding, flow
 * deadline/round, then single use through the store. Nothing is accepted on a store error.
 * With `onEvent`, the guard reports each step itself (see {@link GuardEvent}); without it no event is built.
 */
export function createStateGuard(options: StateGuardOptions): StateGuard {
  const parsed = parseGuardOptions(options);
  const { keys, codecFor, store, audience, ttlMs, flowTtlMs, maxRounds, clockSkewMs, maxTokenBytes, quota, now, retryWaitMs, events } =
    parsed;
  const { unauthenticated, recordUnauthenticated, outcomeQuota, waiting } = parsed;
  const principalOf = principalPolicy(parsed.readPrincipal, parsed.unauthenticated);
  const principalTag = createPrincipalTagger(keys, audience);

  // The ring in force and its codec. A fixed ring is its own `current()`: the view never changes. A refreshing ring
  // gives a new ring when its keys or its schedule change, and only then is the codec rebuilt (no allocation per
  // operation otherwise). One operation reads the view once, so a mint seals with the key its principal tag names.
  let view: { readonly ring: KeyRing; readonly codec: StateCodec } = { ring: parsed.codec.keys, codec: parsed.codec };
  const viewNow = (): { readonly ring: KeyRing; readonly codec: StateCodec } => {
    const ring = keys.current();
    if (ring !== view.ring) view = { ring, codec: codecFor(ring) };
    return view;
  };
  const first = parsed.codec;
  const codec: StateCodec = keys.refreshing
    ? Object.freeze({
        id: first.id,
        confidential: first.confidential,
        maxTokenBytes: first.maxTokenBytes,
        keys,
        seal: (claims: StateClaims) => viewNow().codec.seal(claims),
        unseal: (token: string) => viewNow().codec.unseal(token),
      })
    : first;

  const bindNow = (request: RequestContext): Awaitable<RequestBinding> => {
    if (request === null || typeof request !== 'object') throw new TypeError('request must be an object');
    const { method, target } = request;
    if (typeof method !== 'string' || typeof target !== 'string') {
      throw new TypeError('request.method and request.target must be strings');
    }
    return andThen(cryptoProvider.sha256Text(canonicalJson(request.arguments ?? {})), (d) => ({ m: method, t: target, d }));
  };
  const bind = async (request: RequestContext): Promise<RequestBinding> => bindNow(request);

  const scopeOf = (request: RequestContext): Scope => ({ request, who: undefined, binding: undefined });
  // The principal policy and the binding run at most once per request, whatever opens and mints it does.
  const whoIn = (scope: Scope): Principal => (scope.who ??= principalOf(scope.request));
  const bindingIn = (scope: Scope): Awaitable<RequestBinding> => (scope.binding ??= bindNow(scope.request));

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
  // Outcomes are kept for every principal but the shared unauthenticated one (unless opted in): its tag under the
  // state's key tells it (cached by the tagger).
  const anonymous: Principal | undefined =
    unauthenticated === 'reject' || recordUnauthenticated ? undefined : ['u', unauthenticated.principal];
  const recordable = (state: OpenedState): Awaitable<boolean> =>
    anonymous === undefined ? true : andThen(principalTag(state.kid, anonymous), (tag) => !timingSafeEqualText(state.claims.sub, tag));
  const claim = createOutcomes({
    store,
    codec,
    audience,
    ledger,
    consume,
    now,
    retryWaitMs,
    recordable,
    budget: outcomeQuota,
    waiting,
  }) as StateGuard['claim'];

  /** A codec's failure as the guard reports it: its `MrtrError`, anything else `ERR_STATE_MALFORMED`. */
  const unsealFailure = (cause: unknown): never => {
    if (MrtrError.is(cause)) throw cause;
    throw new StateMalformedError({ cause });
  };
  /** A seal that fails for valid JSON data (a lone surrogate for some codecs, a state past the cap) is a server fault. */
  const sealFailure = (cause: unknown): never => {
    if (MrtrError.is(cause) && cause.code !== 'ERR_STATE_TOO_LARGE') throw cause;
    throw new SealFailedError({ cause });
  };

  /**
   * Every check of a state but single use. Synchronous when the codec and the crypto are (Node), a promise
   * otherwise: the steps are composed with `andThen`, and the operations await the result once.
   */
  const verifyNow = <P extends JsonValue>(scope: Scope, token: unknown): Awaitable<OpenedState<P>> => {
    // 1. size cap, before any decoding (string length ≥ UTF-8 byte length for ASCII; non-ASCII is malformed anyway)
    if (typeof token !== 'string' || token.length === 0) throw new StateMalformedError();
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    // 2. integrity (the codec)
    let unsealed: Awaitable<OpenedToken>;
    try {
      unsealed = viewNow().codec.unseal(token);
    } catch (cause) {
      return unsealFailure(cause);
    }
    return andThen(unsealed, (opened) => checkClaims<P>(scope, opened), unsealFailure);
  };

  /** Steps 3 to 7 of {@link verifyNow}, on what the codec unsealed. */
  const checkClaims = <P extends JsonValue>(scope: Scope, opened: OpenedToken): Awaitable<OpenedState<P>> => {
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
    return andThen(principalTag(kid, whoIn(scope)), (tag) => {
      if (!timingSafeEqualText(claims.sub, tag)) throw new StatePrincipalError();
      // 6. request binding
      return andThen(bindingIn(scope), (binding): OpenedState<P> => {
        if (claims.req.m !== binding.m || claims.req.t !== binding.t || claims.req.d !== binding.d) {
          throw new StateBindingError();
        }
        // 7. flow deadline and round
        if (t > claims.flow.deadline + clockSkewMs) throw new FlowExpiredError();
        if (claims.flow.round > maxRounds) throw new FlowRoundsError();
        return { claims: claims as StateClaims<P>, data: claims.data as P, flow: claims.flow, kid };
      });
    });
  };

  /**
   * Seals the next state; `out` shapes the answer (the token alone for `mint`, with its flow for `mintFlow`).
   * Synchronous when the codec and the crypto are, like {@link verifyNow}.
   */
  const mintNow = <P extends JsonValue, R>(
    scope: Scope,
    data: P,
    mintOptions: MintOptions | undefined,
    out: (token: string, flow: FlowClaims, kid: string) => R,
  ): Awaitable<R> => {
    const principal = whoIn(scope);
    // One view for the whole mint: the principal tag is keyed by the kid the codec seals with.
    const { ring, codec: sealer } = viewNow();
    const kid = ring.primaryKid;
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
    const checkSealed = (token: string): R => {
      if (token.length > maxTokenBytes) throw new SealFailedError({ cause: new StateTooLargeError() });
      return out(token, flow, kid);
    };
    return andThen(principalTag(kid, principal), (sub) =>
      andThen(bindingIn(scope), (req) => {
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
        let sealed: Awaitable<string>;
        try {
          sealed = sealer.seal(claims);
        } catch (cause) {
          // The data is JSON (checked above): see sealFailure.
          return sealFailure(cause);
        }
        return andThen(sealed, checkSealed, sealFailure);
      }),
    );
  };
  const withFlow = (token: string, flow: FlowClaims): MintedState => ({ token, flow });
  const withKid = (token: string, flow: FlowClaims, kid: string) => ({ token, flow, kid });
  const tokenOnly = (token: string): string => token;

  /** The single-use step of an operation: none (`verify`), `consume`, or `claim` (admit, with the answers). */
  type Single = 'verify' | 'consume' | 'claim';
  const codecId = codec.id;
  const emit = events?.emit;
  const base = (request: RequestContext) => ({ method: request?.method, target: request?.target, codec: codecId });

  /** A store step (`consume`, `claim`, an admission's `record`) timed; reports `store.error` on a store failure. */
  const storeStep = async <T>(step: () => Promise<T>, state: OpenedState, request: RequestContext, flow: string): Promise<[T, number]> => {
    const start = performance.now();
    try {
      return [await step(), elapsed(start)];
    } catch (error) {
      const code = codeOf(error);
      if (emit !== undefined && code !== undefined && code !== 'ERR_STATE_REPLAYED' && code !== 'ERR_ROUND_IN_PROGRESS') {
        emit({ type: 'store.error', ...base(request), code, flow, round: state.flow.round + 1, kid: state.kid, storeMs: elapsed(start) });
      }
      throw error;
    }
  };

  /** Reports a refusal (an `MrtrError`) as `state.rejected`, with what is known of the state. */
  const rejected = async (
    error: unknown,
    request: RequestContext,
    operation: 'open' | 'mint',
    start: number,
    token: unknown,
    state: OpenedState | undefined,
  ): Promise<void> => {
    const code = codeOf(error);
    if (events === undefined || code === undefined) return;
    const durationMs = elapsed(start);
    const known = state === undefined ? {} : { flow: await events.flowTag(state.flow.id), round: state.flow.round + 1, kid: state.kid };
    const tokenBytes = typeof token === 'string' ? token.length : undefined;
    events.emit({ type: 'state.rejected', ...base(request), ...known, code, operation, tokenBytes, durationMs });
  };

  /**
   * Every open of a state: the checks (1–7), then its single-use step (8): none, `consume`, or `claim`. With
   * `onEvent`, each step is reported; without it no event is built and nothing is timed.
   */
  const openIn = async (
    scope: Scope,
    token: unknown,
    single: Single,
    answers?: JsonValue,
  ): Promise<OpenedState | Admission<OpenedState>> => {
    const { request } = scope;
    if (events === undefined) {
      const state = await verifyNow(scope, token);
      if (single === 'claim') return claim(state, answers ?? null);
      if (single === 'consume' && store !== undefined) await consume(state);
      return state;
    }
    const start = performance.now();
    let state: OpenedState | undefined;
    try {
      state = await verifyNow(scope, token);
      const flow = await events.flowTag(state.flow.id);
      const at = { ...base(request), flow, round: state.flow.round + 1, kid: state.kid, tokenBytes: (token as string).length };
      const opened = state;
      // 8. single use
      if (single === 'claim') {
        const [admission, storeMs] = await storeStep(() => claim(opened, answers ?? null), opened, request, flow);
        if (admission.replay) {
          events.emit({ type: 'state.retried', ...at, durationMs: elapsed(start), storeMs });
          return admission;
        }
        events.emit({ type: 'state.opened', ...at, durationMs: elapsed(start), ...(store !== undefined && { storeMs }) });
        return {
          state: admission.state,
          replay: false,
          record: async (outcome: JsonValue) => (await storeStep(() => admission.record(outcome), opened, request, flow))[0],
        } satisfies Admission<OpenedState>;
      }
      const storeMs =
        single === 'consume' && store !== undefined ? (await storeStep(() => consume(opened), opened, request, flow))[1] : undefined;
      events.emit({ type: 'state.opened', ...at, durationMs: elapsed(start), ...(storeMs !== undefined && { storeMs }) });
      return state;
    } catch (error) {
      await rejected(error, request, 'open', start, token, state);
      throw error;
    }
  };

  /** Every mint: the next state sealed, and with `onEvent` reported (`flow.started` in round 1, `state.minted`). */
  const mintIn = async <P extends JsonValue>(scope: Scope, data: P, mintOptions?: MintOptions): Promise<MintedState> => {
    if (events === undefined) return mintNow(scope, data, mintOptions, withFlow);
    const { request } = scope;
    const start = performance.now();
    let minted: { token: string; flow: FlowClaims; kid: string };
    try {
      minted = await mintNow(scope, data, mintOptions, withKid);
    } catch (error) {
      await rejected(error, request, 'mint', start, undefined, mintOptions?.continues);
      throw error;
    }
    const durationMs = elapsed(start);
    const { round } = minted.flow;
    const flow = await events.flowTag(minted.flow.id);
    const { kid } = minted;
    if (round === 1) events.emit({ type: 'flow.started', ...base(request), flow, round: 1, kid });
    events.emit({ type: 'state.minted', ...base(request), flow, round, kid, tokenBytes: minted.token.length, durationMs });
    return { token: minted.token, flow: minted.flow };
  };
  /** `mint` answers the token alone: without events, sealed without building the flow's answer object. */
  const mintTokenIn = async <P extends JsonValue>(scope: Scope, data: P, mintOptions?: MintOptions): Promise<string> =>
    events === undefined ? mintNow(scope, data, mintOptions, tokenOnly) : (await mintIn(scope, data, mintOptions)).token;

  return {
    codec,
    store,
    maxTokenBytes,
    maxRounds,
    checkKeys: () => checkFleetKeys(keys, store, { now: now(), lifetimeMs: ttlMs + 2 * clockSkewMs }),
    bind,
    consume,
    claim,
    open<P extends JsonValue>(token: unknown, request: RequestContext) {
      return openIn(scopeOf(request), token, 'consume') as Promise<OpenedState<P>>;
    },
    verify<P extends JsonValue>(token: unknown, request: RequestContext) {
      return openIn(scopeOf(request), token, 'verify') as Promise<OpenedState<P>>;
    },
    admit<P extends JsonValue>(token: unknown, request: RequestContext, answers: JsonValue) {
      return openIn(scopeOf(request), token, 'claim', answers) as Promise<Admission<OpenedState<P>>>;
    },
    mint<P extends JsonValue>(data: P, request: RequestContext, mintOptions?: MintOptions): Promise<string> {
      return mintTokenIn(scopeOf(request), data, mintOptions);
    },
    mintFlow<P extends JsonValue>(data: P, request: RequestContext, mintOptions?: MintOptions): Promise<MintedState> {
      return mintIn(scopeOf(request), data, mintOptions);
    },
    forRequest(request: RequestContext): GuardRequest {
      const scope = scopeOf(request);
      whoIn(scope);
      return {
        request,
        open: <P extends JsonValue>(token: unknown) => openIn(scope, token, 'consume') as Promise<OpenedState<P>>,
        verify: <P extends JsonValue>(token: unknown) => openIn(scope, token, 'verify') as Promise<OpenedState<P>>,
        admit: <P extends JsonValue>(token: unknown, answers: JsonValue) =>
          openIn(scope, token, 'claim', answers) as Promise<Admission<OpenedState<P>>>,
        mint: <P extends JsonValue>(data: P, mintOptions?: MintOptions) => mintTokenIn(scope, data, mintOptions),
        mintFlow: <P extends JsonValue>(data: P, mintOptions?: MintOptions) => mintIn(scope, data, mintOptions),
      };
    },
  };
}

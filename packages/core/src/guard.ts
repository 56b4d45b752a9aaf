import { CLAIMS_VERSION, type FlowClaims, type RequestBinding, type StateClaims, isStateClaims } from './claims.js';
import { cryptoProvider } from './crypto/impl.js';
import {
  FlowExpiredError,
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
import type { ReplayStore, StateCodec } from './interfaces.js';
import { canonicalJson, timingSafeEqualBytes, utf8Encode } from './json.js';
import type { KeyRing } from './keys.js';
import type { JsonValue } from './protocol.js';

/** The request a state is minted for or presented with. */
export interface RequestContext {
  /** `tools/call`, `prompts/get` or `resources/read`. */
  method: string;
  /** Tool or prompt name, or resource URI. */
  target: string;
  /** The call's arguments (tool/prompt arguments; absent for resources). */
  arguments?: unknown;
  /** The authenticated principal, if any (see `StateGuardOptions.principal`). */
  principal?: string | undefined;
}

export interface StateGuardOptions {
  /** Seals and opens tokens. */
  codec: StateCodec;
  /** Keys for the principal tag (the codec has its own subkeys from the same ring). */
  keys: KeyRing;
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
  /** Allow requests without a principal (one shared "anonymous" identity). @default false */
  allowAnonymous?: boolean;
  /** Clock in ms since the epoch. @default Date.now */
  now?: () => number;
}

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
  /** The binding of a request (method, target, arguments digest). */
  bind(request: RequestContext): Promise<RequestBinding>;
}

const PRINCIPAL_PURPOSE = 'mrtr/principal-tag/v1';
const ANONYMOUS = '\u0000anonymous';
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
  const { codec, keys, store, audience } = options;
  if (!codec || typeof codec.seal !== 'function' || typeof codec.open !== 'function') {
    throw new TypeError('createStateGuard: codec must implement StateCodec');
  }
  if (!keys || typeof keys.subkey !== 'function') throw new TypeError('createStateGuard: keys must be a KeyRing');
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
  const allowAnonymous = options.allowAnonymous ?? false;
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createStateGuard: now must be a function');

  const principalOf = (request: RequestContext): string => {
    const principal = readPrincipal(request);
    if (principal === undefined || principal === null || principal === '') {
      if (!allowAnonymous) throw new PrincipalRequiredError();
      return ANONYMOUS;
    }
    if (typeof principal !== 'string') throw new TypeError('createStateGuard: principal() must return a string');
    return principal;
  };

  const principalTag = async (kid: string, principal: string): Promise<Uint8Array> => {
    const key = await keys.subkey(kid, PRINCIPAL_PURPOSE);
    if (key === undefined) throw new KeyUnknownError();
    const mac = await cryptoProvider.hmacSha256(key, utf8Encode(`${audience}\u0000${principal}`));
    return mac.subarray(0, 16);
  };

  const bind = async (request: RequestContext): Promise<RequestBinding> => {
    if (request === null || typeof request !== 'object') throw new TypeError('request must be an object');
    if (typeof request.method !== 'string' || typeof request.target !== 'string') {
      throw new TypeError('request.method and request.target must be strings');
    }
    const digest = await cryptoProvider.sha256(utf8Encode(canonicalJson(request.arguments ?? {})));
    return { m: request.method, t: request.target, d: cryptoProvider.base64urlEncode(digest) };
  };

  const consume = async (state: OpenedState): Promise<void> => {
    if (store === undefined) return;
    let first: boolean;
    try {
      // The ledger entry must outlive every instance's view of the token's validity: an instance accepts
      // until its own clock passes exp + skew, and its clock may lag the store's by up to the skew.
      first = await store.consume(`${state.claims.aud}:${state.claims.jti}`, state.claims.exp + 2 * clockSkewMs);
    } catch (cause) {
      if (MrtrError.is(cause)) throw cause;
      throw new StoreUnavailableError({ cause });
    }
    if (first !== true) throw new StateReplayedError();
  };

  const verify = async <P extends JsonValue>(token: unknown, request: RequestContext): Promise<OpenedState<P>> => {
    // 1. size cap, before any decoding (string length ≥ UTF-8 byte length for ASCII; non-ASCII is malformed anyway)
    if (typeof token !== 'string' || token.length === 0) throw new StateMalformedError();
    if (token.length > maxTokenBytes) throw new StateTooLargeError();
    // 2. integrity (the codec)
    let opened: Awaited<ReturnType<StateCodec['open']>>;
    try {
      opened = await codec.open(token);
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
    const expectedTag = await principalTag(kid, principalOf(request));
    const actualTag = cryptoProvider.base64urlDecode(claims.sub);
    if (actualTag === undefined || !timingSafeEqualBytes(actualTag, expectedTag)) throw new StatePrincipalError();
    // 6. request binding
    const binding = await bind(request);
    if (claims.req.m !== binding.m || claims.req.t !== binding.t || claims.req.d !== binding.d) {
      throw new StateBindingError();
    }
    // 7. flow deadline and round
    if (t > claims.flow.deadline + clockSkewMs) throw new FlowExpiredError();
    if (claims.flow.round > maxRounds) throw new FlowRoundsError();
    return { claims: claims as StateClaims<P>, data: claims.data as P, flow: claims.flow, kid };
  };

  return {
    codec,
    store,
    maxTokenBytes,
    maxRounds,
    bind,
    verify,
    consume,
    async open<P extends JsonValue>(token: unknown, request: RequestContext): Promise<OpenedState<P>> {
      const state = await verify<P>(token, request);
      // 8. single use
      await consume(state);
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
      canonicalJson(data);
      const kid = keys.primaryKid;
      const claims: StateClaims<P> = {
        v: CLAIMS_VERSION,
        iat: t,
        // Not capped at the flow deadline: open checks the deadline itself and reports ERR_FLOW_EXPIRED.
        exp: t + ttlMs,
        jti: cryptoProvider.base64urlEncode(cryptoProvider.randomBytes(16)),
        aud: audience,
        sub: cryptoProvider.base64urlEncode(await principalTag(kid, principal)),
        req: await bind(request),
        flow,
        data,
      };
      const token = await codec.seal(claims);
      if (token.length > maxTokenBytes) throw new StateTooLargeError();
      return token;
    },
  };
}

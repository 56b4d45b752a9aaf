import type { FlowClaims } from '../claims.js';
import { MrtrError, type MrtrErrorCode } from '../errors.js';
import type { EventSink, GuardEvent } from '../events.js';
import type { Verify } from './verify.js';
import { type KeyState, keyRefusal } from './key-state.js';
import { type Mint, tokenOnly, withFlow, withKid } from './mint.js';
import type { Scope } from './scope.js';
import type { Spend } from './spend.js';
import type { AdmitOptions, MintedState, MintOptions, OpenedState, RequestContext } from './types.js';
import type { ReplayStore } from '../interfaces.js';
import type { Admission, Dropped } from '../outcomes/outcomes.js';
import type { JsonValue } from '../protocol.js';

/** The single-use step of an open: none (`verify`), `consume`, or `claim` (admit, with the answers). */
export type Single = 'verify' | 'consume' | 'claim';

/** The operations of the guard on a request's scope, reported when `onEvent` is set. */
export interface GuardOperations {
  openIn(
    scope: Scope,
    token: unknown,
    single: Single,
    answers?: JsonValue,
    options?: AdmitOptions,
  ): Promise<OpenedState | Admission<OpenedState>>;
  mintIn<P extends JsonValue>(scope: Scope, data: P, mintOptions?: MintOptions): Promise<MintedState>;
  mintTokenIn<P extends JsonValue>(scope: Scope, data: P, mintOptions?: MintOptions): Promise<string>;
  /** A keyed first-round call claimed under (principal, target, key) for `ttlMs` (see `GuardRequest.claimKey`). */
  claimKeyIn(scope: Scope, key: string, ttlMs: number | undefined): Promise<Admission<OpenedState>>;
}

export interface OperationDeps {
  readonly verifyNow: Verify;
  readonly mintNow: Mint;
  readonly singleUse: Spend;
  /** The state a keyed call is claimed under. */
  readonly keyState: (scope: Scope, key: string, ttlMs: number | undefined) => Promise<KeyState>;
  /** The principal's tag for this instance's bounds (the outcome budget, waiting retries) of a verified state. */
  readonly holderOf: (state: OpenedState) => string;
  readonly store: ReplayStore | undefined;
  readonly codecId: string;
  readonly events: EventSink<GuardEvent> | undefined;
  /** The guard's clock (the time of a `round.unknown`). */
  readonly now: () => number;
}

const elapsed = (start: number): number => performance.now() - start;
/** The codes of a store's answers (a refusal), as opposed to its failures (`store.error`). */
const ANSWERED: ReadonlySet<MrtrErrorCode> = new Set<MrtrErrorCode>([
  'ERR_STATE_REPLAYED',
  'ERR_ROUND_IN_PROGRESS',
  'ERR_OUTCOME_UNKNOWN',
  'ERR_LEDGER_LOST',
  'ERR_CLOCK_SKEW',
  'ERR_IDEMPOTENCY_KEY_CONFLICT',
]);
const codeOf = (error: unknown): MrtrErrorCode | undefined => (MrtrError.is(error) ? error.code : undefined);

/** The event reports of the guard's operations: what every event carries, timed store steps, refusals. */
function createReports(events: EventSink<GuardEvent>, codecId: string, now: () => number) {
  const base = (request: RequestContext) => ({ method: request?.method, target: request?.target, codec: codecId });

  /** A store step (`consume`, `claim`, an admission's `record`) timed; reports `store.error` on a store failure. */
  const storeStep = async <T>(step: () => Promise<T>, state: OpenedState, request: RequestContext, flow: string): Promise<[T, number]> => {
    const start = performance.now();
    try {
      return [await step(), elapsed(start)];
    } catch (error) {
      const code = codeOf(error);
      // A store failure: not a refusal the store answered (replayed, in progress, outcome unknown, a lost ledger, an
      // expiry judged on its clock): those are state.rejected with their own code.
      if (code !== undefined && !ANSWERED.has(code)) {
        events.emit({
          type: 'store.error',
          ...base(request),
          code,
          flow,
          round: state.flow.round + 1,
          kid: state.kid,
          storeMs: elapsed(start),
        });
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
    if (code === undefined) return;
    const durationMs = elapsed(start);
    const known = state === undefined ? {} : { flow: await events.flowTag(state.flow.id), round: state.flow.round + 1, kid: state.kid };
    const tokenBytes = typeof token === 'string' ? token.length : undefined;
    events.emit({ type: 'state.rejected', ...base(request), ...known, code, operation, tokenBytes, durationMs });
    if (code === 'ERR_OUTCOME_UNKNOWN' && state !== undefined) {
      const { sub, iat } = state.claims;
      events.emit({ type: 'round.unknown', ...base(request), ...known, principal: sub, issuedAt: iat, at: now() } as GuardEvent);
    }
  };
  return { base, storeStep, rejected };
}

/** Without `onEvent`: the operations unreported, nothing built and nothing timed. */
function unreported({ verifyNow, mintNow, singleUse, holderOf, store, keyState }: OperationDeps): GuardOperations {
  return {
    async openIn(scope, token, single, answers, options) {
      const state = await verifyNow(scope, token);
      if (single === 'claim') return singleUse.claim(state, answers ?? null, holderOf(state), options);
      if (single === 'consume' && store !== undefined) await singleUse.consume(state);
      return state;
    },
    mintIn: async (scope, data, mintOptions) => mintNow(scope, data, mintOptions, withFlow),
    /** `mint` answers the token alone: sealed without building the flow's answer object. */
    mintTokenIn: async (scope, data, mintOptions) => mintNow(scope, data, mintOptions, tokenOnly),
    async claimKeyIn(scope, key, ttlMs) {
      const { state, holder, answers } = await keyState(scope, key, ttlMs);
      return singleUse.claim(state, answers, holder).catch(keyRefusal);
    },
  };
}

/**
 * With `onEvent`: each step reported (`state.opened`/`state.retried`/`state.rejected`/`store.error`,
 * `outcome.dropped`, `flow.started`/`state.minted`).
 */
function reported(deps: OperationDeps, events: EventSink<GuardEvent>): GuardOperations {
  const { verifyNow, mintNow, singleUse, holderOf, store, keyState } = deps;
  const { base, storeStep, rejected } = createReports(events, deps.codecId, deps.now);

  /**
   * The claim of an opened state (or a keyed call's), reported: `state.retried` for a replay, else `state.opened`,
   * its `record` timed and its dropped outcome told (`outcome.dropped`).
   */
  const claimed = async (
    opened: OpenedState,
    answers: JsonValue,
    holder: string,
    request: RequestContext,
    at: { flow: string; round: number; kid: string; tokenBytes: number; keyed?: true },
    start: number,
    options?: AdmitOptions,
  ): Promise<Admission<OpenedState>> => {
    const { flow } = at;
    const dropped: Dropped = (reason, outcomeBytes) =>
      events.emit({ type: 'outcome.dropped', ...base(request), flow, round: at.round, kid: opened.kid, reason, outcomeBytes });
    const claim = () => singleUse.claim(opened, answers, holder, options, dropped);
    // A keyed call's store errors are reported in round 1, like its other events.
    const shown = at.keyed ? { ...opened, flow: { ...opened.flow, round: 0 } } : opened;
    const [admission, storeMs] = await storeStep(at.keyed ? () => claim().catch(keyRefusal) : claim, shown, request, flow);
    const timing = { ...base(request), ...at, durationMs: elapsed(start) };
    if (admission.replay) {
      events.emit({ type: 'state.retried', ...timing, storeMs });
      return admission;
    }
    events.emit({ type: 'state.opened', ...timing, ...(store !== undefined && { storeMs }) });
    return {
      state: admission.state,
      replay: false,
      fence: admission.fence,
      record: async (outcome: JsonValue) => (await storeStep(() => admission.record(outcome), shown, request, flow))[0],
      release: admission.release,
    } satisfies Admission<OpenedState>;
  };

  /** Every open of a state: the checks (1–8), then its single-use step: none, `consume`, or `claim`. */
  const openIn = async (
    scope: Scope,
    token: unknown,
    single: Single,
    answers?: JsonValue,
    options?: AdmitOptions,
  ): Promise<OpenedState | Admission<OpenedState>> => {
    const { request } = scope;
    const start = performance.now();
    let state: OpenedState | undefined;
    try {
      state = await verifyNow(scope, token);
      const flow = await events.flowTag(state.flow.id);
      const at = { flow, round: state.flow.round + 1, kid: state.kid, tokenBytes: (token as string).length };
      const opened = state;
      // Single use (after check 8)
      if (single === 'claim') {
        return await claimed(opened, answers ?? null, holderOf(opened), request, at, start, options);
      }
      const storeMs =
        single === 'consume' && store !== undefined
          ? (await storeStep(() => singleUse.consume(opened), opened, request, flow))[1]
          : undefined;
      events.emit({ type: 'state.opened', ...base(request), ...at, durationMs: elapsed(start), ...(storeMs !== undefined && { storeMs }) });
      return state;
    } catch (error) {
      await rejected(error, request, 'open', start, token, state);
      throw error;
    }
  };

  /** Every mint: the next state sealed and reported (`flow.started` in round 1, `state.minted`). */
  const mintIn = async <P extends JsonValue>(scope: Scope, data: P, mintOptions?: MintOptions): Promise<MintedState> => {
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
  const mintTokenIn = async <P extends JsonValue>(scope: Scope, data: P, mintOptions?: MintOptions): Promise<string> =>
    (await mintIn(scope, data, mintOptions)).token;
  /**
   * A keyed first-round call: reported as a round 1 that presented no state (`keyed: true`, `tokenBytes` 0), its flow
   * tag the same for every call with the key; a refusal is `state.rejected` (`ERR_IDEMPOTENCY_KEY_CONFLICT`, …).
   */
  const claimKeyIn = async (scope: Scope, key: string, ttlMs: number | undefined): Promise<Admission<OpenedState>> => {
    const { request } = scope;
    const start = performance.now();
    let shown: OpenedState | undefined;
    try {
      const { state, holder, answers } = await keyState(scope, key, ttlMs);
      // Reported as the request that opens round 1 (the state's own round is 1, as every sealed state's).
      shown = { ...state, flow: { ...state.flow, round: 0 } };
      const flow = await events.flowTag(state.flow.id);
      return await claimed(state, answers, holder, request, { flow, round: 1, kid: state.kid, tokenBytes: 0, keyed: true }, start);
    } catch (error) {
      await rejected(error, request, 'open', start, undefined, shown);
      throw error;
    }
  };
  return { openIn, mintIn, mintTokenIn, claimKeyIn };
}

/**
 * Every open and mint of the guard on a request's scope: with `onEvent` each step is reported; without it no
 * event is built and nothing is timed.
 */
export const createOperations = (deps: OperationDeps): GuardOperations =>
  deps.events === undefined ? unreported(deps) : reported(deps, deps.events);

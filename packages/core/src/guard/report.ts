import type { Awaitable } from '../crypto/awaitable.js';
import { MrtrError, type MrtrErrorCode } from '../errors.js';
import type { EventSink, GuardEvent } from '../events.js';
import type { Dropped } from '../outcomes/types.js';
import type { GuardContext } from './context.js';
import type { KeyState } from './key-state.js';
import type { Scope } from './scope.js';
import { type Single, spendsInStore } from './spend.js';
import type { Admission, MintedState, OpenedState, RequestContext } from './types.js';

/** What a mint made, with the kid it was sealed under (what its events carry). */
export type Minted = MintedState & { readonly kid: string };

/**
 * The operations of the guard as reported with `onEvent`: each takes its steps (the checks, the single-use step, the
 * seal) from `operations.ts` and reports them: `state.opened`/`state.retried`/`state.rejected`/`store.error`,
 * `outcome.dropped`, `flow.started`/`state.minted`.
 */
export interface Report {
  /** An open: its checks (`verify`), then its single-use step (`spend`), timed when it calls the store. */
  open(
    scope: Scope,
    token: unknown,
    single: Single,
    verify: () => Awaitable<OpenedState>,
    spend: (state: OpenedState, dropped?: Dropped) => Awaitable<OpenedState | Admission<OpenedState>>,
  ): Promise<OpenedState | Admission<OpenedState>>;
  /** A mint: `minted` seals the next state; `out` shapes the answer. */
  mint<R>(
    scope: Scope,
    minted: () => Awaitable<Minted>,
    continues: OpenedState | undefined,
    out: (token: string, flow: MintedState['flow'], kid: string) => R,
  ): Promise<R>;
  /**
   * A keyed first-round call: reported as a round 1 that presented no state (`keyed: true`, `tokenBytes` 0), its flow
   * tag the same for every call with the key; a refusal is `state.rejected` (`ERR_IDEMPOTENCY_KEY_CONFLICT`, …).
   */
  claimKey(
    scope: Scope,
    keyState: () => Awaitable<KeyState>,
    claimKey: (keyed: KeyState, dropped: Dropped) => Promise<Admission<OpenedState>>,
  ): Promise<Admission<OpenedState>>;
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

/** Where a claimed state is in its flow, as its events tell it. */
interface At {
  readonly flow: string;
  readonly round: number;
  readonly kid: string;
  readonly tokenBytes: number;
  readonly keyed?: true;
}

/** What every event of an operation carries, timed store steps, and refusals reported. */
function reportSteps(events: EventSink<GuardEvent>, codecId: string, now: () => number) {
  const base = (request: RequestContext) => ({ method: request?.method, target: request?.target, codec: codecId });

  /** A store step (`consume`, `claim`, an admission's `record`) timed; reports `store.error` on a store failure. */
  const storeStep = async <T>(
    step: () => Awaitable<T>,
    state: OpenedState,
    request: RequestContext,
    flow: string,
  ): Promise<[T, number]> => {
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

/** The reports of the guard's operations; built only with `onEvent` (without it, no event is built and nothing timed). */
export function createReport(ctx: GuardContext, events: EventSink<GuardEvent>): Report {
  const { base, storeStep, rejected } = reportSteps(events, ctx.codec.id, ctx.now);
  /**
   * The claim of an opened state (or a keyed call's, `shown` in round 0), reported: `state.retried` for a replay, else
   * `state.opened`, its `record` timed and its dropped outcome told (`outcome.dropped`).
   */
  const claimed = async (
    opened: OpenedState,
    shown: OpenedState,
    claim: (dropped: Dropped) => Awaitable<Admission<OpenedState>>,
    request: RequestContext,
    at: At,
    start: number,
  ): Promise<Admission<OpenedState>> => {
    const { flow } = at;
    const dropped: Dropped = (reason, outcomeBytes) =>
      events.emit({ type: 'outcome.dropped', ...base(request), flow, round: at.round, kid: opened.kid, reason, outcomeBytes });
    const [admission, storeMs] = await storeStep(() => claim(dropped), shown, request, flow);
    const timing = { ...base(request), ...at, durationMs: elapsed(start) };
    if (admission.replay) {
      events.emit({ type: 'state.retried', ...timing, storeMs });
      return admission;
    }
    events.emit({ type: 'state.opened', ...timing, ...(ctx.store !== undefined && { storeMs }) });
    return {
      state: admission.state,
      replay: false,
      fence: admission.fence,
      record: async (outcome) => (await storeStep(() => admission.record(outcome), shown, request, flow))[0],
      release: admission.release,
    } satisfies Admission<OpenedState>;
  };

  return {
    async open(scope, token, single, verify, spend) {
      const { request } = scope;
      const start = performance.now();
      let state: OpenedState | undefined;
      try {
        state = await verify();
        const flow = await events.flowTag(state.flow.id);
        const at = { flow, round: state.flow.round + 1, kid: state.kid, tokenBytes: (token as string).length };
        const opened = state;
        // Single use (after check 8)
        if (single === 'claim') {
          const claim = (dropped: Dropped) => spend(opened, dropped) as Awaitable<Admission<OpenedState>>;
          return await claimed(opened, opened, claim, request, at, start);
        }
        const storeMs = spendsInStore(single, ctx) ? (await storeStep(() => spend(opened), opened, request, flow))[1] : undefined;
        events.emit({
          type: 'state.opened',
          ...base(request),
          ...at,
          durationMs: elapsed(start),
          ...(storeMs !== undefined && { storeMs }),
        });
        return state;
      } catch (error) {
        await rejected(error, request, 'open', start, token, state);
        throw error;
      }
    },

    async mint(scope, mint, continues, out) {
      const { request } = scope;
      const start = performance.now();
      let minted: Minted;
      try {
        minted = await mint();
      } catch (error) {
        await rejected(error, request, 'mint', start, undefined, continues);
        throw error;
      }
      const durationMs = elapsed(start);
      const { round } = minted.flow;
      const flow = await events.flowTag(minted.flow.id);
      const { kid } = minted;
      if (round === 1) events.emit({ type: 'flow.started', ...base(request), flow, round: 1, kid });
      events.emit({ type: 'state.minted', ...base(request), flow, round, kid, tokenBytes: minted.token.length, durationMs });
      return out(minted.token, minted.flow, kid);
    },

    async claimKey(scope, keyState, claimKey) {
      const { request } = scope;
      const start = performance.now();
      let shown: OpenedState | undefined;
      try {
        const keyed = await keyState();
        const { state } = keyed;
        // Reported as the request that opens round 1 (the state's own round is 1, as every sealed state's); its store
        // errors in round 1 too.
        const round0 = { ...state, flow: { ...state.flow, round: 0 } };
        shown = round0;
        const flow = await events.flowTag(state.flow.id);
        const at: At = { flow, round: 1, kid: state.kid, tokenBytes: 0, keyed: true };
        return await claimed(state, round0, (dropped) => claimKey(keyed, dropped), request, at, start);
      } catch (error) {
        await rejected(error, request, 'open', start, undefined, shown);
        throw error;
      }
    },
  };
}

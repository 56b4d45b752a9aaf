import { cryptoProvider } from '#crypto';
import type { Awaitable } from './crypto/types.js';
import type { MrtrErrorCode } from './errors.js';
import { MrtrError } from './errors.js';
import type { MintOptions, OpenedState, RequestContext, StateGuard } from './guard.js';
import { utf8Encode } from './json.js';
import type { KeyRing } from './keys.js';
import type { Admission } from './outcomes.js';
import type { JsonValue } from './protocol.js';

/**
 * Fields every event carries. Never a token, a key, a jti, a principal, an argument value or an answer:
 * only sizes, names chosen by the server, key ids and a keyed hash of the flow id.
 */
export interface EventBase {
  /** `tools/call`, `prompts/get` or `resources/read`. */
  method: string;
  /** Tool or prompt name, or resource URI; `undefined` only when refused before dispatch (adapter's early check). */
  target: string | undefined;
  /** The codec's id (`hmac`, `jwe`, `aead`, …). */
  codec: string;
  /**
   * Short flow id: the first 8 bytes (hex) of HMAC-SHA256 of the flow id under a key derived from the ring's
   * primary key. The same for every round of a flow while the primary key stays; it reveals nothing sealed.
   */
  flow?: string | undefined;
  /** The request's round in its flow: 1 for the call without a state, n + 1 for the call presenting state n (= `need.round`). */
  round?: number | undefined;
  /** The id of the key that sealed or opened the state. */
  kid?: string | undefined;
}

/** A flow's first state was minted (round 1). Emitted just before its `state.minted`. */
export interface FlowStartedEvent extends EventBase {
  type: 'flow.started';
  flow: string;
  round: 1;
  kid: string;
}
/** A state was sealed for the next round. */
export interface StateMintedEvent extends EventBase {
  type: 'state.minted';
  flow: string;
  round: number;
  kid: string;
  /** Length of the token (ASCII, so bytes). */
  tokenBytes: number;
  /** Time `mint` took, ms. */
  durationMs: number;
}
/** A presented state passed every check (and was consumed when a store is set). */
export interface StateOpenedEvent extends EventBase {
  type: 'state.opened';
  flow: string;
  round: number;
  kid: string;
  tokenBytes: number;
  /** Time `open` took, store included, ms. */
  durationMs: number;
  /** Time the replay store's `consume` took, ms (absent without a store, or with `verify` alone). */
  storeMs?: number | undefined;
}
/** A state was refused (open) or could not be minted; the wire got an opaque error. */
export interface StateRejectedEvent extends EventBase {
  type: 'state.rejected';
  /** The real reason. */
  code: MrtrErrorCode;
  /** Which step refused: presenting a state (`open`) or sealing the next one (`mint`). */
  operation: 'open' | 'mint';
  /** Length of the presented token, when it was a string. */
  tokenBytes?: number | undefined;
  durationMs: number;
}
/** The replay store failed (outage, full); followed by the `state.rejected` of the same request. */
export interface StoreErrorEvent extends EventBase {
  type: 'store.error';
  code: MrtrErrorCode;
  flow: string;
  round: number;
  kid: string;
  /** Time until the store failed, ms. */
  storeMs: number;
}

/**
 * An identical retry of a round (same state, principal and answers) got the outcome its first attempt recorded
 * (`admit`): nothing ran again. Emitted instead of `state.opened`.
 */
export interface StateRetriedEvent extends EventBase {
  type: 'state.retried';
  flow: string;
  round: number;
  kid: string;
  tokenBytes: number;
  /** Time `admit` took, waiting for a first attempt still running included, ms. */
  durationMs: number;
  /** Time the replay store's part took, ms. */
  storeMs: number;
}

/** What the state guard reports through `StateGuardOptions.onEvent`. */
export type GuardEvent =
  | FlowStartedEvent
  | StateMintedEvent
  | StateOpenedEvent
  | StateRetriedEvent
  | StateRejectedEvent
  | StoreErrorEvent;

/**
 * An answer found in a request's `inputResponses` for a question the handler asked (reported by an adapter such
 * as `@mrtr/mcp-server`): counted (`answered`: it answers the question sent last round; `presupplied`: accepted
 * before being asked) or ignored (`not_asked`: the question was not sent yet; `other_question`: a different
 * question was sent under this key; `invalid`: it failed validation). Carries the key and kind, never the answer.
 */
export interface AnswerEvent extends EventBase {
  type: 'answer.accepted' | 'answer.ignored';
  /** The handler's question key (chosen by the server). */
  key: string;
  /** `elicitation.form`, `elicitation.url`, `sampling`, `sampling.tools` or `roots`. */
  kind: string;
  reason: 'answered' | 'presupplied' | 'not_asked' | 'other_question' | 'invalid';
  round: number;
}

/** A call that presented a state ended with a result, not another round (reported by an adapter). */
export interface FlowCompletedEvent extends EventBase {
  type: 'flow.completed';
  flow: string;
  /** The final request's round: the number of requests the flow took. */
  round: number;
  kid: string;
}

/** Every event: the guard's, plus the adapter's answers and completions (`createMrtr({ onEvent })`). */
export type MrtrEvent = GuardEvent | AnswerEvent | FlowCompletedEvent;

/** A hook for events: called synchronously; a throw (or a rejected promise) is swallowed. Queue slow work. */
export type EventHook<E> = (event: E) => void;

/** Private `MintOptions` key through which the guard reports the flow id it sealed (to the event wrapper only). */
export const FLOW_ID_SINK: unique symbol = Symbol('mrtr.flowIdSink');

const FLOW_TAG_PURPOSE = 'mrtr/flow-tag/v1';
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** Flow tags remembered per tagger (the oldest is dropped first). */
const FLOW_TAGS_CACHED = 1024;

/**
 * The short flow id of events: HMAC-SHA256(subkey(primary, "mrtr/flow-tag/v1"), flow id), first 8 bytes in hex.
 * Keyed, so a log reader cannot link it to the flow id sealed in tokens. Synchronous where the crypto is (Node).
 *
 * A flow is tagged at every open and every mint (two or three times per round) with the same answer, so the
 * last {@link FLOW_TAGS_CACHED} tags are remembered: a pure function of the flow id under this tagger's key,
 * bounded in entries (flow ids come only from verified or freshly minted states, at most 128 characters).
 */
export function createFlowTagger(keys: KeyRing): (flowId: string) => Awaitable<string> {
  const kid = keys.primaryKid;
  const known = new Map<string, string>();
  const remember = (flowId: string, tag: string): string => {
    if (known.size >= FLOW_TAGS_CACHED) known.delete(known.keys().next().value!);
    known.set(flowId, tag);
    return tag;
  };
  const hex = (flowId: string, mac: Uint8Array): string => {
    let out = '';
    for (let i = 0; i < 8; i++) out += HEX[mac[i]!];
    return remember(flowId, out);
  };
  const withKey = (key: Uint8Array, flowId: string): Awaitable<string> => {
    const mac = cryptoProvider.hmacSha256(key, utf8Encode(flowId));
    return mac instanceof Promise ? mac.then((m) => hex(flowId, m)) : hex(flowId, mac);
  };
  return (flowId) => {
    const tag = known.get(flowId);
    if (tag !== undefined) return tag;
    const key = keys.subkey(kid, FLOW_TAG_PURPOSE)!;
    return key instanceof Promise ? key.then((k) => withKey(k, flowId)) : withKey(key, flowId);
  };
}

/** Calls `hook` so that it can never throw into, nor reject beside, the request. */
export function safeEmitter<E>(hook: EventHook<E>): (event: E) => void {
  return (event) => {
    try {
      const result = hook(event) as unknown;
      if (result !== null && typeof result === 'object' && typeof (result as Promise<unknown>).then === 'function') {
        (result as Promise<unknown>).then(undefined, () => {});
      }
    } catch {
      // An observer must never change the answer.
    }
  };
}

const elapsed = (start: number): number => performance.now() - start;
const sizeOf = (token: unknown): number | undefined => (typeof token === 'string' ? token.length : undefined);
const codeOf = (error: unknown): MrtrErrorCode | undefined => (MrtrError.is(error) ? error.code : undefined);

/**
 * Wraps a guard with events. `open` is `verify` then `consume`, exactly as the guard's own; only built when a hook
 * is set, so the guard without a hook runs unchanged.
 */
export function observeGuard(guard: StateGuard, keys: KeyRing, hook: EventHook<GuardEvent>): StateGuard {
  const emit = safeEmitter(hook);
  const tag = createFlowTagger(keys);
  const codec = guard.codec.id;
  const base = (request: RequestContext) => ({ method: request?.method, target: request?.target, codec });

  /** A store step (`consume`, `claim`, an admission's `record`) timed; emits `store.error` on a store failure. */
  const storeStep = async <T>(step: () => Promise<T>, state: OpenedState, request: RequestContext, flow: string): Promise<[T, number]> => {
    const start = performance.now();
    try {
      return [await step(), elapsed(start)];
    } catch (error) {
      const code = codeOf(error);
      if (code !== undefined && code !== 'ERR_STATE_REPLAYED' && code !== 'ERR_ROUND_IN_PROGRESS') {
        emit({ type: 'store.error', ...base(request), code, flow, round: state.flow.round + 1, kid: state.kid, storeMs: elapsed(start) });
      }
      throw error;
    }
  };

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
    const known = state === undefined ? {} : { flow: await tag(state.flow.id), round: state.flow.round + 1, kid: state.kid };
    emit({ type: 'state.rejected', ...base(request), ...known, code, operation, tokenBytes: sizeOf(token), durationMs });
  };

  /** `verify`, then nothing (`verify`), `consume` (`open`) or `claim` (`admit`), with its events. */
  const openWith = async (token: unknown, request: RequestContext, single: 'verify' | 'consume' | 'claim', answers?: JsonValue) => {
    const start = performance.now();
    let state: OpenedState | undefined;
    try {
      state = await guard.verify(token, request);
      const tagged = tag(state.flow.id);
      const flow = typeof tagged === 'string' ? tagged : await tagged;
      const at = { ...base(request), flow, round: state.flow.round + 1, kid: state.kid, tokenBytes: (token as string).length };
      const opened = state;
      if (single === 'claim') {
        const [admission, storeMs] = await storeStep(() => guard.claim(opened, answers ?? null), opened, request, flow);
        if (admission.replay) {
          emit({ type: 'state.retried', ...at, durationMs: elapsed(start), storeMs });
          return admission;
        }
        emit({ type: 'state.opened', ...at, durationMs: elapsed(start), ...(guard.store !== undefined && { storeMs }) });
        return {
          state: admission.state,
          replay: false,
          record: async (outcome: JsonValue) => (await storeStep(() => admission.record(outcome), opened, request, flow))[0],
        } satisfies Admission<OpenedState>;
      }
      const storeMs =
        single === 'consume' && guard.store !== undefined ? (await storeStep(() => guard.consume(opened), opened, request, flow))[1] : undefined;
      emit({ type: 'state.opened', ...at, durationMs: elapsed(start), ...(storeMs !== undefined && { storeMs }) });
      return state;
    } catch (error) {
      await rejected(error, request, 'open', start, token, state);
      throw error;
    }
  };

  return {
    codec: guard.codec,
    store: guard.store,
    maxTokenBytes: guard.maxTokenBytes,
    maxRounds: guard.maxRounds,
    bind: guard.bind,
    open: (token, request) => openWith(token, request, 'consume') as never,
    verify: (token, request) => openWith(token, request, 'verify') as never,
    admit: (token, request, answers) => openWith(token, request, 'claim', answers) as never,
    consume: guard.consume,
    claim: guard.claim,
    async mint(data, request, options) {
      const start = performance.now();
      const previous = options?.continues;
      let token: string;
      // The guard hands this call the flow id it sealed (a new one in round 1) through a private option.
      let flowId = previous?.flow.id ?? '';
      const sink: MintOptions = { ...options, [FLOW_ID_SINK]: (id: string) => (flowId = id) } as MintOptions;
      try {
        token = await guard.mint(data, request, sink);
      } catch (error) {
        await rejected(error, request, 'mint', start, undefined, previous);
        throw error;
      }
      const durationMs = elapsed(start);
      const round = previous === undefined ? 1 : previous.flow.round + 1;
      const tagged = tag(flowId);
      const flow = typeof tagged === 'string' ? tagged : await tagged;
      const kid = keys.primaryKid;
      if (round === 1) emit({ type: 'flow.started', ...base(request), flow, round: 1, kid });
      emit({ type: 'state.minted', ...base(request), flow, round, kid, tokenBytes: token.length, durationMs });
      return token;
    },
  };
}


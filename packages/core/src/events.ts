import { cryptoProvider } from '#crypto';
import { type Awaitable, andThen, isPromiseLike } from './crypto/awaitable.js';
import type { MrtrErrorCode } from './errors.js';
import { utf8Encode } from './util/json.js';
import type { KeyRing } from './keys/keys.js';

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
   * primary key. The same for every round of a flow while the primary key stays (a rotation changes it); it
   * reveals nothing sealed.
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
  storeMs?:
    | number
    | undefined /** A keyed first-round call (an idempotency key, `GuardRequest.claimKey`): no state was presented (`tokenBytes` 0). */;
  keyed?: true | undefined;
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
 * (`admit`), or a keyed call's retry (same key, same arguments: `keyed`) got its first call's (`claimKey`): nothing
 * ran again. Emitted instead of `state.opened`.
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
  storeMs: number /** A keyed first-round call (an idempotency key, `GuardRequest.claimKey`): no state was presented (`tokenBytes` 0). */;
  keyed?: true | undefined;
}

/**
 * A round's outcome is unknown: an identical retry found its claim's lease lapsed with nothing recorded (the instance
 * running it died, or lost the store, between running it and recording it). The round may have run: what a reconciler
 * needs to find out is here. Emitted with the retry's `state.rejected` (`ERR_OUTCOME_UNKNOWN`).
 */
export interface RoundUnknownEvent extends EventBase {
  type: 'round.unknown';
  flow: string;
  round: number;
  kid: string;
  /** The principal's tag in the state (a keyed hash of the principal under the state's key, never the principal). */
  principal: string;
  /** When the state of the round was minted (epoch ms). */
  issuedAt: number;
  /** When the retry found the outcome unknown (epoch ms, this instance's clock). */
  at: number;
}

/**
 * Why a round's outcome was not kept (its identical retries are then replays, `ERR_STATE_REPLAYED`, as without safe
 * retry): `principal_quota` (past the principal's `outcomeQuota`), `too_large` (larger than the codec or the store
 * keeps), `unsealable` (not JSON, or the codec failed to seal it), `store_refused` (the store recorded it as "done,
 * not kept": its outcome budget was full, or the claim expired or was taken over before the record).
 */
export type OutcomeDropReason = 'principal_quota' | 'too_large' | 'unsealable' | 'store_refused';

/**
 * A round ran but its outcome was not kept (`record` resolved `false`): a retry after a lost response will be a
 * replay. Emitted once per dropped outcome, by the `record` of an admission. Not emitted for a store that records no
 * outcomes, nor under the shared unauthenticated principal (not kept by policy), nor when the store failed
 * (`store.error`).
 */
export interface OutcomeDroppedEvent extends EventBase {
  type: 'outcome.dropped';
  flow: string;
  round: number;
  kid: string;
  reason: OutcomeDropReason;
  /** Length of the sealed outcome, when it was sealed (ASCII, so bytes). */
  outcomeBytes?: number | undefined;
}

/**
 * A measurement of this instance's offset from the replay store's clock (stores that declare `clock`), at most every
 * `clockCheckMs`: the `mrtr_clock_skew` gauge. Not about a request: `method` is `''`, `target` undefined.
 */
export interface StoreClockEvent extends EventBase {
  type: 'store.clock';
  /** The store's clock minus this instance's, ms (positive: this instance is behind). */
  offsetMs: number;
  /** Half the measurement's round trip, ms. */
  uncertaintyMs: number;
  /** The tolerance (`clockSkewMs`). */
  toleranceMs: number;
  /** Past the tolerance: every spend and mint is refused with `ERR_CLOCK_SKEW` until a measurement is back within it. */
  skewed: boolean;
}

/** What the state guard reports through `StateGuardOptions.onEvent`. */
export type GuardEvent =
  | FlowStartedEvent
  | StateMintedEvent
  | StateOpenedEvent
  | StateRetriedEvent
  | StateRejectedEvent
  | StoreErrorEvent
  | RoundUnknownEvent
  | OutcomeDroppedEvent
  | StoreClockEvent;

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

const FLOW_TAG_PURPOSE = 'mrtr/flow-tag/v1';
const HEX = /* @__PURE__ */ Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

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
  // The key of the tags: the primary's. A refreshing ring's primary changes at a rotation; the tags then change
  // with it (the remembered ones are dropped), and a tag is never computed under a key that left the ring.
  let kid = keys.primaryKid;
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
  const withKey = (key: Uint8Array, flowId: string): Awaitable<string> =>
    andThen(cryptoProvider.hmacSha256(key, utf8Encode(flowId)), (mac) => hex(flowId, mac));
  return (flowId) => {
    if (keys.refreshing) {
      const primary = keys.primaryKid;
      if (primary !== kid) {
        kid = primary;
        known.clear();
      }
    }
    const tag = known.get(flowId);
    if (tag !== undefined) return tag;
    return andThen(keys.subkey(kid, FLOW_TAG_PURPOSE)!, (key) => withKey(key, flowId));
  };
}

/** Calls `hook` so that it can never throw into, nor reject beside, the request. */
export function safeEmitter<E>(hook: EventHook<E>): (event: E) => void {
  return (event) => {
    try {
      const result = hook(event) as unknown;
      if (isPromiseLike(result)) result.then(undefined, () => {});
    } catch {
      // An observer must never change the answer.
    }
  };
}

/**
 * The one event path of a guard and the adapter built on it: one emitter (a throwing or rejecting hook is
 * swallowed) and one flow tagger (one cache), both on one key ring. Built by the guard from
 * `StateGuardOptions.onEvent`; an adapter that reports events of its own (answers, completions, refusals before
 * the guard) builds it with {@link createEventSink} and hands it to the guard as `onEvent`, so that both layers
 * emit through the same function and tag flows with the same tagger.
 */
export interface EventSink<E = MrtrEvent> {
  /** The ring the flow tags are derived from: the guard accepts only a sink built on its own ring. */
  readonly keys: KeyRing;
  /** Emits one event (never throws, never waits). */
  readonly emit: (event: E) => void;
  /** The short flow id of events (see {@link EventBase.flow}). */
  readonly flowTag: (flowId: string) => Awaitable<string>;
}

/** The event path for `hook` on `keys`: see {@link EventSink}. */
export function createEventSink<E = MrtrEvent>(keys: KeyRing, hook: EventHook<E>): EventSink<E> {
  if (typeof hook !== 'function') throw new TypeError('createEventSink: hook must be a function');
  return Object.freeze({ keys, emit: safeEmitter(hook), flowTag: createFlowTagger(keys) });
}

/** Whether `value` is an {@link EventSink} (as opposed to a hook function). */
export const isEventSink = (value: unknown): value is EventSink<never> =>
  value !== null &&
  typeof value === 'object' &&
  typeof (value as EventSink).emit === 'function' &&
  typeof (value as EventSink).flowTag === 'function';

import type {
  CallToolResult,
  ClientCapabilities,
  GetPromptResult,
  InputRequiredResult,
  ReadResourceResult,
  ServerContext,
} from '@modelcontextprotocol/server';
import { CLIENT_CAPABILITIES_META_KEY, ProtocolError } from '@modelcontextprotocol/server';
import {
  MrtrError,
  type Admission,
  type Awaitable,
  type GuardRequest,
  type JsonValue,
  type MrtrErrorCode,
  type OpenedState,
  type StateGuard,
} from '@mrtr/core';
import type { Principal } from '@mrtr/core/adapter';
import { StateMalformedError, StateReplayedError } from '@mrtr/core/errors';
import { isObject } from '@mrtr/core/options';
import { allowedKinds, type InputRequestKind } from '../protocol/capabilities.js';
import { askOptionsOf, type FlowData, isAskMarker, NeedState, parseFlowData, requestToSend } from './need.js';
import { type Idempotency, keyOf, markReplayed } from './keys.js';
import type { MissingCapabilityPolicy, ResolvedOptions } from './options.js';
import { flowLimitError, type Lane, missingCapabilityError, toWire, WireError, wireErrorFor } from '../protocol/wire.js';

/** What a protected handler may produce. */
export type RoundResult = CallToolResult | GetPromptResult | ReadResourceResult | InputRequiredResult;

/** One protected call: the method, its target and arguments, and the handler to run with a `Need`. */
export interface Call {
  method: 'tools/call' | 'prompts/get' | 'resources/read';
  target: string;
  args: unknown;
  ctx: ServerContext;
  /**
   * The capabilities the client declared in `initialize` on this server instance (`server.getClientCapabilities()`),
   * read only for a 2025-era request; `undefined` there means no `initialize` reached this instance: the
   * stateless HTTP fallback.
   */
  sessionCapabilities: () => ClientCapabilities | undefined;
  /** At-least-once: a round whose first run stopped unrecorded runs again (see `ToolConfig.reclaim`). */
  reclaim?: boolean | undefined;
  /** A tool that takes idempotency keys on its first-round calls (see `ToolConfig.idempotency`). */
  idempotency?: Idempotency | undefined;
  /** Runs the handler; `principal` is who this request is (the round's state is bound to it, and so is a task it starts). */
  invoke: (need: NeedState, principal: Principal) => Awaitable<RoundResult | undefined>;
}

/** Runs rounds of protected calls on one guard. */
export interface Rounds {
  run(call: Call): Promise<RoundResult>;
  /** Reports a refusal of the adapter's own as a `state.rejected` event (hence to `onReject`); never throws. */
  report(code: MrtrErrorCode, method: string, target: string | undefined, tokenBytes?: number, durationMs?: number): void;
}

const NOTHING: ReadonlySet<InputRequestKind> = new Set();

/**
 * The kinds this request may be asked, and how it came (see {@link Lane}). A 2026-07-28 request declares its
 * capabilities in its own envelope; a 2025-era request has none, and its connection's `initialize` declared them,
 * which the SDK's legacy shim then serves. Without either (a 2025-era request on the stateless HTTP fallback, a
 * fresh instance that never saw `initialize`) nothing can be asked.
 */
function allowedFor(call: Call): { allowed: ReadonlySet<InputRequestKind>; lane: Lane } {
  const envelope = call.ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  if (envelope !== undefined) {
    return { allowed: allowedKinds(envelope[CLIENT_CAPABILITIES_META_KEY] as Parameters<typeof allowedKinds>[0]), lane: 'request' };
  }
  const declared = call.sessionCapabilities();
  if (declared === undefined) return { allowed: NOTHING, lane: 'stateless' };
  return { allowed: allowedKinds(declared as Parameters<typeof allowedKinds>[0]), lane: 'session' };
}

/**
 * A round's outcome as recorded for identical retries (a JSON value, sealed by the codec in the store):
 * `r` the result; `e` a JSON-RPC error the wire got; `x` any other error the handler threw (rebuilt with its
 * message, and its code and data when it had them, so the SDK answers the retry as it answered the first attempt).
 */
type Outcome =
  | { r: JsonValue }
  | { e: { code: number; message: string; data?: JsonValue } }
  | { x: { message: string; code?: number; data?: JsonValue } };

function outcomeOfError(error: unknown): Outcome {
  const wire =
    error instanceof WireError
      ? error.error
      : MrtrError.is(error)
        ? wireErrorFor(error.code, error as { retryAfterMs?: number }).error
        : undefined;
  if (wire !== undefined) {
    return { e: { code: wire.code, message: wire.message, ...(wire.data !== undefined && { data: wire.data as JsonValue }) } };
  }
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof ProtocolError) {
    return { x: { message, code: error.code, ...(error.data !== undefined && { data: error.data as JsonValue }) } };
  }
  return { x: { message } };
}

/** What an identical retry gets: the first attempt's result, or the same error thrown again. */
function replayOutcome(outcome: JsonValue): RoundResult {
  if (isObject(outcome)) {
    if (isObject(outcome.r)) return outcome.r as unknown as RoundResult;
    const e = outcome.e;
    if (isObject(e) && typeof e.code === 'number' && typeof e.message === 'string') {
      throw new WireError(new ProtocolError(e.code, e.message, e.data));
    }
    const x = outcome.x;
    if (isObject(x) && typeof x.message === 'string') {
      throw typeof x.code === 'number' ? new ProtocolError(x.code, x.message, x.data) : new Error(x.message);
    }
  }
  // Sealed by this server's codec, so never reached unless a key was shared with something else: fail closed.
  throw new StateReplayedError();
}

/**
 * A refusal by the guard, which has reported it itself (its `state.rejected` carries flow, round and timing):
 * its wire answer, with no code left for the adapter to report again.
 */
function fromGuard(error: unknown): never {
  throw MrtrError.is(error) ? wireErrorFor(error.code, error as { retryAfterMs?: number }) : error;
}

/** A round from the opened state on (see {@link createRest}). */
type Rest = (call: Call, who: Principal, request: GuardRequest, opened: OpenedState | undefined, fence?: number) => Promise<RoundResult>;

/** A round from the opened state on: the handler, then its result or the next questions with a new state. */
function createRest(guard: StateGuard, options: ResolvedOptions): Rest {
  const { events } = options;
  const emit = events?.emit;
  const codec = guard.codec.id;
  return async function rest(
    call: Call,
    who: Principal,
    request: GuardRequest,
    opened: OpenedState | undefined,
    fence = 0,
  ): Promise<RoundResult> {
    const { ctx, target } = call;
    let prior: FlowData | undefined;
    if (opened !== undefined) {
      prior = parseFlowData(opened.data);
      if (prior === undefined) throw new StateMalformedError();
    }

    // 2. The handler, with this round's view of the flow.
    const { allowed, lane } = allowedFor(call);
    const need = new NeedState({
      round: opened === undefined ? 1 : opened.flow.round + 1,
      fence,
      maxRounds: guard.maxRounds,
      prior,
      responses: isObject(ctx.mcpReq.inputResponses) ? ctx.mcpReq.inputResponses : {},
      allowed,
      presupplied: options.presupplied,
      maxAnswerChars: options.maxAnswerChars,
    });
    const result = await call.invoke(need, who);
    let flow: string | undefined;
    if (events !== undefined && opened !== undefined) {
      const tagged = events.flowTag(opened.flow.id);
      flow = typeof tagged === 'string' ? tagged : await tagged;
    }
    if (emit !== undefined) {
      const at = { method: call.method, target, codec, flow, round: need.round, kid: opened?.kid };
      for (const { key, kind, accepted, reason } of need.seen.values()) {
        emit({ type: accepted ? 'answer.accepted' : 'answer.ignored', ...at, key, kind, reason });
      }
    }
    let policy: MissingCapabilityPolicy = options.missingCapability;
    if (result === undefined) {
      if (need.questions.size === 0) throw new TypeError(`mrtr: handler for ${target} returned nothing and asked nothing`);
    } else if (isAskMarker(result)) {
      policy = askOptionsOf(result).missingCapability ?? policy;
    } else if (isObject(result) && result.resultType === 'input_required') {
      throw new TypeError(`mrtr: handler for ${target} must return need.ask() instead of its own input_required result`);
    } else {
      if (flow !== undefined)
        emit!({ type: 'flow.completed', method: call.method, target, codec, flow, round: need.round, kid: opened!.kid });
      return result;
    }

    // 3. Input needed: the questions this client may receive, with a freshly sealed state.
    const inputRequests: Record<string, unknown> = {};
    const pins: Record<string, string> = {};
    const denied: InputRequestKind[] = [];
    for (const [key, question] of need.questions) {
      if (!allowed.has(question.kind)) {
        denied.push(question.kind);
        continue;
      }
      inputRequests[key] = requestToSend(question);
      pins[key] = question.pin;
    }
    const asked = Object.keys(pins).length;
    if (denied.length > 0 && (policy === 'fail' || asked === 0)) throw missingCapabilityError(denied, lane);
    const data: FlowData = { a: Object.fromEntries(need.answers), p: pins };
    const kept = need.keptForNext;
    if (kept !== undefined) data.k = kept.value;
    const minted = await request.mintFlow(data as unknown as JsonValue, { continues: opened }).catch((error: unknown) => {
      // An honest flow that asks once more than its round limit allows, or past its deadline, is told so: this
      // state was genuine (it was just opened), so the reason is no secret. The guard reported the code already.
      if (opened !== undefined && MrtrError.is(error) && (error.code === 'ERR_FLOW_ROUNDS' || error.code === 'ERR_FLOW_EXPIRED')) {
        throw new WireError(flowLimitError(error.code, guard.maxRounds).error);
      }
      return fromGuard(error);
    });
    const out: InputRequiredResult = { resultType: 'input_required', requestState: minted.token };
    if (asked > 0) out.inputRequests = inputRequests as NonNullable<InputRequiredResult['inputRequests']>;
    return out;
  };
}

/**
 * The round: open the presented state (every check of the guard, then single use), run the handler with the
 * ask-style view of the flow, and either return its result or send the questions this client may receive
 * with a freshly sealed state. Every `MrtrError` leaves as its opaque wire error, reported to `onReject`.
 */
export function createRounds(guard: StateGuard, options: ResolvedOptions): Rounds {
  // The guard's event path: one emitter and one flow tagger for the guard's events and the adapter's.
  const { events } = options;
  const emit = events?.emit;
  const codec = guard.codec.id;
  const rest = createRest(guard, options);
  const report = (code: MrtrErrorCode, method: string, target: string | undefined, tokenBytes?: number, durationMs = 0): void => {
    emit?.({ type: 'state.rejected', method, target, codec, code, operation: 'open', tokenBytes, durationMs });
  };

  async function round(call: Call, who: Principal, request: GuardRequest): Promise<RoundResult> {
    const { ctx } = call;
    // 1. The presented state: every check of the guard, then single use. With outcome recording, an identical
    // retry of a round that already ran gets what that round produced, and nothing runs again.
    const raw: unknown = ctx.mcpReq.requestState();
    if (raw === undefined) return rest(call, who, request, undefined);
    if (typeof raw !== 'string') throw new StateMalformedError();
    const responses = isObject(ctx.mcpReq.inputResponses) ? ctx.mcpReq.inputResponses : {};
    if (!options.recordOutcomes) return rest(call, who, request, await request.open(raw).catch(fromGuard));
    const admission: Admission<OpenedState> = await request
      .admit(raw, responses as JsonValue, call.reclaim === true ? { reclaim: true } : undefined)
      .catch(fromGuard);
    if (admission.replay) return markReplayed(replayOutcome(admission.outcome));
    let outcome: Outcome | undefined;
    try {
      const result = await rest(call, who, request, admission.state, admission.fence);
      outcome = { r: result as unknown as JsonValue };
      return result;
    } catch (error) {
      outcome = outcomeOfError(error);
      throw error;
    } finally {
      // The round ran: it is answered whatever the store does (a failure reaches onEvent as store.error, and
      // an identical retry then waits for this attempt, or is refused, never runs the round again).
      await admission.record(outcome as JsonValue).catch(() => false);
    }
  }

  /**
   * A keyed first-round call: claimed under its key; a retry with the same arguments gets the recorded result (marked
   * replayed). What is recorded: the result (the first round's `input_required` included, so a retried first call
   * continues the same flow), a tool error (`isError`) only with `replayErrors`; a thrown error never — the key is
   * given back, and a retry runs again (a store that cannot give it back records the error instead: never run twice).
   */
  async function keyed(call: Call, who: Principal, request: GuardRequest, key: string, idempotency: Idempotency): Promise<RoundResult> {
    const admission = await request.claimKey(key, { ttlMs: idempotency.ttlMs }).catch(fromGuard);
    if (admission.replay) return markReplayed(replayOutcome(admission.outcome));
    const giveBack = async (outcome: Outcome): Promise<void> => {
      if (!(await admission.release().catch(() => false))) await admission.record(outcome as JsonValue).catch(() => false);
    };
    let result: RoundResult;
    try {
      result = await round(call, who, request);
    } catch (error) {
      await giveBack(outcomeOfError(error));
      throw error;
    }
    const outcome: Outcome = { r: result as unknown as JsonValue };
    if (!idempotency.replayErrors && (result as CallToolResult).isError === true) await giveBack(outcome);
    else await admission.record(outcome as JsonValue).catch(() => false);
    return result;
  }

  return {
    report,
    async run(call) {
      const { ctx, method, target } = call;
      if (!isObject(ctx) || !isObject(ctx.mcpReq)) throw new TypeError('mrtr: called without a ServerContext');
      const start = emit === undefined ? 0 : performance.now();
      try {
        // Every protected call needs a principal (or the fixed unauthenticated one), also one that asks nothing:
        // the principal policy, applied here once for the whole request; the guard takes its answer as it is, and a
        // task the request starts is bound to the same one.
        const who = options.principalOf(ctx);
        const request = guard.forRequest({ method, target, arguments: call.args, resolvedPrincipal: who });
        // A key counts on a first-round call only (later rounds are bound to their state), and only for a keyed tool.
        const key = call.idempotency !== undefined && ctx.mcpReq.requestState() === undefined ? keyOf(ctx) : undefined;
        return await (key === undefined ? round(call, who, request) : keyed(call, who, request, key, call.idempotency!));
      } catch (error) {
        // What the guard refused was reported by the guard (see fromGuard); what is left is the adapter's own.
        throw toWire(error, (code) => {
          if (emit === undefined) return;
          const raw = ctx.mcpReq.requestState();
          report(code, method, target, typeof raw === 'string' ? raw.length : undefined, performance.now() - start);
        });
      }
    },
  };
}

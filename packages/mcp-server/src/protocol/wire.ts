import { type InputRequiredResult, MissingRequiredClientCapabilityError, ProtocolError } from '@modelcontextprotocol/server';
import { capabilitiesFor, type InputRequestKind } from './capabilities.js';
import { MrtrError, type MrtrErrorCode } from '@mrtr/core';
import { isServerFault } from '@mrtr/core/errors';

/** The one message every rejected state gets on the wire (the SDK's own frozen text). */
export const INVALID_STATE_MESSAGE = 'Invalid or expired requestState';

/** JSON-RPC error codes the adapter answers with (rounds and tasks alike). */
export const INVALID_REQUEST = -32600;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;

/** An error that must reach the wire as a JSON-RPC error (not as a tool `isError` result). */
export class WireError extends Error {
  readonly error: ProtocolError;
  /** The code to report to `onReject`/`onEvent` for this answer, if it stands for an `MrtrError`. */
  readonly code: MrtrErrorCode | undefined;
  constructor(error: ProtocolError, code?: MrtrErrorCode) {
    super(error.message);
    this.error = error;
    this.code = code;
  }
}

/**
 * The wire answer for an `MrtrError`. Every rejected state gets the same opaque `-32602`; server faults
 * (store outage, a failed seal) get `-32603`; a missing principal `-32600`; a spent quota `-32600` with
 * its own text (the client can only wait); an identical retry of a round still running `-32600` with
 * `data.reason: 'round_in_progress'` (the client sends it again); one whose first attempt stopped unrecorded
 * `-32600` with `data.reason: 'outcome_unknown'` (it may have run); an authentic state the store lost its ledger for
 * `-32602` with `data.reason: 'ledger_lost'`; this instance's clock off the store's `-32603` with
 * `data.reason: 'clock_skew'`; the store unreachable `-32603` with `data.reason: 'store_unavailable'` and a
 * `retryAfterMs`. An expired state and a replayed one stay opaque (`invalid_request_state`): the client does the same
 * for both — it starts a new flow — and the wire is no oracle for which check refused a state. Never the real reason otherwise: that goes to `onReject`.
 */
export function wireErrorFor(code: MrtrErrorCode, error?: { readonly retryAfterMs?: number }): WireError {
  // This instance's clock is off the store's: the client may send the same request again (another instance serves it).
  if (code === 'ERR_CLOCK_SKEW') return new WireError(new ProtocolError(INTERNAL_ERROR, 'Internal error', { reason: 'clock_skew' }));
  // The replay store did not answer: nothing was spent; the same request may be sent again shortly.
  if (code === 'ERR_STORE_UNAVAILABLE') {
    return new WireError(new ProtocolError(INTERNAL_ERROR, 'Internal error', { reason: 'store_unavailable', retryAfterMs: 1_000 }));
  }
  if (isServerFault(code)) return new WireError(new ProtocolError(INTERNAL_ERROR, 'Internal error'));
  // An identical retry of a round whose first attempt stopped unrecorded: it may have run; never run it again blind.
  if (code === 'ERR_OUTCOME_UNKNOWN') {
    return new WireError(new ProtocolError(INVALID_REQUEST, OUTCOME_UNKNOWN_MESSAGE, { reason: 'outcome_unknown' }));
  }
  // An authentic state the store can no longer judge (its ledger was lost): the client starts a new flow.
  if (code === 'ERR_LEDGER_LOST') {
    return new WireError(new ProtocolError(INVALID_PARAMS, INVALID_STATE_MESSAGE, { reason: 'ledger_lost' }));
  }
  if (code === 'ERR_PRINCIPAL_REQUIRED') return new WireError(new ProtocolError(INVALID_REQUEST, PRINCIPAL_REQUIRED_MESSAGE));
  if (code === 'ERR_QUOTA_EXCEEDED')
    return new WireError(new ProtocolError(INVALID_REQUEST, 'Too many requests in flight; try again later'));
  // Only an identical retry (the same genuine state, principal and answers) of a round still running gets here.
  if (code === 'ERR_ROUND_IN_PROGRESS') {
    const retryAfterMs = error?.retryAfterMs;
    return new WireError(
      new ProtocolError(INVALID_REQUEST, ROUND_IN_PROGRESS_MESSAGE, {
        reason: 'round_in_progress',
        ...(typeof retryAfterMs === 'number' && { retryAfterMs }),
      }),
    );
  }
  // The same key with other arguments (or whose result was not kept): opaque, like a malformed key.
  if (code === 'ERR_IDEMPOTENCY_KEY_CONFLICT') return invalidKey();
  return new WireError(new ProtocolError(INVALID_PARAMS, INVALID_STATE_MESSAGE, { reason: 'invalid_request_state' }));
}

/** The wire text for a malformed idempotency key and for a refused one (`ERR_IDEMPOTENCY_KEY_CONFLICT`). */
export const INVALID_KEY_MESSAGE = 'Invalid idempotency key';

/** `-32602` with {@link INVALID_KEY_MESSAGE}: no reason on the wire (`onReject` gets the code of a refused key). */
export const invalidKey = (): WireError => new WireError(new ProtocolError(INVALID_PARAMS, INVALID_KEY_MESSAGE));

/** The wire text for an identical retry of a round whose first attempt stopped without recording its outcome. */
export const OUTCOME_UNKNOWN_MESSAGE =
  'The outcome of this round is unknown: an earlier attempt with the same state and answers stopped before its result was recorded, and it may have run. Check its effect before starting again';

/** The wire text for an identical retry of a round whose first attempt is still running. */
export const ROUND_IN_PROGRESS_MESSAGE =
  'This round is still being processed (an earlier attempt with the same state and answers is running); send the same request again shortly';

/**
 * The wire text for a protected call without a principal. It says what is missing, for the client's user, and
 * where the server reads it from, for the operator (clients such as the Inspector CLI show only the message).
 */
export const PRINCIPAL_REQUIRED_MESSAGE =
  'Authentication required: this request carries no user identity, and the server binds every request state to one ' +
  "(it reads authInfo.extra.sub; see createMrtr's principal and unauthenticated options)";

/**
 * How this request reached the server, for the capability check:
 * - `request`: a 2026-07-28 request, whose own `_meta` declares the client's capabilities;
 * - `session`: a 2025-era connection (stdio, or Streamable HTTP with sessions), whose `initialize` declared them
 *   and over which the SDK's legacy shim sends the questions;
 * - `stateless`: a 2025-era request served statelessly over HTTP (the SDK's default fallback), where the server
 *   cannot send a request back to the client, so nothing can be asked whatever the client declared.
 */
export type Lane = 'request' | 'session' | 'stateless';

const KIND_NAMES: Record<InputRequestKind, string> = {
  'elicitation.form': 'elicitation (form)',
  'elicitation.url': 'elicitation (url)',
  sampling: 'sampling',
  'sampling.tools': 'sampling with tools',
  roots: 'roots',
};

/** `elicitation (form) and sampling`: the kinds in the order given, without repeats. */
export function kindNames(kinds: Iterable<InputRequestKind>): string {
  const names = [...new Set([...kinds].map((kind) => KIND_NAMES[kind]))];
  return names.length <= 1 ? (names[0] ?? '') : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
}

/**
 * `-32021` with `data.requiredCapabilities` for the kinds this request cannot be asked. The message leads with
 * the real reason and names the capabilities: many clients show only the message, not `data`.
 */
export function missingCapabilityError(kinds: Iterable<InputRequestKind>, lane: Lane = 'request'): WireError {
  const list = [...kinds];
  const names = kindNames(list);
  const message =
    lane === 'stateless'
      ? `This request needs ${names}, but it came from a 2025-era client over stateless HTTP, where the server cannot ` +
        'send requests back to the client. Connect with a 2026-07-28 client, or serve 2025-era clients with sessions ' +
        "(createHttpHandler from @mrtr/mcp-server/http, legacy: 'sessions')"
      : `The client did not declare the ${names} capability this request needs (declare it in the client's capabilities)`;
  return new WireError(new MissingRequiredClientCapabilityError({ requiredCapabilities: capabilitiesFor(list) as never }, message));
}

/** The wire error for an honest flow that ran out of rounds or time while asking (not a forged state). */
export function flowLimitError(code: 'ERR_FLOW_ROUNDS' | 'ERR_FLOW_EXPIRED', maxRounds: number): WireError {
  const message =
    code === 'ERR_FLOW_ROUNDS'
      ? `This request ran out of rounds: ${maxRounds} rounds of questions without a complete, valid answer. Start it again`
      : 'This request ran out of time: its questions were not all answered before the deadline. Start it again';
  const reason = code === 'ERR_FLOW_ROUNDS' ? 'flow_rounds_exhausted' : 'flow_expired';
  return new WireError(new ProtocolError(INVALID_REQUEST, message, { reason }), code);
}

/** Maps anything a round threw: `MrtrError`s to their wire answer (reported first), anything else unchanged. */
export function toWire(error: unknown, report: (code: MrtrErrorCode) => void): unknown {
  if (error instanceof WireError) {
    if (error.code !== undefined) report(error.code);
    return error;
  }
  if (!MrtrError.is(error)) return error;
  report(error.code);
  return wireErrorFor(error.code, error as { retryAfterMs?: number });
}

/**
 * `McpServer` turns every error a tool callback throws into an `isError` result. To answer a rejected state
 * with a JSON-RPC error on `tools/call` too, the tool callback returns this input-required-shaped value
 * instead: `McpServer` passes input-required results through untouched, and the SDK's MRTR seam reads
 * `inputRequests` first (on both eras), which throws the wire error out of the request handler.
 *
 * This relies on SDK 2.4 behaviour (the peer range is pinned to `~2.4.0`); `test/sdk-contract.test.ts`
 * fails loudly if a new SDK stops surfacing it as a JSON-RPC error.
 */
export function escapeToWire(error: ProtocolError): InputRequiredResult {
  const result = { resultType: 'input_required' } as InputRequiredResult;
  Object.defineProperty(result, 'inputRequests', {
    enumerable: true,
    get(): never {
      throw error;
    },
  });
  return result;
}

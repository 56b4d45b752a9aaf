import { type InputRequiredResult, MissingRequiredClientCapabilityError, ProtocolError } from '@modelcontextprotocol/server';
import { capabilitiesFor, type InputRequestKind } from '@mrtr/core/authoring';
import { isServerFault, MrtrError, type MrtrErrorCode } from '@mrtr/core';

/** The one message every rejected state gets on the wire (the SDK's own frozen text). */
export const INVALID_STATE_MESSAGE = 'Invalid or expired requestState';

const INVALID_PARAMS = -32602;
const INVALID_REQUEST = -32600;
const INTERNAL_ERROR = -32603;

/** An error that must reach the wire as a JSON-RPC error (not as a tool `isError` result). */
export class WireError extends Error {
  readonly error: ProtocolError;
  constructor(error: ProtocolError) {
    super(error.message);
    this.error = error;
  }
}

/**
 * The wire answer for an `MrtrError`. Every rejected state gets the same opaque `-32602`; server faults
 * (store outage, a failed seal) get `-32603`; a missing principal `-32600`; a spent quota `-32600` with
 * its own text (the client can only wait). Never the real reason: that goes to `onReject`.
 */
export function wireErrorFor(code: MrtrErrorCode): WireError {
  if (isServerFault(code)) return new WireError(new ProtocolError(INTERNAL_ERROR, 'Internal error'));
  if (code === 'ERR_PRINCIPAL_REQUIRED') return new WireError(new ProtocolError(INVALID_REQUEST, 'Authentication required'));
  if (code === 'ERR_QUOTA_EXCEEDED') return new WireError(new ProtocolError(INVALID_REQUEST, 'Too many requests in flight; try again later'));
  return new WireError(new ProtocolError(INVALID_PARAMS, INVALID_STATE_MESSAGE, { reason: 'invalid_request_state' }));
}

/** `-32021` with `data.requiredCapabilities` for the kinds the client did not declare. */
export function missingCapabilityError(kinds: Iterable<InputRequestKind>): WireError {
  return new WireError(
    new MissingRequiredClientCapabilityError(
      { requiredCapabilities: capabilitiesFor(kinds) as never },
      'The client did not declare a capability this request needs',
    ),
  );
}

/** Maps anything a round threw: `MrtrError`s to their wire answer (reported first), anything else unchanged. */
export function toWire(error: unknown, report: (code: MrtrErrorCode) => void): unknown {
  if (error instanceof WireError || !MrtrError.is(error)) return error;
  report(error.code);
  return wireErrorFor(error.code);
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

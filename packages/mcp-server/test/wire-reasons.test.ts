// The refusals a client can act on carry a stable reason in the error's data: the outcome of a round is unknown (it
// may have run), the store lost its ledger (start a new flow), this instance's clock is off (send it again).
import { describe, expect, it } from 'vitest';
import { OUTCOME_UNKNOWN_MESSAGE, INVALID_STATE_MESSAGE, wireErrorFor } from '../src/protocol/wire.js';

const wire = (code: Parameters<typeof wireErrorFor>[0]) => {
  const { error } = wireErrorFor(code);
  return [error.code, error.message, error.data];
};

describe('wire reasons', () => {
  it('outcome unknown, ledger lost and clock skew each get their own reason; other refusals stay opaque', () => {
    expect(wire('ERR_OUTCOME_UNKNOWN')).toEqual([-32600, OUTCOME_UNKNOWN_MESSAGE, { reason: 'outcome_unknown' }]);
    expect(wire('ERR_LEDGER_LOST')).toEqual([-32602, INVALID_STATE_MESSAGE, { reason: 'ledger_lost' }]);
    expect(wire('ERR_CLOCK_SKEW')).toEqual([-32603, 'Internal error', { reason: 'clock_skew' }]);
    expect(wire('ERR_STATE_REPLAYED')).toEqual([-32602, INVALID_STATE_MESSAGE, { reason: 'invalid_request_state' }]);
    expect(wire('ERR_STORE_UNAVAILABLE')).toEqual([-32603, 'Internal error', { reason: 'store_unavailable', retryAfterMs: 1000 }]);
    expect(wire('ERR_STORE_FULL')).toEqual([-32603, 'Internal error', undefined]);
    expect(wire('ERR_STATE_EXPIRED')).toEqual([-32602, INVALID_STATE_MESSAGE, { reason: 'invalid_request_state' }]);
  });
});

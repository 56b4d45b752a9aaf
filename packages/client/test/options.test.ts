import { MrtrClientError, OutcomeUnknownError, RoundInProgressError, withMrtr } from '@mrtr/client';
import { describe, expect, it } from 'vitest';
import { connect, fakeServer, text } from './fake.js';

describe('withMrtr options', () => {
  it('refuses misuse with labelled TypeError/RangeError', async () => {
    const client = await connect(fakeServer(() => text('x')));
    expect(() => withMrtr({} as never)).toThrow(/^withMrtr: client/);
    expect(() => withMrtr(client, { retry: { maxAttempts: 0 } })).toThrow(RangeError);
    expect(() => withMrtr(client, { retry: { maxAttempts: 1.5 } })).toThrow(/^withMrtr: retry\.maxAttempts/);
    expect(() => withMrtr(client, { retry: { baseMs: 500, maxMs: 100 } })).toThrow(/^withMrtr: retry\.maxMs/);
    expect(() => withMrtr(client, { retry: { baseMs: '1' as never } })).toThrow(TypeError);
    expect(() => withMrtr(client, { maxRounds: 1_000 })).toThrow(RangeError);
    expect(() => withMrtr(client, { idempotency: 'on' as never })).toThrow(/^withMrtr: idempotency/);
    expect(() => withMrtr(client, { tasks: { maxPolls: 0 } })).toThrow(RangeError);
    expect(() => withMrtr(client, { tasks: { pollMs: { min: 10, max: 5 } } })).toThrow(/^withMrtr: tasks\.pollMs\.max/);
    expect(() => withMrtr(client, { sleep: 5 as never })).toThrow(/^withMrtr: sleep must be a function/);
    await expect(withMrtr(client).cancelTask('')).rejects.toThrow(/^cancelTask: taskId/);
  });

  it('gives every error a stable code; instanceof goes by code', () => {
    const busy = new RoundInProgressError({ attempts: 2, retryAfterMs: 5 });
    expect(busy).toBeInstanceOf(MrtrClientError);
    expect(busy).not.toBeInstanceOf(OutcomeUnknownError);
    expect(MrtrClientError.is(busy)).toBe(true);
    expect(MrtrClientError.is(new Error('x'))).toBe(false);
    expect([busy.code, new OutcomeUnknownError().code]).toEqual(['ERR_ROUND_IN_PROGRESS', 'ERR_OUTCOME_UNKNOWN']);
    expect(() => new MrtrClientError('ERR_NOPE' as never)).toThrow(TypeError);
  });
});

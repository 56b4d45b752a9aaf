import { ProtocolError } from '@modelcontextprotocol/client';
import { OutcomeUnknownError, ResponseLostError, RoundInProgressError, withMrtr } from '@mrtr/client';
import { describe, expect, it } from 'vitest';
import { connect, fakeServer, type Json, RpcFault, text } from './fake.js';
import { noTimers } from './helpers.js';

const QUESTION = {
  method: 'elicitation/create',
  params: { message: 'Deploy?', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } },
};
const IN_PROGRESS = new RpcFault(-32600, 'This round is still being processed', { reason: 'round_in_progress', retryAfterMs: 700 });

/** `deploy` asks once (state S1), then answers "deployed" for the accepted answer under S1; `after` decides round two. */
function deployServer(after: (params: Json) => Json | RpcFault = () => text('deployed')) {
  return fakeServer((method, params) => {
    if (method !== 'tools/call') return new RpcFault(-32601, 'Method not found');
    if (params.requestState === undefined)
      return { resultType: 'input_required', inputRequests: { confirm: QUESTION }, requestState: 'S1' };
    const answer = (params.inputResponses as Json | undefined)?.confirm as Json | undefined;
    if (params.requestState !== 'S1' || answer?.action !== 'accept') return new RpcFault(-32602, 'Invalid or expired requestState');
    return after(params);
  });
}

const rounds = (seen: { method: string; params: Json; id: unknown }[]) => seen.filter((s) => s.method === 'tools/call');
const laterRound = (method: string, params: Json) => method === 'tools/call' && params.requestState !== undefined;
const body = (params: Json): Json => {
  const { _meta, ...rest } = params;
  return rest;
};

describe('rounds', () => {
  it('answers a question through the client’s elicitation handler and retries with the answers and the same requestState', async () => {
    const fake = deployServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ idempotency: 'off' }));
    const result = await mrtr.callTool({ name: 'deploy', arguments: { env: 'prod' } });
    expect(result.content).toEqual([{ type: 'text', text: 'deployed' }]);
    expect(result.replayed).toBe(false);
    const [first, second] = rounds(fake.seen);
    expect(body(first!.params)).toEqual({ name: 'deploy', arguments: { env: 'prod' } });
    expect(body(second!.params)).toEqual({
      name: 'deploy',
      arguments: { env: 'prod' },
      inputResponses: { confirm: { action: 'accept', content: { ok: true } } },
      requestState: 'S1',
    });
    expect(second!.id).not.toBe(first!.id);
  });

  it('re-sends a round whose response was lost with the same state and answers, and gets the answer', async () => {
    let runs = 0;
    const fake = deployServer(() => text(`deployed ${++runs}`, runs > 1 ? { 'dev.mrtr/replayed': true } : undefined));
    const options = noTimers({ idempotency: 'off' });
    const mrtr = withMrtr(await connect(fake), options);
    fake.drop(laterRound); // the first round's answer arrives; the second round's is lost once
    const result = await mrtr.callTool({ name: 'deploy', arguments: {} });
    const [, second, third] = rounds(fake.seen);
    expect(rounds(fake.seen)).toHaveLength(3);
    expect(body(third!.params)).toEqual(body(second!.params));
    expect(third!.id).not.toBe(second!.id);
    expect(result.content).toEqual([{ type: 'text', text: 'deployed 2' }]);
    expect(result.replayed).toBe(true);
    expect(options.sleeps).toEqual([100]); // backoff: random 0.5 × the first ceiling (baseMs 200)
  });

  it('treats a call that resumes a flow (its own answers and state) as a later round: re-sent after a lost response', async () => {
    const fake = deployServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ idempotency: 'off' }));
    fake.drop(laterRound);
    const resumed = { requestState: 'S1', inputResponses: { confirm: { action: 'accept', content: { ok: true } } } };
    const result = await mrtr.callTool({ name: 'deploy', arguments: {}, ...resumed } as never);
    expect(result.content).toEqual([{ type: 'text', text: 'deployed' }]);
    expect(rounds(fake.seen).map((r) => body(r.params))).toEqual([
      { name: 'deploy', arguments: {}, ...resumed },
      { name: 'deploy', arguments: {}, ...resumed },
    ]);
  });

  it('never re-sends a first-round call that could run twice (no key, no read-only or idempotent annotation)', async () => {
    const fake = fakeServer(() => text('sent'));
    const mrtr = withMrtr(await connect(fake), noTimers({ idempotency: 'off' }));
    fake.drop((method) => method === 'tools/call');
    const error = await mrtr.callTool({ name: 'send_email', arguments: {} }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseLostError);
    expect(error).toMatchObject({ code: 'ERR_RESPONSE_LOST', attempts: 1 });
    expect((error as Error).cause).toBeInstanceOf(TypeError);
    expect(rounds(fake.seen)).toHaveLength(1);
  });

  it('re-sends a first-round read (prompts/get, resources/read) after a lost response', async () => {
    const fake = fakeServer(() => ({ resultType: 'complete', messages: [] }));
    const mrtr = withMrtr(await connect(fake), noTimers());
    fake.drop((method) => method === 'prompts/get');
    const result = await mrtr.getPrompt({ name: 'greeting' });
    expect(result.messages).toEqual([]);
    expect(fake.seen.filter((s) => s.method === 'prompts/get')).toHaveLength(2);
  });

  it('waits out "in progress" with the server’s retry-after (an injected sleep), then gets the answer', async () => {
    let busy = 2;
    const fake = deployServer(() => (busy-- > 0 ? IN_PROGRESS : text('deployed')));
    const options = noTimers({ idempotency: 'off' });
    const mrtr = withMrtr(await connect(fake), options);
    const result = await mrtr.callTool({ name: 'deploy', arguments: {} });
    expect(result.content).toEqual([{ type: 'text', text: 'deployed' }]);
    expect(options.sleeps).toEqual([700, 700]);
    const [, ...retries] = rounds(fake.seen);
    expect(new Set(retries.map((r) => JSON.stringify(body(r.params)))).size).toBe(1);
  });

  it('caps a retry-after at retry.maxMs', async () => {
    let busy = 1;
    const fake = deployServer(() => (busy-- > 0 ? IN_PROGRESS : text('deployed')));
    const options = noTimers({ idempotency: 'off', retry: { baseMs: 100, maxMs: 300 } });
    await withMrtr(await connect(fake), options).callTool({ name: 'deploy', arguments: {} });
    expect(options.sleeps).toEqual([300]);
  });

  it('throws RoundInProgressError when the server is still busy after the retry budget', async () => {
    const fake = deployServer(() => IN_PROGRESS);
    const options = noTimers({ idempotency: 'off', retry: { maxAttempts: 3 } });
    const error = await withMrtr(await connect(fake), options)
      .callTool({ name: 'deploy', arguments: {} })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RoundInProgressError);
    expect(error).toMatchObject({ code: 'ERR_ROUND_IN_PROGRESS', attempts: 3, retryAfterMs: 700 });
    expect((error as Error).cause).toBeInstanceOf(ProtocolError);
    expect(rounds(fake.seen)).toHaveLength(4); // the first round, then 3 attempts of the second
    expect(options.sleeps).toEqual([700, 700]);
  });

  it('throws OutcomeUnknownError at once when the server says the round may have run', async () => {
    const fake = deployServer(() => new RpcFault(-32600, 'The outcome of this round is unknown', { reason: 'outcome_unknown' }));
    const options = noTimers({ idempotency: 'off' });
    const error = await withMrtr(await connect(fake), options)
      .callTool({ name: 'deploy', arguments: {} })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    expect(error).toMatchObject({ code: 'ERR_OUTCOME_UNKNOWN' });
    expect(rounds(fake.seen)).toHaveLength(2);
    expect(options.sleeps).toEqual([]);
  });

  it('throws ResponseLostError when every retry of a round is lost, after a bounded backoff', async () => {
    const fake = deployServer();
    const options = noTimers({ idempotency: 'off', retry: { maxAttempts: 3, baseMs: 100 } });
    const mrtr = withMrtr(await connect(fake), options);
    fake.drop(laterRound, 3);
    const error = await mrtr.callTool({ name: 'deploy', arguments: {} }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_RESPONSE_LOST', attempts: 3 });
    expect(rounds(fake.seen)).toHaveLength(4);
    expect(options.sleeps).toEqual([50, 100]);
  });

  it('re-sends after a socket error (ECONNRESET), but not after an error that is no transport failure', async () => {
    const fake = deployServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ idempotency: 'off' }));
    fake.drop(laterRound, 1, () => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
    await mrtr.callTool({ name: 'deploy', arguments: {} });
    expect(rounds(fake.seen)).toHaveLength(3);

    fake.drop(laterRound, 1, () => new RangeError('a bug, not a network'));
    await expect(mrtr.callTool({ name: 'deploy', arguments: {} })).rejects.toThrow(RangeError);
    expect(rounds(fake.seen)).toHaveLength(5);
  });

  it('passes any other server error through unchanged, without retrying', async () => {
    const fake = deployServer(() => new RpcFault(-32602, 'Invalid or expired requestState', { reason: 'invalid_request_state' }));
    const error = await withMrtr(await connect(fake), noTimers({ idempotency: 'off' }))
      .callTool({ name: 'deploy', arguments: {} })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProtocolError);
    expect(error).toMatchObject({ code: -32602 });
    expect(rounds(fake.seen)).toHaveLength(2);
  });

  it('stops after maxRounds input_required answers', async () => {
    const fake = fakeServer(() => ({ resultType: 'input_required', inputRequests: { confirm: QUESTION }, requestState: 'again' }));
    const error = await withMrtr(await connect(fake), noTimers({ idempotency: 'off', maxRounds: 3 }))
      .callTool({ name: 'loop', arguments: {} })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_ROUNDS_EXCEEDED' });
    expect(rounds(fake.seen)).toHaveLength(4);
  });
});

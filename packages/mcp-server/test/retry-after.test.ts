import type { ReplayStore } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { describe, expect, it } from 'vitest';
import { createHttpHandler } from '../src/http/index.js';
import { MAX_RETRY_AFTER_BODY_BYTES, retryAfterSeconds, withRetryAfter } from '../src/http/responses.js';
import { callTool, connect, fixture, wireError } from './harness.js';

// The HTTP Retry-After header on JSON-RPC errors that carry data.retryAfterMs (round_in_progress, store_unavailable).

const errorBody = (data: unknown, id: unknown = 1) =>
  JSON.stringify({ jsonrpc: '2.0', id, error: { code: -32600, message: 'busy', data } });
const json = (body: string, headers: Record<string, string> = {}) =>
  new Response(body, { status: 200, headers: { 'content-type': 'application/json', ...headers } });

describe('retryAfterSeconds', () => {
  it('is retryAfterMs in seconds, rounded up, at least 1', () => {
    const seconds = [0, 1, 999, 1000, 1001, 2500, 60_000].map((ms) => retryAfterSeconds(errorBody({ retryAfterMs: ms })));
    expect(seconds).toEqual([1, 1, 1, 1, 2, 3, 60]);
  });

  it('is undefined for anything but one error with a finite, non-negative retryAfterMs', () => {
    const bodies = [
      errorBody({ reason: 'invalid_request_state' }),
      errorBody({ retryAfterMs: -1 }),
      errorBody({ retryAfterMs: '1000' }),
      errorBody({ retryAfterMs: null }),
      errorBody(undefined),
      `[${errorBody({ retryAfterMs: 1000 })}]`, // a batch
      JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: '"retryAfterMs": 5' }], retryAfterMs: 5 } }),
      '{"retryAfterMs": 1000',
      '"retryAfterMs"',
      'null',
    ];
    expect(bodies.map(retryAfterSeconds)).toEqual(bodies.map(() => undefined));
  });
});

describe('withRetryAfter', () => {
  it('adds the header to a JSON error answer, keeping status, headers and body', async () => {
    const body = errorBody({ reason: 'store_unavailable', retryAfterMs: 1000 });
    const answer = await withRetryAfter(json(body, { 'x-other': 'kept' }));
    expect([answer.status, answer.headers.get('retry-after'), answer.headers.get('x-other'), await answer.text()]).toEqual([
      200,
      '1',
      'kept',
      body,
    ]);
  });

  it('leaves SSE, other content types, large bodies and a header already set as they are', async () => {
    const body = errorBody({ retryAfterMs: 1000 });
    const sse = new Response(`event: message\ndata: ${body}\n\n`, { headers: { 'content-type': 'text/event-stream' } });
    const large = json(errorBody({ retryAfterMs: 1000, pad: 'x'.repeat(MAX_RETRY_AFTER_BODY_BYTES) }));
    const preset = json(body, { 'retry-after': '7' });
    const text = new Response(body, { headers: { 'content-type': 'text/plain' } });
    const out = await Promise.all([sse, large, preset, text].map(withRetryAfter));
    expect(out.map((r) => r.headers.get('retry-after'))).toEqual([null, null, '7', null]);
    // The large body still reaches the client whole.
    expect((await out[1]!.text()).length).toBeGreaterThan(MAX_RETRY_AFTER_BODY_BYTES);
  });
});

describe('createHttpHandler: Retry-After on a store outage', () => {
  it('answers store_unavailable with status 200, the JSON-RPC error in the body, and Retry-After: 1', async () => {
    const down: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: async () => {
        throw new StoreUnavailableError();
      },
      close: async () => {},
    };
    const f = fixture({ store: down });
    const answers: Response[] = [];
    const handler = createHttpHandler(() => f.buildServer(), { legacy: 'reject' });
    const client = await connect(f, { handler, onResponse: (response) => answers.push(response) });
    const r1 = await callTool(client, 'delete_files', { path: '/o' });
    expect(answers.at(-1)!.headers.get('retry-after')).toBeNull();
    const yes = { confirm: { action: 'accept', content: { ok: true } } };
    const error = await wireError(
      callTool(client, 'delete_files', { path: '/o' }, { inputResponses: yes, requestState: r1.requestState as string }),
    );
    expect([error.code, error.data]).toEqual([-32603, { reason: 'store_unavailable', retryAfterMs: 1000 }]);
    const answer = answers.at(-1)!;
    expect([answer.status, answer.headers.get('retry-after')]).toEqual([200, '1']);
    expect(f.effects).toEqual([]);
    await handler.close();
  });
});

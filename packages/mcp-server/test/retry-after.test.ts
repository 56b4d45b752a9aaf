import type { ReplayStore } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ProtocolError } from '@modelcontextprotocol/server';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it, vi } from 'vitest';
import * as z from 'zod/v4';
import { createHttpHandler, type HttpHandlerOptions } from '../src/http/index.js';
import { retryAfterSeconds, withRetryAfter } from '../src/http/responses.js';
import { retryAfterMsOf } from '../src/retry-after.js';
import { callTool, connect, fixture, wireError } from './harness.js';

// The HTTP Retry-After header on JSON-RPC errors that carry data.retryAfterMs (round_in_progress, store_unavailable).

const errorBody = (data: unknown, id: unknown = 1) =>
  JSON.stringify({ jsonrpc: '2.0', id, error: { code: -32600, message: 'busy', data } });
const json = (body: string, headers: Record<string, string> = {}) =>
  new Response(body, { status: 200, headers: { 'content-type': 'application/json', ...headers } });

describe('retryAfterSeconds', () => {
  it('is retryAfterMs in seconds, rounded up, at least 1', () => {
    const seconds = [0, 1, 999, 1000, 1001, 2500, 60_000].map((ms) => retryAfterSeconds(ms));
    expect(seconds).toEqual([1, 1, 1, 1, 2, 3, 60]);
  });

  it('is undefined for anything but a finite, non-negative number', () => {
    const values = [-1, '1000', null, undefined, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, {}, [1000]];
    expect(values.map(retryAfterSeconds)).toEqual(values.map(() => undefined));
  });
});

describe('retryAfterMsOf', () => {
  it('is data.retryAfterMs of a JSON-RPC error, when a finite number >= 0', () => {
    const errors = [0, 1000, 2500].map(
      (ms) => new ProtocolError(-32603, 'Internal error', { reason: 'store_unavailable', retryAfterMs: ms }),
    );
    expect(errors.map(retryAfterMsOf)).toEqual([0, 1000, 2500]);
  });

  it('is undefined for anything else: other data, no data, a plain Error, a value', () => {
    const others = [
      new ProtocolError(-32602, 'Invalid', { reason: 'invalid_request_state' }),
      new ProtocolError(-32600, 'busy', { retryAfterMs: -1 }),
      new ProtocolError(-32600, 'busy', { retryAfterMs: '1000' }),
      new ProtocolError(-32600, 'busy', { retryAfterMs: null }),
      new ProtocolError(-32600, 'busy', { retryAfterMs: Number.POSITIVE_INFINITY }),
      new ProtocolError(-32600, 'busy'),
      Object.assign(new Error('busy'), { data: { retryAfterMs: 1000 } }),
      { code: -32600, message: 'busy', data: { retryAfterMs: 1000 } },
      undefined,
    ];
    expect(others.map(retryAfterMsOf)).toEqual(others.map(() => undefined));
  });
});

describe('withRetryAfter', () => {
  it('adds the header to a JSON answer given a delay, keeping status, headers and body', async () => {
    const body = errorBody({ reason: 'store_unavailable', retryAfterMs: 1000 });
    const answer = withRetryAfter(json(body, { 'x-other': 'kept' }), 1000);
    expect([answer.status, answer.headers.get('retry-after'), answer.headers.get('x-other'), await answer.text()]).toEqual([
      200,
      '1',
      'kept',
      body,
    ]);
    expect(withRetryAfter(json(body), 2500).headers.get('retry-after')).toBe('3');
  });

  it('leaves SSE, other content types, a header already set and an answer without a delay as they are', async () => {
    const body = errorBody({ retryAfterMs: 1000 });
    const sse = new Response(`event: message\ndata: ${body}\n\n`, { headers: { 'content-type': 'text/event-stream' } });
    const preset = json(body, { 'retry-after': '7' });
    const text = new Response(body, { headers: { 'content-type': 'text/plain' } });
    const plain = json(body);
    const given = [sse, preset, text, plain];
    const out = [withRetryAfter(sse, 1000), withRetryAfter(preset, 1000), withRetryAfter(text, 1000), withRetryAfter(plain, undefined)];
    expect(out.map((r, i) => r === given[i])).toEqual([true, true, true, true]);
    expect(out.map((r) => r.headers.get('retry-after'))).toEqual([null, '7', null, null]);
  });

  it('never reads nor clones the body: a large one gets the header and reaches the client whole', async () => {
    const clone = vi.spyOn(Response.prototype, 'clone');
    try {
      const body = errorBody({ retryAfterMs: 1000, pad: 'x'.repeat(64 * 1024) });
      const answer = withRetryAfter(json(body), 1000);
      expect(clone).not.toHaveBeenCalled();
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(await answer.text()).toBe(body);
    } finally {
      clone.mockRestore();
    }
  });
});

const down: ReplayStore = {
  capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
  consume: async () => {
    throw new StoreUnavailableError();
  },
  close: async () => {},
};
const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } as const;
const yes = { confirm: { action: 'accept', content: { ok: true } } };
const STORE_UNAVAILABLE = { reason: 'store_unavailable', retryAfterMs: 1000 };

describe.each([
  ['legacy: reject', { legacy: 'reject' }],
  ['default options (2025-era sessions too)', {}],
] as [string, HttpHandlerOptions][])('createHttpHandler (%s): Retry-After on the 2026 path', (_name, options) => {
  it('answers store_unavailable with status 200, the JSON-RPC error in the body, and Retry-After: 1', async () => {
    const f = fixture({ store: down });
    const answers: Response[] = [];
    const handler = createHttpHandler(() => f.buildServer(), options);
    const client = await connect(f, { handler, onResponse: (response) => answers.push(response) });
    const r1 = await callTool(client, 'delete_files', { path: '/o' });
    expect(answers.at(-1)!.headers.get('retry-after')).toBeNull();
    const error = await wireError(
      callTool(client, 'delete_files', { path: '/o' }, { inputResponses: yes, requestState: r1.requestState as string }),
    );
    expect([error.code, error.data]).toEqual([-32603, STORE_UNAVAILABLE]);
    const answer = answers.at(-1)!;
    expect([answer.status, answer.headers.get('content-type'), answer.headers.get('retry-after')]).toEqual([200, 'application/json', '1']);
    expect(f.effects).toEqual([]);
    await handler.close();
  });

  it('a prompt answered store_unavailable (the rethrow path) gets Retry-After: 1 too', async () => {
    const f = fixture({ store: down });
    const answers: Response[] = [];
    const handler = createHttpHandler(() => f.buildServer(), options);
    const client = await connect(f, { handler, onResponse: (response) => answers.push(response) });
    const get = (extra: Record<string, unknown>) =>
      client.request(
        { method: 'prompts/get', params: { name: 'greeting', arguments: { tone: 'warm' }, ...extra } as never },
        { allowInputRequired: true },
      ) as Promise<Record<string, unknown>>;
    const r1 = await get({});
    expect(answers.at(-1)!.headers.get('retry-after')).toBeNull();
    const answersName = { user_name: { action: 'accept', content: { name: 'Ada' } } };
    const error = await wireError(get({ inputResponses: answersName, requestState: r1.requestState }));
    expect([error.code, error.data]).toEqual([-32603, STORE_UNAVAILABLE]);
    expect([answers.at(-1)!.status, answers.at(-1)!.headers.get('retry-after')]).toEqual([200, '1']);
    await handler.close();
  });

  it('round_in_progress gets Retry-After (seconds); the results around it do not', async () => {
    const f = fixture({ store: createMemoryStore(), retryWaitMs: 0 });
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const build = f.buildServer;
    const handler = createHttpHandler(() => {
      const server = build();
      f.mrtr.registerTool(server, 'slow_delete', { inputSchema: z.object({ path: z.string() }) }, async ({ path }, _ctx, need) => {
        const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
        if (!confirm) return need.ask();
        started();
        await released;
        return { content: [{ type: 'text', text: `Deleted ${path}` }] };
      });
      return server;
    }, options);
    const answers: Response[] = [];
    const client = await connect(f, { handler, onResponse: (response) => answers.push(response) });
    const r1 = await callTool(client, 'slow_delete', { path: '/b' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const attempt = callTool(client, 'slow_delete', { path: '/b' }, params);
    await running;
    const busy = await wireError(callTool(client, 'slow_delete', { path: '/b' }, params));
    expect(busy.data).toEqual({ reason: 'round_in_progress', retryAfterMs: 1000 });
    const busyAnswer = answers.at(-1)!;
    expect([busyAnswer.status, busyAnswer.headers.get('retry-after')]).toEqual([200, '1']);
    release();
    await attempt;
    expect(answers.filter((a) => a.headers.has('retry-after'))).toEqual([busyAnswer]);
    await handler.close();
  });
});

describe('createHttpHandler: the 2025-era sessions path', () => {
  it('serves a call with the very Request given to fetch as ctx.http.req (where a delay is noted)', async () => {
    const f = fixture();
    const seen: unknown[] = [];
    const given: Request[] = [];
    const handler = createHttpHandler(() => {
      const server = f.buildServer();
      server.registerTool('probe', {}, async (ctx) => {
        seen.push(ctx.http?.req);
        return { content: [{ type: 'text', text: 'ok' }] };
      });
      return server;
    });
    const client = new Client({ name: 'legacy', version: '1' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL('http://test.local/mcp'), {
        fetch: async (url, init) => {
          const request = new Request(url, init);
          given.push(request);
          return handler.fetch(request, {});
        },
      }),
    );
    expect(handler.sessionCount).toBe(1);
    await client.callTool({ name: 'probe', arguments: {} });
    expect(seen).toHaveLength(1);
    expect(given.includes(seen[0] as Request)).toBe(true);
    await client.close();
    await handler.close();
  });

  it('answers store_unavailable over SSE (the transport streams 2025-era answers): the error in the stream, no header', async () => {
    const f = fixture({ store: down });
    const answers: Response[] = [];
    const handler = createHttpHandler(() => f.buildServer());
    const client = new Client({ name: 'legacy', version: '1' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { ok: true } }));
    await client.connect(
      new StreamableHTTPClientTransport(new URL('http://test.local/mcp'), {
        fetch: async (url, init) => {
          const response = await handler.fetch(new Request(url, init), {
            authInfo: { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } },
          });
          answers.push(response);
          return response;
        },
      }),
    );
    expect(handler.sessionCount).toBe(1);
    const error = await wireError(client.callTool({ name: 'delete_files', arguments: { path: '/o' } }));
    expect([error.code, error.data]).toEqual([-32603, STORE_UNAVAILABLE]);
    const streamed = answers.filter((a) => a.headers.get('content-type') === 'text/event-stream');
    expect(streamed.length).toBeGreaterThan(0);
    expect(answers.filter((a) => a.headers.has('retry-after'))).toEqual([]);
    expect(f.effects).toEqual([]);
    await client.close();
    await handler.close();
  });
});

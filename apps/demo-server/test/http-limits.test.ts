import type { Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import type { HttpHandler } from '@mrtr/mcp-server/http';
import { afterEach, describe, expect, it } from 'vitest';
import { createHttpServer, type HttpOptions, jsonDepthExceeds, MAX_BODY_BYTES, MAX_JSON_DEPTH } from '../src/http.js';
import type { ConnectLedger } from '../src/ledger.js';

/**
 * The HTTP front in-process, with a stub in place of the SDK handler: the nesting cap (finding 2), the
 * header timeout really enforced and the connection cap (finding 3), opaque internal errors (finding 4).
 */

const servers: Server[] = [];
const sockets: Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    ),
  );
});

const noLedger: ConnectLedger = {
  create: async () => {
    throw new Error('unused');
  },
  get: async () => undefined,
  settle: async () => false,
  close: async () => {},
};

interface Started {
  server: Server;
  port: number;
  calls: { count: number };
  errors: unknown[];
}

async function start(overrides: Partial<HttpOptions> = {}, respond?: () => Promise<Response>): Promise<Started> {
  const calls = { count: 0 };
  const errors: unknown[] = [];
  const handler = {
    fetch: async () => {
      calls.count++;
      return respond !== undefined
        ? respond()
        : new Response(JSON.stringify({ jsonrpc: '2.0', id: 1, result: {} }), { headers: { 'content-type': 'application/json' } });
    },
    close: async () => {},
  } as unknown as HttpHandler;
  const server = createHttpServer({
    handler,
    tokens: undefined,
    bindHost: '127.0.0.1',
    extraHosts: [],
    pages: { ledger: noLedger, tokens: undefined },
    onError: (error) => errors.push(error),
    ...overrides,
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen({ host: '127.0.0.1', port: 0 }, resolve));
  return { server, port: (server.address() as AddressInfo).port, calls, errors };
}

async function post(port: number, body: string | Buffer): Promise<{ status: number; text: string }> {
  const response = await fetch(`http://127.0.0.1:${port}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body,
  });
  return { status: response.status, text: await response.text() };
}

const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

describe('JSON nesting cap (before parsing)', () => {
  it('the scan counts brackets outside strings only, with escapes handled', () => {
    expect(jsonDepthExceeds(Buffer.from(nested(64)), 64)).toBe(false);
    expect(jsonDepthExceeds(Buffer.from(nested(65)), 64)).toBe(true);
    expect(jsonDepthExceeds(Buffer.from(`{"a":[{"b":{}}],"c":[]}`), 4)).toBe(false);
    expect(jsonDepthExceeds(Buffer.from(`{"a":[{"b":{}}],"c":[]}`), 3)).toBe(true);
    // Brackets inside strings do not count, including after an escaped quote or an escaped backslash.
    expect(jsonDepthExceeds(Buffer.from(JSON.stringify({ a: '['.repeat(1000) })), 1)).toBe(false);
    expect(jsonDepthExceeds(Buffer.from(JSON.stringify({ a: `"${'{'.repeat(1000)}` })), 1)).toBe(false);
    expect(jsonDepthExceeds(Buffer.from(JSON.stringify({ a: `\\`, b: [[[]]] })), 3)).toBe(true);
    expect(jsonDepthExceeds(Buffer.from(JSON.stringify({ a: `\\"[[[[` })), 1)).toBe(false);
    // Multi-byte UTF-8 never looks like a bracket or a quote.
    expect(jsonDepthExceeds(Buffer.from(JSON.stringify({ a: '€「」【】'.repeat(100), b: ['x'] })), 2)).toBe(false);
  });

  it('rejects a deeply nested body with -32700 before the SDK (and JSON.parse) sees it; depth 64 passes', async () => {
    const { port, calls } = await start();
    const deep = await post(port, nested(150_000)); // 300 KB, under the body cap
    expect(deep.status).toBe(400);
    const error = JSON.parse(deep.text).error;
    expect(error.code).toBe(-32700);
    expect(error.message).toContain(`${MAX_JSON_DEPTH}`);
    expect(calls.count).toBe(0);
    // Object nesting too.
    const objects = `${'{"a":'.repeat(200)}1${'}'.repeat(200)}`;
    expect((await post(port, objects)).status).toBe(400);
    expect(calls.count).toBe(0);
    // Exactly the documented depth is handed on.
    expect((await post(port, nested(MAX_JSON_DEPTH))).status).toBe(200);
    expect(calls.count).toBe(1);
  });

  it('the scan is linear: 1 MiB costs about 1024x what 1 KiB costs (ratio, not wall-clock)', () => {
    // The scanner's worst case is a full pass: legal depth, many strings with escapes.
    const unit = `{"a":[1,2,{"b":"x\\"y\\\\z[{"}],"c":${nested(20)}},`;
    const make = (bytes: number) => Buffer.from(`[${unit.repeat(Math.ceil(bytes / unit.length))}0]`);
    const small = make(1024);
    const large = make(1024 * 1024);
    expect(jsonDepthExceeds(large, MAX_JSON_DEPTH)).toBe(false);
    const reps = Math.round(large.length / small.length);
    const best = (fn: () => void) => {
      let min = Number.POSITIVE_INFINITY;
      for (let i = 0; i < 7; i++) {
        const t0 = process.hrtime.bigint();
        fn();
        min = Math.min(min, Number(process.hrtime.bigint() - t0));
      }
      return min;
    };
    const tSmall = best(() => {
      for (let i = 0; i < reps; i++) jsonDepthExceeds(small, MAX_JSON_DEPTH);
    });
    const tLarge = best(() => jsonDepthExceeds(large, MAX_JSON_DEPTH));
    // Same number of bytes scanned either way: a linear scan gives a ratio near 1, a quadratic one ~1000.
    expect(tLarge / tSmall).toBeLessThan(10);
  });

  it(`the body cap is ${MAX_BODY_BYTES} bytes`, async () => {
    const { port, calls } = await start();
    expect((await post(port, Buffer.alloc(MAX_BODY_BYTES + 1, 0x20))).status).toBe(413);
    expect(calls.count).toBe(0);
    expect((await post(port, Buffer.alloc(MAX_BODY_BYTES, 0x20))).status).toBe(200);
    expect(calls.count).toBe(1);
  });
});

/** Resolves when `socket` closes, with whatever the server wrote. */
const closed = (socket: Socket) =>
  new Promise<string>((resolve) => {
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      data += chunk;
    });
    socket.on('error', () => {});
    socket.once('close', () => resolve(data));
  });

const opened = (port: number) =>
  new Promise<Socket>((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port }, () => resolve(socket));
    sockets.push(socket);
    socket.once('error', reject);
  });

describe('slow senders and the connection cap', () => {
  it('cuts a slow-header client off close to the configured headers timeout (not at Node’s 30 s check)', async () => {
    const { port } = await start({ headersTimeoutMs: 300, requestTimeoutMs: 1_000, connectionsCheckingIntervalMs: 100 });
    const socket = await opened(port);
    const done = closed(socket);
    const t0 = Date.now();
    socket.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Slow: `);
    const reply = await done;
    const elapsed = Date.now() - t0;
    expect(reply).toMatch(/^HTTP\/1\.1 408/);
    expect(elapsed).toBeGreaterThanOrEqual(250);
    // The old server only checked every 30 s; 5 s leaves room for a loaded machine.
    expect(elapsed).toBeLessThan(5_000);
  });

  it('refuses connection N+1 when maxConnections is N, and accepts again once one closes', async () => {
    const { server, port, errors } = await start({ maxConnections: 3 });
    let accepted = 0;
    const serverSide: Socket[] = [];
    server.on('connection', (socket: Socket) => serverSide.push(socket));
    const acceptedN = (n: number) =>
      new Promise<void>((resolve) => {
        const check = () => {
          if (accepted >= n) {
            server.off('connection', onConnection);
            resolve();
          }
        };
        const onConnection = () => {
          accepted++;
          check();
        };
        server.on('connection', onConnection);
        check();
      });
    const first = acceptedN(3);
    const held = [await opened(port), await opened(port), await opened(port)];
    await first;
    const dropped = new Promise<void>((resolve) => server.once('drop', () => resolve()));
    const extra = await opened(port);
    const reply = await closed(extra);
    await dropped;
    expect(reply).toBe('');
    for (const socket of held) expect(socket.destroyed).toBe(false);
    expect(String(errors[0])).toContain('connection limit (3) reached');
    // The held connections still work.
    held[0]!.write(
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
    );
    const serverClosed = new Promise((resolve) => serverSide[0]!.once('close', resolve));
    expect(await closed(held[0]!)).toMatch(/^HTTP\/1\.1 200/);
    await serverClosed;
    // A slot is free again: a new connection is served.
    const again = await opened(port);
    const answer = closed(again);
    again.write(
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
    );
    expect(await answer).toMatch(/^HTTP\/1\.1 200/);
  });
});

describe('internal errors stay internal', () => {
  it('an exception in the handler answers a bare -32603 "Internal error"; the detail goes to onError', async () => {
    const { port, errors } = await start({}, async () => {
      throw new Error('password authentication failed for user "prod" at 10.1.2.3');
    });
    const reply = await post(port, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
    expect(reply.status).toBe(500);
    expect(JSON.parse(reply.text).error).toEqual({ code: -32603, message: 'Internal error' });
    expect(reply.text).not.toContain('password');
    expect(String(errors[0])).toContain('password authentication failed');
  });

  it('a string error.data from the SDK (its exception text) is withheld and reported; structured data stays', async () => {
    const sdkShaped = (error: Record<string, unknown>) => async () =>
      new Response(JSON.stringify({ jsonrpc: '2.0', id: null, error }), { status: 400, headers: { 'content-type': 'application/json' } });
    const leaky = await start({}, sdkShaped({ code: -32700, message: 'Parse error', data: 'Error: ENOENT /srv/secret/config.json' }));
    const reply = await post(leaky.port, '{}');
    expect(reply.status).toBe(400);
    expect(JSON.parse(reply.text).error).toEqual({ code: -32700, message: 'Parse error' });
    expect(String(leaky.errors[0])).toContain('/srv/secret/config.json');
    const structured = { code: -32602, message: 'Invalid or expired requestState', data: { reason: 'invalid_request_state' } };
    const kept = await start({}, sdkShaped(structured));
    expect(JSON.parse((await post(kept.port, '{}')).text).error).toEqual(structured);
  });

  it('a failing ledger on the connect page answers a generic 500', async () => {
    const ledger: ConnectLedger = {
      ...noLedger,
      get: async () => {
        throw new Error('ECONNREFUSED redis://:hunter2@cache:6379');
      },
    };
    const { port, errors } = await start({ pages: { ledger, tokens: undefined } });
    const response = await fetch(`http://127.0.0.1:${port}/connect/${'A'.repeat(22)}`);
    const text = await response.text();
    expect(response.status).toBe(500);
    expect(text).not.toContain('hunter2');
    expect(text).not.toContain('ECONNREFUSED');
    expect(String(errors[0])).toContain('ECONNREFUSED');
  });
});

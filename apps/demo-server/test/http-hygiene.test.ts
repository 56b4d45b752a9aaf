import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_BODY_BYTES } from '../src/http.js';
import { freshKeys, PROTOCOL_VERSION, rawRpc, type RunningDemo, startDemo } from './helpers.js';

const TOKEN = 'alice-token-0123456789abcdef';

let demo: RunningDemo;

beforeAll(async () => {
  demo = await startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${TOKEN}` } });
});

afterAll(async () => {
  expect(await demo?.stop()).toBe(0);
});

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A raw HTTP/1.1 request (fetch cannot set Host). `chunks` are written one by one without a length. */
function send(options: {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: Buffer | string;
  chunks?: Buffer[];
}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: demo.port,
        method: options.method ?? 'POST',
        path: options.path ?? '/mcp',
        headers: options.headers ?? {},
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        res.on('error', reject);
      },
    );
    // The server may answer (413) and close before the whole body is written: the reply still arrives.
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error);
    });
    if (options.chunks !== undefined) {
      let i = 0;
      const pump = () => {
        while (i < options.chunks!.length) {
          if (!req.write(options.chunks![i++]!)) {
            req.once('drain', pump);
            return;
          }
        }
        req.end();
      };
      pump();
    } else {
      req.end(options.body);
    }
  });
}

const discover = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'server/discover',
  params: {
    _meta: {
      'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
      'io.modelcontextprotocol/clientCapabilities': {},
    },
  },
});

function mcpHeaders(extra: Record<string, string> = {}): Record<string, string> {
  return {
    host: `127.0.0.1:${demo.port}`,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': PROTOCOL_VERSION,
    'mcp-method': 'server/discover',
    authorization: `Bearer ${TOKEN}`,
    ...extra,
  };
}

describe('Host allow-list (DNS rebinding)', () => {
  it('answers 421 to a foreign Host, on every path, before anything else', async () => {
    const evil = await send({ headers: mcpHeaders({ host: 'evil.example.com', origin: 'http://evil.example.com' }), body: discover });
    expect(evil.status).toBe(421);
    expect((await send({ method: 'GET', path: '/connect/x', headers: { host: 'evil.example.com' } })).status).toBe(421);
    expect((await send({ method: 'GET', headers: { host: 'evil.example.com' } })).status).toBe(421);
    // Right name, wrong port: not this server either.
    expect((await send({ headers: mcpHeaders({ host: 'localhost:1' }), body: discover })).status).toBe(421);
  });

  it('accepts the loopback names with the real port', async () => {
    for (const host of [`127.0.0.1:${demo.port}`, `localhost:${demo.port}`, `[::1]:${demo.port}`]) {
      const reply = await send({ headers: mcpHeaders({ host }), body: discover });
      expect(reply.status, host).toBe(200);
      expect(JSON.parse(reply.body).result.resultType).toBe('complete');
    }
  });
});

describe('Origin check', () => {
  it('refuses foreign and opaque origins with 403', async () => {
    for (const origin of ['http://evil.example.com', 'https://attacker.test:3000', 'null', 'file://']) {
      const reply = await send({ headers: mcpHeaders({ origin }), body: discover });
      expect(reply.status, origin).toBe(403);
    }
  });

  it('accepts no Origin, a same-origin request and loopback origins', async () => {
    for (const origin of [undefined, `http://127.0.0.1:${demo.port}`, 'http://localhost:6274', 'http://[::1]:8080']) {
      const reply = await send({ headers: mcpHeaders(origin === undefined ? {} : { origin }), body: discover });
      expect(reply.status, String(origin)).toBe(200);
    }
  });
});

describe('methods, paths, auth and body size', () => {
  it('answers PUT on /mcp with 405; GET and DELETE without a 2025-era session with 400 (they exist only for sessions)', async () => {
    const put = await send({ method: 'PUT', headers: { host: `127.0.0.1:${demo.port}`, authorization: `Bearer ${TOKEN}` } });
    expect(put.status).toBe(405);
    expect(put.headers.allow).toBe('POST, GET, DELETE');
    for (const method of ['GET', 'DELETE']) {
      const reply = await send({ method, headers: { host: `127.0.0.1:${demo.port}`, authorization: `Bearer ${TOKEN}` } });
      expect(reply.status, method).toBe(400);
    }
    // An unknown (or another user's) session: 404, which tells a 2025-era client to start a new one.
    const stale = await send({
      method: 'GET',
      headers: { host: `127.0.0.1:${demo.port}`, authorization: `Bearer ${TOKEN}`, 'mcp-session-id': 'gone' },
    });
    expect(stale.status).toBe(404);
  });

  it('answers unknown paths with 404', async () => {
    expect((await send({ path: '/other', headers: mcpHeaders(), body: discover })).status).toBe(404);
    expect((await send({ path: '/mcp/extra', headers: mcpHeaders(), body: discover })).status).toBe(404);
  });

  it('answers 401 with a Bearer challenge to a missing, unknown or non-bearer credential', async () => {
    for (const authorization of [undefined, 'Bearer wrong-token-0123456789', `Basic ${Buffer.from(`alice:${TOKEN}`).toString('base64')}`]) {
      const headers = mcpHeaders();
      if (authorization === undefined) delete headers.authorization;
      else headers.authorization = authorization;
      const reply = await send({ headers, body: discover });
      expect(reply.status, String(authorization)).toBe(401);
      expect(reply.headers['www-authenticate']).toBe('Bearer realm="mrtr-demo"');
    }
    expect((await rawRpc(demo.url, 'tools/list', {}, { token: TOKEN })).status).toBe(200);
  });

  it(`caps request bodies at ${MAX_BODY_BYTES / 1024} KiB: 413 by Content-Length and when a chunked body grows past it`, async () => {
    const big = Buffer.alloc(MAX_BODY_BYTES + 1, 0x20);
    const declared = await send({ headers: mcpHeaders({ 'content-length': String(big.length) }), body: big });
    expect(declared.status).toBe(413);
    const chunks = Array.from({ length: Math.ceil((MAX_BODY_BYTES * 2.5) / (64 * 1024)) }, () => Buffer.alloc(64 * 1024, 0x20));
    const chunked = await send({ headers: mcpHeaders({ 'transfer-encoding': 'chunked' }), chunks });
    expect(chunked.status).toBe(413);
    // Just under the cap is read and handed to the SDK (which rejects the non-JSON body itself).
    const under = await send({ headers: mcpHeaders(), body: Buffer.alloc(MAX_BODY_BYTES - 1, 0x20) });
    expect(under.status).not.toBe(413);
    // And the server is still healthy.
    expect((await send({ headers: mcpHeaders(), body: discover })).status).toBe(200);
  });
});

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type AuthInfo, createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { afterEach, describe, expect, it } from 'vitest';
import { createHttpHandler, type HttpHandler } from '../src/http/index.js';
import { type Fixture, fixture } from './harness.js';

const auth = (sub: string, clientId = 'shared-app'): AuthInfo => ({ token: `t-${sub}`, clientId, scopes: [], extra: { sub } });
const URL_ = new URL('http://test.local/mcp');

const open: Client[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close().catch(() => {})));
});

/** Headers of every request the client sent and the status of every answer, for the session assertions. */
interface Wire {
  sessionIds: (string | null)[];
  statuses: number[];
}

/** A client at the v2 SDK's defaults (2025-era `initialize`) over `fetch` into the handler, as `authInfo`. */
async function legacyClient(
  fetchInto: { fetch: HttpHandler['fetch'] },
  authInfo: AuthInfo | undefined,
  capabilities: Record<string, unknown> = { elicitation: {} },
  answer: () => unknown = () => ({ action: 'accept', content: { ok: true } }),
): Promise<{ client: Client; wire: Wire; elicited: string[] }> {
  const wire: Wire = { sessionIds: [], statuses: [] };
  const transport = new StreamableHTTPClientTransport(URL_, {
    fetch: async (url, init) => {
      const request = new Request(url, init);
      wire.sessionIds.push(request.headers.get('mcp-session-id'));
      const response = await fetchInto.fetch(request, authInfo === undefined ? {} : { authInfo });
      wire.statuses.push(response.status);
      return response;
    },
  });
  const client = new Client({ name: 'legacy', version: '1' }, { capabilities: capabilities as never });
  const elicited: string[] = [];
  if ('elicitation' in capabilities) {
    client.setRequestHandler('elicitation/create', async (request) => {
      elicited.push((request.params as { message: string }).message);
      return answer() as never;
    });
  }
  if ('sampling' in capabilities) {
    client.setRequestHandler('sampling/createMessage', async () => ({
      role: 'assistant',
      model: 'm',
      content: { type: 'text', text: 'sampled' },
    }));
  }
  open.push(client);
  await client.connect(transport);
  return { client, wire, elicited };
}

const WIRE_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/** A raw 2025-era `initialize` (no session yet), with `headers` added. */
const initialize = (headers: Record<string, string> = {}): Request =>
  new Request(URL_, {
    method: 'POST',
    headers: { ...WIRE_HEADERS, ...headers },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    }),
  });

/** A raw 2025-era `tools/list` on session `id` (`null`: no session header). */
const listTools = (id: string | null): Request =>
  new Request(URL_, {
    method: 'POST',
    headers: { ...WIRE_HEADERS, 'mcp-protocol-version': '2025-11-25', ...(id !== null && { 'mcp-session-id': id }) },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} }),
  });

async function rejection(promise: Promise<unknown>): Promise<ProtocolError> {
  const error = await promise.then(
    () => {
      throw new Error('expected a JSON-RPC error');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProtocolError);
  return error as ProtocolError;
}

const handlerFor = (f: Fixture, options: Parameters<typeof createHttpHandler>[1] = {}) => createHttpHandler(() => f.buildServer(), options);

describe('createHttpHandler: 2025-era clients on sessions', () => {
  it('a v2 client at its defaults completes a protected confirmation through the legacy shim, once', async () => {
    const f = fixture();
    const handler = handlerFor(f);
    const { client, wire, elicited } = await legacyClient(handler, auth('alice'));
    expect(client.getProtocolEra()).toBe('legacy');
    const result = await client.callTool({ name: 'delete_files', arguments: { path: '/old' } });
    expect(result.content).toEqual([{ type: 'text', text: 'Deleted /old' }]);
    expect(elicited).toEqual(['Delete /old?']);
    expect(f.effects).toEqual(['deleted /old']);
    expect(f.rejects).toEqual([]);
    // The shim ran two protected rounds: a state was minted and then opened (sealed, bound, single use).
    expect(f.events.filter((e) => e.type === 'state.minted')).toHaveLength(1);
    expect(f.events.filter((e) => e.type === 'state.opened')).toHaveLength(1);
    expect(handler.sessionCount).toBe(1);
    expect(wire.sessionIds.slice(1).every((id) => id !== null)).toBe(true);
    await handler.close();
    expect(handler.sessionCount).toBe(0);
  });

  it("reads the session's initialize capabilities: a tool that can do without a question falls back", async () => {
    const f = fixture();
    const handler = handlerFor(f);
    // Sampling but no elicitation: summarise drops its style question and still samples.
    const { client, elicited } = await legacyClient(handler, auth('alice'), { sampling: {} });
    const result = await client.callTool({ name: 'summarise', arguments: { topic: 'x' } });
    expect(result.content).toEqual([{ type: 'text', text: 'sampled (plain)' }]);
    expect(elicited).toEqual([]);
    // A question it cannot do without: -32021 naming the capability in its message.
    const error = await rejection(client.callTool({ name: 'strict_confirm', arguments: {} }));
    expect(error.code).toBe(-32021);
    expect(error.message).toContain('did not declare the elicitation (form) capability');
    await handler.close();
  });

  it('an invalid answer is asked again with the reason, and the round limit ends an honest flow with its own error', async () => {
    const f = fixture({ maxRounds: 3 });
    const handler = handlerFor(f);
    // The confirm form requires `ok`; this client keeps answering without it.
    const { client, elicited } = await legacyClient(handler, auth('alice'), { elicitation: {} }, () => ({ action: 'accept', content: {} }));
    const error = await rejection(client.callTool({ name: 'delete_files', arguments: { path: '/p' } }));
    expect(elicited[0]).toBe('Delete /p?');
    expect(elicited[1]).toMatch(/^".+" is required\. Delete \/p\?$/);
    expect(error.code).toBe(-32600);
    expect(error.message).toContain('ran out of rounds: 3 rounds');
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_FLOW_ROUNDS']);
    expect(f.effects).toEqual([]);
    await handler.close();
  });

  it("a session is its owner's: another user presenting its id gets 404, as for an unknown session", async () => {
    const f = fixture();
    const handler = handlerFor(f);
    const { wire } = await legacyClient(handler, auth('alice'));
    const id = wire.sessionIds.find((s) => s !== null)!;
    const body = JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list', params: {} });
    const headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': id,
      'mcp-protocol-version': '2025-11-25',
    };
    const asBob = await handler.fetch(new Request(URL_, { method: 'POST', headers, body }), { authInfo: auth('bob') });
    expect(asBob.status).toBe(404);
    const unknown = await handler.fetch(new Request(URL_, { method: 'POST', headers: { ...headers, 'mcp-session-id': 'nope' }, body }), {
      authInfo: auth('alice'),
    });
    expect(unknown.status).toBe(404);
    const asAlice = await handler.fetch(new Request(URL_, { method: 'POST', headers, body }), { authInfo: auth('alice') });
    expect(asAlice.status).toBe(200);
    await handler.close();
  });

  it('sessions are bounded per user (least recently used closed), in all (503) and in idle time (injected clock)', async () => {
    const f = fixture();
    let t = 1_000_000;
    const errors: string[] = [];
    const handler = handlerFor(f, {
      sessions: { maxPerUser: 2, max: 3, idleMs: 60_000, now: () => t },
      onerror: (e) => errors.push(e.message),
    });
    const a1 = await legacyClient(handler, auth('alice'));
    const a2 = await legacyClient(handler, auth('alice'));
    expect(handler.sessionCount).toBe(2);
    await legacyClient(handler, auth('alice'));
    // alice's third session closed her least recently used one: its next request is 404.
    expect(handler.sessionCount).toBe(2);
    await expect(a1.client.listTools()).rejects.toThrow();
    expect(a1.wire.statuses.at(-1)).toBe(404);
    await legacyClient(handler, auth('bob'));
    expect(handler.sessionCount).toBe(3);
    // At the total bound, carol's session makes room from the one who holds the most (alice: 2, two more than carol).
    await legacyClient(handler, auth('carol'));
    expect(handler.sessionCount).toBe(3);
    await expect(a2.client.listTools()).rejects.toThrow();
    expect(a2.wire.statuses.at(-1)).toBe(404);
    // Now everyone holds one: dave is refused (503) rather than closing someone's only session.
    await expect(legacyClient(handler, auth('dave'))).rejects.toThrow();
    expect(handler.sessionCount).toBe(3);
    expect(errors).toEqual(['createHttpHandler: 3 legacy sessions open (sessions.max): a new one was refused']);
    // An hour later every session has idled out: dave gets one, and the others are gone.
    t += 3_600_000;
    const dave = await legacyClient(handler, auth('dave'));
    expect(handler.sessionCount).toBe(1);
    expect((await dave.client.listTools()).tools.length).toBeGreaterThan(0);
    await handler.close();
  });

  it("anonymous sessions are each their own owner: initializes by one anonymous client close no one else's, and the class is bounded (503)", async () => {
    const f = fixture();
    const errors: string[] = [];
    const handler = handlerFor(f, { sessions: { maxAnonymous: 3 }, onerror: (e) => errors.push(e.message) });
    const victim = await legacyClient(handler, undefined);
    // Well past the default maxPerUser (16): one bucket for every anonymous client would have closed the victim's.
    await legacyClient(handler, undefined);
    await legacyClient(handler, undefined);
    expect(handler.sessionCount).toBe(3);
    for (let i = 0; i < 20; i++) await expect(legacyClient(handler, undefined)).rejects.toThrow();
    expect(handler.sessionCount).toBe(3);
    expect((await victim.client.listTools()).tools.length).toBeGreaterThan(0);
    expect(victim.wire.statuses.every((status) => status < 400)).toBe(true);
    expect(errors[0]).toBe('createHttpHandler: 3 anonymous legacy sessions open (sessions.maxAnonymous): a new one was refused');
    // An authenticated user still gets a session (the anonymous class does not count against users), and cannot
    // use an anonymous session's id (nor an anonymous request a user's).
    const alice = await legacyClient(handler, auth('alice'));
    expect(handler.sessionCount).toBe(4);
    const anonymousId = victim.wire.sessionIds.find((s) => s !== null)!;
    const aliceId = alice.wire.sessionIds.find((s) => s !== null)!;
    expect((await handler.fetch(listTools(anonymousId), { authInfo: auth('alice') })).status).toBe(404);
    expect((await handler.fetch(listTools(aliceId), {})).status).toBe(404);
    expect((await handler.fetch(listTools(anonymousId), {})).status).toBe(200);
    await handler.close();

    // At the total bound an anonymous newcomer is refused: it never makes room by closing a user's session.
    const full = handlerFor(f, { sessions: { max: 2 }, onerror: () => {} });
    const bob = await legacyClient(full, auth('bob'));
    await legacyClient(full, auth('bob'));
    expect((await full.fetch(initialize(), {})).status).toBe(503);
    expect(full.sessionCount).toBe(2);
    expect((await bob.client.listTools()).tools.length).toBeGreaterThan(0);
    await full.close();
  });

  it('anonymous sessions are bounded per client address too: one address at its bound (503) leaves the class to others; a spoofed X-Forwarded-For is ignored', async () => {
    const f = fixture();
    const errors: string[] = [];
    const handler = handlerFor(f, { sessions: { maxAnonymous: 10, maxAnonymousPerAddress: 3 }, onerror: (e) => errors.push(e.message) });
    const from = (remoteAddress: string, headers: Record<string, string> = {}) =>
      handler.fetch(initialize(headers), { remoteAddress }).then((r) => r.status);
    // One anonymous client opens sessions until its address's bound, each claiming another address in the header.
    const flood = [];
    for (let i = 0; i < 6; i++) flood.push(await from('198.51.100.7', { 'x-forwarded-for': `203.0.113.${i}` }));
    expect(flood).toEqual([200, 200, 200, 503, 503, 503]);
    expect(errors[0]).toBe(
      'createHttpHandler: 3 anonymous legacy sessions open from one address (sessions.maxAnonymousPerAddress): a new one was refused',
    );
    // Another anonymous client (another address; an IPv4-mapped form of the same is the same) still gets one.
    expect(await from('::ffff:198.51.100.7')).toBe(503);
    expect(await from('192.0.2.44')).toBe(200);
    expect(handler.sessionCount).toBe(4);
    await handler.close();

    // Behind one proxy (trustProxy: 1) the header's last entry is the client's address; the proxy's own is not counted.
    const proxied = handlerFor(f, { trustProxy: 1, sessions: { maxAnonymousPerAddress: 1 }, onerror: () => {} });
    const via = (forwardedFor: string) => proxied.fetch(initialize({ 'x-forwarded-for': forwardedFor }), { remoteAddress: '10.0.0.1' });
    expect((await via('198.51.100.7')).status).toBe(200);
    expect((await via('6.6.6.6, 198.51.100.7')).status).toBe(503);
    expect((await via('198.51.100.8')).status).toBe(200);
    await proxied.close();
  });

  it('maxPerUser counts one user across OAuth clients, and at the total bound room is made from whoever holds the most', async () => {
    const f = fixture();
    const errors: string[] = [];
    const handler = handlerFor(f, { sessions: { max: 4, maxPerUser: 3 }, onerror: (e) => errors.push(e.message) });
    // One user through four registered clients: the fourth closes her least recently used session.
    const mallory = [];
    for (const client of ['c1', 'c2', 'c3', 'c4']) mallory.push(await legacyClient(handler, auth('mallory', client)));
    expect(handler.sessionCount).toBe(3);
    await expect(mallory[0]!.client.listTools()).rejects.toThrow();
    expect(mallory[0]!.wire.statuses.at(-1)).toBe(404);
    // Ownership stays (client, user): her session is not hers through another client.
    const c2Id = mallory[1]!.wire.sessionIds.find((s) => s !== null)!;
    expect((await handler.fetch(listTools(c2Id), { authInfo: auth('mallory', 'c3') })).status).toBe(404);
    expect((await handler.fetch(listTools(c2Id), { authInfo: auth('mallory', 'c2') })).status).toBe(200);
    await legacyClient(handler, auth('bob'));
    expect(handler.sessionCount).toBe(4);
    // The server is full: carol and dave each close mallory's least recently used session (c3, then c4: c2 was
    // just used), not bob's.
    await legacyClient(handler, auth('carol'));
    await legacyClient(handler, auth('dave'));
    expect(handler.sessionCount).toBe(4);
    await expect(mallory[2]!.client.listTools()).rejects.toThrow();
    await expect(mallory[3]!.client.listTools()).rejects.toThrow();
    expect(mallory.map((m) => m.wire.statuses.at(-1))).toEqual([404, 200, 404, 404]);
    expect((await handler.fetch(listTools(c2Id), { authInfo: auth('mallory', 'c2') })).status).toBe(200);
    // Everyone holds one now: erin is refused rather than closing someone's only session.
    await expect(legacyClient(handler, auth('erin'))).rejects.toThrow();
    expect(errors).toEqual(['createHttpHandler: 4 legacy sessions open (sessions.max): a new one was refused']);
    await handler.close();
  });

  it('bounds hold for concurrent starts: the slot is reserved before the first await, and released when a start fails', async () => {
    const f = fixture();
    const handler = handlerFor(f, { sessions: { max: 50, maxPerUser: 4, maxAnonymous: 6 }, onerror: () => {} });
    const one = await Promise.all(Array.from({ length: 120 }, () => handler.fetch(initialize(), { authInfo: auth('alice') })));
    expect(one.every((r) => r.status === 200 || r.status === 503)).toBe(true);
    expect(handler.sessionCount).toBe(4);
    const anonymous = await Promise.all(Array.from({ length: 120 }, () => handler.fetch(initialize(), {})));
    expect(anonymous.filter((r) => r.status === 200)).toHaveLength(6);
    expect(handler.sessionCount).toBe(10);
    // 60 users at once: 40 fill the server, then room is made from the largest holders (alice down to 1 and the
    // anonymous class down to 1: 8 more), and the rest are refused; never more than max.
    const many = await Promise.all(Array.from({ length: 60 }, (_, i) => handler.fetch(initialize(), { authInfo: auth(`u${i}`) })));
    expect(many.filter((r) => r.status === 200)).toHaveLength(48);
    expect(handler.sessionCount).toBe(50);
    await handler.close();

    // A start that fails (the factory throws; a request that is not an initialize) gives its slot back.
    let fail = true;
    const strict = createHttpHandler(
      () => {
        if (fail) throw new Error('factory down');
        return f.buildServer();
      },
      { sessions: { max: 1, maxPerUser: 1 }, onerror: () => {} },
    );
    expect((await strict.fetch(initialize(), { authInfo: auth('alice') })).status).toBe(500);
    fail = false;
    expect((await strict.fetch(listTools(null), { authInfo: auth('bob') })).status).toBe(400);
    expect((await strict.fetch(initialize(), { authInfo: auth('carol') })).status).toBe(200);
    expect(strict.sessionCount).toBe(1);
    await strict.close();
  });

  it('2026-07-28 requests still go to the stateless modern path (no session)', async () => {
    const f = fixture();
    const handler = handlerFor(f);
    const transport = new StreamableHTTPClientTransport(URL_, {
      fetch: (url, init) => handler.fetch(new Request(url, init), { authInfo: auth('alice') }),
    });
    const client = new Client(
      { name: 'modern', version: '1' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } } },
    );
    client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { ok: true } }));
    open.push(client);
    await client.connect(transport);
    expect(client.getProtocolEra()).toBe('modern');
    const result = await client.callTool({ name: 'delete_files', arguments: { path: '/new' } });
    expect(result.content).toEqual([{ type: 'text', text: 'Deleted /new' }]);
    expect(handler.sessionCount).toBe(0);
    await handler.close();
  });

  it("legacy: 'reject' serves 2026-07-28 clients only", async () => {
    const f = fixture();
    const handler = handlerFor(f, { legacy: 'reject' });
    await expect(legacyClient(handler, auth('alice'))).rejects.toThrow();
    expect(handler.sessionCount).toBe(0);
    await handler.close();
  });

  it('a factory that hands out one shared server is refused with a clear, reported error (no hang)', async () => {
    const f = fixture();
    const shared = f.buildServer();
    const errors: string[] = [];
    const handler = createHttpHandler(() => shared, { onerror: (e) => errors.push(e.message) });
    await legacyClient(handler, auth('alice'));
    await expect(legacyClient(handler, auth('bob'))).rejects.toThrow();
    expect(errors.join('\n')).toContain('the factory returned a server it had returned before');
    await handler.close();
  });

  it('rejects misuse with labelled errors', () => {
    const f = fixture();
    expect(() => createHttpHandler(undefined as never)).toThrow(TypeError);
    expect(() => handlerFor(f, { legacy: 'stateless' as never })).toThrow(/legacy must be/);
    expect(() => handlerFor(f, { sessions: { max: 0 } })).toThrow(RangeError);
    expect(() => handlerFor(f, { sessions: { idleMs: 1.5 } })).toThrow(TypeError);
    expect(() => handlerFor(f, { sessions: { maxAnonymous: -1 } })).toThrow(RangeError);
    expect(() => handlerFor(f, { sessions: { maxAnonymousPerAddress: 0 } })).toThrow(RangeError);
    expect(() => handlerFor(f, { trustProxy: 17 })).toThrow(RangeError);
    expect(() => handlerFor(f, { sessions: { user: 'sub' as never } })).toThrow(/sessions.user must be a function/);
    expect(new McpServer({ name: 'x', version: '1' })).toBeInstanceOf(McpServer);
  });
});

describe('createHttpHandler: allowedHosts (DNS rebinding) on the fetch path', () => {
  const withHost = (request: Request, host: string | null): Request => {
    const headers = new Headers(request.headers);
    if (host !== null) headers.set('host', host);
    return new Request(request, { headers });
  };
  const modernList = (url: string): Request =>
    new Request(url, {
      method: 'POST',
      headers: { ...WIRE_HEADERS, 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/list',
        params: {
          _meta: {
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
            'io.modelcontextprotocol/clientCapabilities': {},
          },
        },
      }),
    });

  it("'localhost' answers 403 to another host before anything runs, on both eras and in either legacy mode", async () => {
    const f = fixture();
    let built = 0;
    const factory = () => {
      built++;
      return f.buildServer();
    };
    for (const legacy of ['sessions', 'reject'] as const) {
      built = 0;
      const handler = createHttpHandler(factory, { allowedHosts: 'localhost', legacy });
      for (const host of ['evil.example', 'evil.example:3000', 'localhost.evil.example', '127.0.0.2', 'localhost@evil.example', '']) {
        for (const request of [initialize(), modernList('http://localhost/mcp')]) {
          const response = await handler.fetch(withHost(request, host), { authInfo: auth('alice') });
          expect(response.status, host).toBe(403);
          expect(await response.json()).toEqual({
            jsonrpc: '2.0',
            error: { code: -32000, message: 'Forbidden: Host not allowed' },
            id: null,
          });
        }
      }
      // No Host header: the request URL's host is checked (test.local is not allowed).
      expect((await handler.fetch(modernList('http://test.local/mcp'), { authInfo: auth('alice') })).status).toBe(403);
      expect(built).toBe(0);
      expect(handler.sessionCount).toBe(0);
      // Loopback names at any port pass; case does not matter.
      for (const host of ['localhost:3000', 'LOCALHOST', '127.0.0.1:8080', '[::1]:1']) {
        const response = await handler.fetch(withHost(modernList('http://localhost/mcp'), host), { authInfo: auth('alice') });
        expect(response.status, host).toBe(200);
      }
      expect((await handler.fetch(modernList('http://localhost:3000/mcp'), { authInfo: auth('alice') })).status).toBe(200);
      await handler.close();
    }
    const sessions = createHttpHandler(factory, { allowedHosts: 'localhost' });
    expect((await sessions.fetch(withHost(initialize(), 'localhost:3000'), { authInfo: auth('alice') })).status).toBe(200);
    expect(sessions.sessionCount).toBe(1);
    await sessions.close();
  });

  it('a list allows exactly those host names (any port); leaving it out or "any" checks nothing', async () => {
    const f = fixture();
    const handler = createHttpHandler(() => f.buildServer(), { allowedHosts: ['mcp.example.com', '[::1]'] });
    const status = async (host: string | null, url = 'http://x/mcp') =>
      (await handler.fetch(withHost(modernList(url), host), { authInfo: auth('alice') })).status;
    expect(await status('mcp.example.com')).toBe(200);
    expect(await status('MCP.example.com:443')).toBe(200);
    expect(await status('[::1]:8080')).toBe(200);
    expect(await status('localhost')).toBe(403);
    expect(await status('mcp.example.com.evil.example')).toBe(403);
    expect(await status(null, 'https://mcp.example.com/mcp')).toBe(200);
    await handler.close();
    for (const allowedHosts of [undefined, 'any'] as const) {
      const open = createHttpHandler(() => f.buildServer(), { allowedHosts });
      expect((await open.fetch(withHost(modernList('http://x/mcp'), 'evil.example'), { authInfo: auth('alice') })).status).toBe(200);
      await open.close();
    }
  });

  it('rejects an allowedHosts that is not host names with a labelled TypeError', () => {
    const f = fixture();
    for (const allowedHosts of [[], ['localhost:3000'], ['http://x'], ['x/y'], ['::1'], [''], [3], 'none', 'LOCALHOST', null]) {
      expect(() => handlerFor(f, { allowedHosts: allowedHosts as never }), JSON.stringify(allowedHosts)).toThrow(
        /^createHttpHandler: allowedHosts /,
      );
      expect(() => handlerFor(f, { allowedHosts: allowedHosts as never })).toThrow(TypeError);
    }
  });
});

describe("the SDK's stateless fallback for 2025-era requests: nothing can be asked, and the error says why", () => {
  it('a question fails with -32021 whose message leads with the real reason; nothing runs, no state is minted', async () => {
    const f = fixture();
    const handler = createMcpHandler(() => f.buildServer());
    const { client, elicited } = await legacyClient(handler as never, auth('alice'));
    const error = await rejection(client.callTool({ name: 'delete_files', arguments: { path: '/x' } }));
    expect(error.code).toBe(-32021);
    expect(error.message).toContain('This request needs elicitation (form), but it came from a 2025-era client over stateless HTTP');
    expect(error.message).toContain('createHttpHandler');
    expect(elicited).toEqual([]);
    expect(f.effects).toEqual([]);
    expect(f.events.filter((e) => e.type === 'state.minted')).toEqual([]);
  });

  it('names the capability the request needed (sampling here), not another', async () => {
    const f = fixture();
    const handler = createMcpHandler(() => f.buildServer());
    const { client } = await legacyClient(handler as never, auth('alice'), { elicitation: {}, sampling: {} });
    // summarise needs sampling and cannot do without it: -32021 naming sampling, not elicitation.
    const error = await rejection(client.callTool({ name: 'summarise', arguments: { topic: 't' } }));
    expect(error.message).toMatch(/needs sampling, but/);
  });
});

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type AuthInfo, createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { afterEach, describe, expect, it } from 'vitest';
import { createHttpHandler, type HttpHandler } from '../src/index.js';
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
    await legacyClient(handler, auth('alice'));
    expect(handler.sessionCount).toBe(2);
    await legacyClient(handler, auth('alice'));
    // alice's third session closed her least recently used one: its next request is 404.
    expect(handler.sessionCount).toBe(2);
    await expect(a1.client.listTools()).rejects.toThrow();
    expect(a1.wire.statuses.at(-1)).toBe(404);
    await legacyClient(handler, auth('bob'));
    expect(handler.sessionCount).toBe(3);
    await expect(legacyClient(handler, auth('carol'))).rejects.toThrow();
    expect(handler.sessionCount).toBe(3);
    expect(errors).toEqual(['createHttpHandler: 3 legacy sessions open (sessions.max): a new one was refused']);
    // An hour later every session has idled out: carol gets one, and the others are gone.
    t += 3_600_000;
    const carol = await legacyClient(handler, auth('carol'));
    expect(handler.sessionCount).toBe(1);
    expect((await carol.client.listTools()).tools.length).toBeGreaterThan(0);
    await handler.close();
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
    expect(new McpServer({ name: 'x', version: '1' })).toBeInstanceOf(McpServer);
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

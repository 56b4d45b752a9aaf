import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createHttpHandler, type HttpHandler, type HttpHandlerOptions } from '../src/http/index.js';
import { callTool, fixture } from './harness.js';

// Bodies the handler cannot take as they come (not JSON, too large, without a length): the answers main gave.

const URL_ = 'http://test.local/mcp';
const LIMIT = 256;
const JSON_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const listTools = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {}, pad: 'x'.repeat(2 * LIMIT) });

type Answer = [number, string | null, unknown];
/** A JSON-RPC error answer as the SDK builds it: status, content type, body. */
const answer = (status: number, code: number, message: string, id: unknown = null, data?: unknown): Answer => [
  status,
  'application/json',
  { jsonrpc: '2.0', error: { code, message, ...(data !== undefined && { data }) }, id },
];
const PARSE_ERROR_LEGACY = answer(400, -32700, 'Parse error: Invalid JSON');
const UNSUPPORTED_MEDIA_TYPE = answer(415, -32000, 'Unsupported Media Type: Content-Type must be application/json');
const SESSION_NOT_FOUND = answer(404, -32001, 'Session not found');
const TOO_LARGE_256 = answer(413, -32000, 'Payload Too Large: Request body must not exceed 256 bytes');
const EMPTY_BATCH = answer(400, -32600, 'Bad Request: empty JSON-RPC batch');
const NOT_JSONRPC = answer(400, -32600, 'Bad Request: the request body is not a valid JSON-RPC message');
const NOT_INITIALIZED = answer(400, -32000, 'Bad Request: Server not initialized');
const PARSE_ERROR_MODERN = answer(400, -32700, 'Parse error: the request body is not valid JSON');
const NO_PROTOCOL_VERSION = answer(400, -32022, 'Unsupported protocol version: the request did not name a protocol version', 3, {
  supported: ['2026-07-28'],
});
const NOT_JSONRPC_ID_2 = answer(400, -32600, 'Bad Request: the request body is not a valid JSON-RPC message', 2);
const TOO_LARGE_4MIB = answer(413, -32000, 'Payload Too Large: Request body must not exceed 4194304 bytes');

/** What main answered each case (status, content type, body), recorded before the body was read once. */
const MAIN: Record<string, Answer> = {
  'sessions|malformed JSON with a length': PARSE_ERROR_LEGACY,
  'sessions|malformed JSON without a length': PARSE_ERROR_LEGACY,
  'sessions|an empty body with length 0': PARSE_ERROR_LEGACY,
  'sessions|whitespace only': PARSE_ERROR_LEGACY,
  'sessions|malformed JSON as text/plain': UNSUPPORTED_MEDIA_TYPE,
  'sessions|malformed JSON on a session id': SESSION_NOT_FOUND,
  'sessions|a declared length over the limit': TOO_LARGE_256,
  'sessions|a body over the limit without a length': TOO_LARGE_256,
  'sessions|a body over the limit under a smaller declared length': TOO_LARGE_256,
  'sessions|a body over the limit as text/plain under a smaller declared length': UNSUPPORTED_MEDIA_TYPE,
  'sessions|a declared length over the default limit (4 MiB)': TOO_LARGE_256,
  'sessions|a declared length at the default limit (4 MiB), the body shorter': TOO_LARGE_256,
  'sessions|a JSON array of nothing': EMPTY_BATCH,
  'sessions|JSON null': NOT_JSONRPC,
  'sessions|a 2025-era tools/list without a session': NOT_INITIALIZED,
  'reject|malformed JSON with a length': PARSE_ERROR_MODERN,
  'reject|malformed JSON without a length': PARSE_ERROR_MODERN,
  'reject|an empty body with length 0': PARSE_ERROR_MODERN,
  'reject|whitespace only': PARSE_ERROR_MODERN,
  'reject|malformed JSON as text/plain': UNSUPPORTED_MEDIA_TYPE,
  'reject|malformed JSON on a session id': PARSE_ERROR_MODERN,
  'reject|a declared length over the limit': TOO_LARGE_256,
  'reject|a body over the limit without a length': TOO_LARGE_256,
  'reject|a body over the limit under a smaller declared length': TOO_LARGE_256,
  'reject|a body over the limit as text/plain under a smaller declared length': UNSUPPORTED_MEDIA_TYPE,
  'reject|a declared length over the default limit (4 MiB)': TOO_LARGE_256,
  'reject|a declared length at the default limit (4 MiB), the body shorter': TOO_LARGE_256,
  'reject|a JSON array of nothing': EMPTY_BATCH,
  'reject|JSON null': NOT_JSONRPC,
  'reject|a 2025-era tools/list without a session': NO_PROTOCOL_VERSION,
  'sessions, default limit|malformed JSON with a length': PARSE_ERROR_LEGACY,
  'sessions, default limit|malformed JSON without a length': PARSE_ERROR_LEGACY,
  'sessions, default limit|an empty body with length 0': PARSE_ERROR_LEGACY,
  'sessions, default limit|whitespace only': PARSE_ERROR_LEGACY,
  'sessions, default limit|malformed JSON as text/plain': UNSUPPORTED_MEDIA_TYPE,
  'sessions, default limit|malformed JSON on a session id': SESSION_NOT_FOUND,
  'sessions, default limit|a declared length over the limit': NOT_JSONRPC_ID_2,
  'sessions, default limit|a body over the limit without a length': NOT_JSONRPC_ID_2,
  'sessions, default limit|a body over the limit under a smaller declared length': NOT_JSONRPC_ID_2,
  'sessions, default limit|a body over the limit as text/plain under a smaller declared length': UNSUPPORTED_MEDIA_TYPE,
  'sessions, default limit|a declared length over the default limit (4 MiB)': TOO_LARGE_4MIB,
  'sessions, default limit|a declared length at the default limit (4 MiB), the body shorter': PARSE_ERROR_LEGACY,
  'sessions, default limit|a JSON array of nothing': EMPTY_BATCH,
  'sessions, default limit|JSON null': NOT_JSONRPC,
  'sessions, default limit|a 2025-era tools/list without a session': NOT_INITIALIZED,
};

const handlers: HttpHandler[] = [];
afterEach(async () => {
  await Promise.all(handlers.splice(0).map((h) => h.close()));
});

function handlerWith(options: HttpHandlerOptions): HttpHandler {
  const f = fixture();
  const handler = createHttpHandler(() => f.buildServer(), { onerror: () => {}, ...options });
  handlers.push(handler);
  return handler;
}

/** A POST of `body`, with a `content-length` header of `length` (`undefined`: none; `'exact'`: the body's). */
function post(
  body: string | ReadableStream<Uint8Array>,
  length: number | 'exact' | undefined,
  headers: Record<string, string> = {},
): Request {
  const size = typeof body === 'string' ? new TextEncoder().encode(body).byteLength : undefined;
  const cl = length === 'exact' ? size : length;
  return new Request(URL_, {
    method: 'POST',
    headers: { ...JSON_HEADERS, ...headers, ...(cl !== undefined && { 'content-length': String(cl) }) },
    body,
    ...(typeof body !== 'string' && { duplex: 'half' }),
  } as RequestInit);
}

/** A body sent in chunks (no length known in advance). */
function chunked(text: string, size = 64): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.byteLength) return controller.close();
      controller.enqueue(bytes.slice(at, at + size));
      at += size;
    },
  });
}

async function answered(response: Response): Promise<Answer> {
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // kept as text
  }
  return [response.status, response.headers.get('content-type'), body];
}

const cases: [string, () => Request][] = [
  ['malformed JSON with a length', () => post('{"jsonrpc":', 'exact')],
  ['malformed JSON without a length', () => post(chunked('{"jsonrpc":'), undefined)],
  ['an empty body with length 0', () => post('', 0)],
  ['whitespace only', () => post('   ', 'exact')],
  ['malformed JSON as text/plain', () => post('{"jsonrpc":', 'exact', { 'content-type': 'text/plain' })],
  ['malformed JSON on a session id', () => post('{"jsonrpc":', 'exact', { 'mcp-session-id': 'nope' })],
  ['a declared length over the limit', () => post(listTools, 'exact')],
  ['a body over the limit without a length', () => post(chunked(listTools), undefined)],
  ['a body over the limit under a smaller declared length', () => post(listTools, 10)],
  ['a body over the limit as text/plain under a smaller declared length', () => post(listTools, 10, { 'content-type': 'text/plain' })],
  ['a declared length over the default limit (4 MiB)', () => post('{}', 4 * 1024 * 1024 + 1)],
  ['a declared length at the default limit (4 MiB), the body shorter', () => post('{"jsonrpc":', 4 * 1024 * 1024)],
  ['a JSON array of nothing', () => post('[]', 'exact')],
  ['JSON null', () => post('null', 'exact')],
  ['a 2025-era tools/list without a session', () => post(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }), 'exact')],
];

describe.each([
  ['sessions', { maxRequestBodySize: LIMIT }],
  ['reject', { legacy: 'reject', maxRequestBodySize: LIMIT }],
  ['sessions, default limit', {}],
] as [string, HttpHandlerOptions][])('createHttpHandler (legacy: %s) answers bodies it cannot take as main did', (mode, options) => {
  it.each(cases)('%s', async (name, make) => {
    const handler = handlerWith(options);
    expect(await answered(await handler.fetch(make(), {}))).toEqual(MAIN[`${mode}|${name}`]);
  });
});

describe('createHttpHandler (default options): the common path', () => {
  it('a two-round tool flow clones no Request and no Response (the body read once, the answer passed on as it is)', async () => {
    const f = fixture();
    const handler = createHttpHandler(() => f.buildServer());
    handlers.push(handler);
    const given: Request[] = [];
    const answered: Response[] = [];
    const transport = new StreamableHTTPClientTransport(new URL(URL_), {
      fetch: async (url, init) => {
        const request = new Request(url, init);
        // As node:http's toNodeHandler builds it: the body's length is known.
        if (init?.body !== undefined && typeof init.body === 'string') {
          request.headers.set('content-length', String(new TextEncoder().encode(init.body).byteLength));
        }
        given.push(request);
        const response = await handler.fetch(request, { authInfo: { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } } });
        answered.push(response);
        return response;
      },
    });
    const client = new Client(
      { name: 'e2e', version: '1.0.0' },
      {
        versionNegotiation: { mode: 'auto' },
        capabilities: { elicitation: { form: {} } },
        inputRequired: { autoFulfill: false, maxRounds: 10 },
      },
    );
    await client.connect(transport);
    const requestClone = vi.spyOn(Request.prototype, 'clone');
    const responseClone = vi.spyOn(Response.prototype, 'clone');
    try {
      const r1 = await callTool(client, 'delete_files', { path: '/a' });
      expect(r1.resultType).toBe('input_required');
      const yes = { confirm: { action: 'accept', content: { ok: true } } };
      const r2 = await callTool(client, 'delete_files', { path: '/a' }, { inputResponses: yes, requestState: r1.requestState as string });
      expect(r2.content).toEqual([{ type: 'text', text: 'Deleted /a' }]);
      expect(f.effects).toEqual(['deleted /a']);
      expect([requestClone.mock.calls.length, responseClone.mock.calls.length]).toEqual([0, 0]);
    } finally {
      requestClone.mockRestore();
      responseClone.mockRestore();
    }
    // Every POST of the flow carried a length, and every answer is the one the SDK built (no header added).
    expect(given.filter((r) => r.method === 'POST').every((r) => r.headers.has('content-length'))).toBe(true);
    expect(answered.every((a) => !a.headers.has('retry-after'))).toBe(true);
    await client.close();
  });

  it('a body without a length is served as before (read by the SDK), with the same answer', async () => {
    const f = fixture();
    const handler = createHttpHandler(() => f.buildServer());
    handlers.push(handler);
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    });
    const [withLength, without] = [post(body, 'exact'), post(chunked(body), undefined)];
    const answers = await Promise.all([withLength, without].map((r) => handler.fetch(r, {})));
    expect(answers.map((a) => [a.status, a.headers.get('content-type'), a.headers.has('mcp-session-id')])).toEqual([
      [200, 'text/event-stream', true],
      [200, 'text/event-stream', true],
    ]);
    await Promise.all(answers.map((a) => a.body?.cancel()));
    expect(handler.sessionCount).toBe(2);
  });
});

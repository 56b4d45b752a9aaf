// A minimal MCP 2026-07-28 server behind a `fetch` function, for the tests: every request is one JSON POST, answered
// by the test's `handle`, with faults a network causes (a lost response: the server ran the request, the client gets
// a network error). No timers, no sockets.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

export type Json = Record<string, unknown>;

/** A JSON-RPC error the fake answers with. */
export class RpcFault {
  readonly code: number;
  readonly message: string;
  readonly data: unknown;
  constructor(code: number, message: string, data?: unknown) {
    this.code = code;
    this.message = message;
    this.data = data;
  }
}

/** What the test sees of each request. */
export interface Seen {
  method: string;
  params: Json;
  id: unknown;
}

export interface Fake {
  fetch: typeof fetch;
  /** Every request but `server/discover`, in order. */
  seen: Seen[];
  /** Makes the next `n` responses to requests that pass `test` (after the server handled them) arrive as `error` (a network error). */
  drop(test: (method: string, params: Json) => boolean, n?: number, error?: () => Error): void;
}

const TASKS = 'io.modelcontextprotocol/tasks';

export function fakeServer(
  handle: (method: string, params: Json) => Json | RpcFault | Promise<Json | RpcFault>,
  options: { tasks?: boolean } = {},
): Fake {
  const seen: Seen[] = [];
  const drops: { test: (method: string, params: Json) => boolean; left: number; error: () => Error }[] = [];
  const fetchImpl = async (_url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const message = JSON.parse(String(init?.body)) as { id?: unknown; method: string; params?: Json };
    if (message.id === undefined) return new Response(null, { status: 202 });
    const params = message.params ?? {};
    let answer: Json | RpcFault;
    if (message.method === 'server/discover') {
      answer = {
        resultType: 'complete',
        supportedVersions: ['2026-07-28'],
        capabilities: { tools: {}, prompts: {}, resources: {}, ...(options.tasks === true && { extensions: { [TASKS]: {} } }) },
        serverInfo: { name: 'fake', version: '1.0.0' },
        ttlMs: 0,
        cacheScope: 'private',
      };
    } else {
      seen.push({ method: message.method, params: structuredClone(params), id: message.id });
      answer = await handle(message.method, params);
      const drop = drops.find((d) => d.left > 0 && d.test(message.method, params));
      if (drop !== undefined) {
        drop.left--;
        throw drop.error();
      }
    }
    const body =
      answer instanceof RpcFault
        ? { jsonrpc: '2.0', id: message.id, error: { code: answer.code, message: answer.message, data: answer.data } }
        : { jsonrpc: '2.0', id: message.id, result: answer };
    return new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
  };
  return {
    fetch: fetchImpl as typeof fetch,
    seen,
    drop(test, n = 1, error = () => new TypeError('fetch failed')) {
      drops.push({ test, left: n, error });
    },
  };
}

/** An official client pinned to 2026-07-28 over the fake, answering every form with `answer`. */
export async function connect(fake: Fake, answer: Json = { ok: true }): Promise<Client> {
  const client = new Client(
    { name: 'test', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } } },
  );
  client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: answer as never }));
  await client.connect(new StreamableHTTPClientTransport(new URL('http://fake.test/mcp'), { fetch: fake.fetch }));
  return client;
}

/** A complete tool result with one text block. */
export const text = (value: string, meta?: Json): Json => ({
  resultType: 'complete',
  content: [{ type: 'text', text: value }],
  ...(meta !== undefined && { _meta: meta }),
});

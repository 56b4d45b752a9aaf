import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { generateKey } from '@mrtr/core';
import { Redis as TcpRedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type UpstashRestShim as RestShim, startUpstashRestShim as startRestShim } from '../../../scripts/upstash-rest-shim.mjs';

// The route module, imported twice (two module instances = two serverless instances, two stores on one Upstash),
// its GET/POST handlers called as fetch functions by the official MCP client. Upstash is the REST shim in front of
// Debian's redis-server (REDIS_URL); without Redis the test skips, or fails under MRTR_REQUIRE_SERVICES=1.
const REDIS_URL = process.env.REDIS_URL === '' ? undefined : process.env.REDIS_URL;
if (REDIS_URL === undefined) {
  if (process.env.MRTR_REQUIRE_SERVICES === '1') {
    it('Redis is required (MRTR_REQUIRE_SERVICES=1) but REDIS_URL is not set', () => {
      throw new Error('REDIS_URL must be set when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn('[example-vercel-next] route.test.ts: skipped because REDIS_URL is not set (the Upstash shim needs Redis)');
  }
}

type Handler = (request: Request) => Promise<Response>;
const API_KEY = 'alice-api-key-0123456789';
const yes = { confirm: { action: 'accept', content: { ok: true } } };

describe.skipIf(REDIS_URL === undefined)('Vercel route (mcp-handler 2, Upstash store)', () => {
  let shim: RestShim;
  let redis: TcpRedis;
  const instances: { GET: Handler; POST: Handler }[] = [];
  const auditList = `example:audit:${process.pid}:${Date.now()}`;

  beforeAll(async () => {
    shim = await startRestShim(REDIS_URL as string);
    redis = new TcpRedis(REDIS_URL as string);
    vi.stubEnv('MRTR_KEYS', `k1:${generateKey()}`);
    vi.stubEnv('UPSTASH_REDIS_REST_URL', shim.url);
    vi.stubEnv('UPSTASH_REDIS_REST_TOKEN', shim.token);
    vi.stubEnv('MCP_API_KEYS', `alice=${API_KEY}`);
    vi.stubEnv('AUDIT_LIST', auditList);
    for (let i = 0; i < 2; i++) {
      vi.resetModules();
      instances.push(await import('../app/[transport]/route.ts'));
    }
    vi.unstubAllEnvs();
    expect(instances[0]!.POST).not.toBe(instances[1]!.POST); // two module instances, two stores
  });
  afterAll(async () => {
    await redis?.del(auditList);
    redis?.disconnect();
    await shim?.close();
  });

  /** A client on the route; each request goes to `target.instance`; `target.loseNext` drops the next response after it ran. */
  async function connect(target: { instance: number; loseNext: boolean }, apiKey = API_KEY): Promise<Client> {
    const transport = new StreamableHTTPClientTransport(new URL('https://files.example.com/mcp'), {
      fetch: async (url, init) => {
        const request = new Request(url, init);
        request.headers.set('authorization', `Bearer ${apiKey}`);
        const handler = instances[target.instance]![request.method === 'GET' ? 'GET' : 'POST'];
        const response = await handler(request);
        if (target.loseNext && request.method === 'POST') {
          target.loseNext = false;
          await response.text(); // the function ran to the end; its response never reaches the client
          throw new TypeError('fetch failed (the response was lost)');
        }
        return response;
      },
    });
    const client = new Client(
      { name: 'route-test', version: '1.0.0' },
      { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { form: {} } } as never, inputRequired: { autoFulfill: false } },
    );
    await client.connect(transport);
    return client;
  }
  const call = (client: Client, params: Record<string, unknown> = {}) =>
    client.request(
      { method: 'tools/call', params: { name: 'empty_trash', arguments: {}, ...params } as never },
      { allowInputRequired: true },
    ) as Promise<Record<string, unknown>>;
  const audits = () => redis.llen(auditList);
  const refused = (promise: Promise<unknown>) =>
    promise.then(
      () => 'accepted',
      (error: unknown) => (error instanceof ProtocolError ? 'refused' : String(error)),
    );

  it('asks for confirmation, then runs once on confirmation', async () => {
    const client = await connect({ instance: 0, loseNext: false });
    const before = await audits();
    const first = await call(client);
    expect(first.resultType).toBe('input_required');
    expect(typeof first.requestState).toBe('string');
    const done = await call(client, { inputResponses: yes, requestState: first.requestState });
    expect(done.content).toEqual([{ type: 'text', text: 'Emptied.' }]);
    expect(await audits()).toBe(before + 1);
  });

  it('refuses a tampered state, and a caller without a valid key', async () => {
    const client = await connect({ instance: 0, loseNext: false });
    const before = await audits();
    const first = await call(client);
    const state = first.requestState as string;
    const tampered = state.slice(0, 20) + (state[20] === 'A' ? 'B' : 'A') + state.slice(21);
    expect(await refused(call(client, { inputResponses: yes, requestState: tampered }))).toBe('refused');
    await expect(connect({ instance: 0, loseNext: false }, 'not-a-valid-api-key-000')).rejects.toThrow();
    expect(await audits()).toBe(before);
  });

  it('refuses a replay with other answers on another instance (one ledger for both)', async () => {
    const target = { instance: 0, loseNext: false };
    const client = await connect(target);
    const before = await audits();
    const first = await call(client);
    await call(client, { inputResponses: yes, requestState: first.requestState });
    target.instance = 1;
    const no = { confirm: { action: 'decline' } };
    expect(await refused(call(client, { inputResponses: no, requestState: first.requestState }))).toBe('refused');
    expect(await audits()).toBe(before + 1);
  });

  it('an identical retry after a lost response gets the answer from the other instance; the tool ran once', async () => {
    const target = { instance: 0, loseNext: false };
    const client = await connect(target);
    const before = await audits();
    const first = await call(client);
    target.loseNext = true;
    await expect(call(client, { inputResponses: yes, requestState: first.requestState })).rejects.toThrow();
    expect(await audits()).toBe(before + 1); // it ran: only its response was lost
    target.instance = 1;
    const retried = await call(client, { inputResponses: yes, requestState: first.requestState });
    expect(retried.content).toEqual([{ type: 'text', text: 'Emptied.' }]);
    expect(await audits()).toBe(before + 1);
  });
});

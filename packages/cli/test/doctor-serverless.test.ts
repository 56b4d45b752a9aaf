// `mrtr doctor` on the stores of serverless deployments: Upstash (through the repo's REST shim in front of REDIS_URL),
// DynamoDB (dynalite, in memory, no service to skip for) and the Durable Object store (through its Worker's doctor route).
import { createServer as createHttpServer } from 'node:http';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient, ScanCommand } from '@aws-sdk/client-dynamodb';
import type { ReplayStore } from '@mrtr/core';
import { createDoctorRoute } from '@mrtr/store-cloudflare';
import { createTable } from '@mrtr/store-dynamodb';
import dynalite from 'dynalite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type UpstashRestShim, startUpstashRestShim } from '../../../scripts/upstash-rest-shim.mjs';
import { gateService, KEYS, REDIS_URL, runCli } from './helpers.js';

gateService('doctor-serverless.test.ts', 'REDIS_URL');

const lines = (stdout: string) => stdout.trimEnd().split('\n');
type Line = { name: string; status: string; detail: string };
const checksOf = (stdout: string) => JSON.parse(stdout) as { ok: boolean; stores: string[]; checks: Line[] };

/** A TCP server that accepts connections and never answers: an endpoint that hangs. */
async function silentServer(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

let silent: { url: string; close(): Promise<void> } | undefined;
beforeAll(async () => {
  silent = await silentServer();
});
afterAll(async () => {
  await silent?.close();
});

describe.skipIf(REDIS_URL === undefined)('mrtr doctor on Upstash (the REST shim in front of REDIS_URL)', () => {
  let shim: UpstashRestShim | undefined;
  beforeAll(async () => {
    shim = await startUpstashRestShim(REDIS_URL);
  });
  afterAll(async () => {
    await shim?.close();
  });
  const env = () => ({ MRTR_KEYS: KEYS, UPSTASH_REDIS_REST_URL: shim!.url, UPSTASH_REDIS_REST_TOKEN: shim!.token });

  it('consume, Redis clock, ledger epoch and a probe task: ok; UPSTASH_REDIS_REST_URL selects it by default; the token is never printed', async () => {
    const r = await runCli(['doctor', '--codec', 'hmac'], { env: env() });
    expect(r.code).toBe(0);
    const out = lines(r.stdout);
    expect(out.slice(2)).toEqual([
      expect.stringMatching(
        /^ok {4}upstash +consume of a throwaway id: first accepted, replay refused \(.+ for both\) at http:\/\/127\.0\.0\.1:\d+$/,
      ),
      expect.stringMatching(/^ok {4}upstash clock +(in step with|\d+ ms (ahead of|behind)) this host \(round trip .+; tolerated 5 s\)$/),
      expect.stringMatching(/^ok {4}upstash epoch +the ledger of namespace mrtr-doctor began .+ ago by the store's clock/),
      expect.stringMatching(
        /^ok {4}upstash tasks +probe task created, read, completed and read back \(.+ for all four\) at http:\/\/127\.0\.0\.1:\d+$/,
      ),
      '6 ok, 0 warn, 0 fail',
    ]);
    const j = await runCli(['doctor', '--codec', 'hmac', '--json'], { env: env() });
    expect(checksOf(j.stdout).stores).toEqual(['upstash']);
    for (const text of [r.stdout, r.stderr, j.stdout, j.stderr]) expect(text).not.toContain(shim!.token);
  });

  it("Vercel's KV_REST_API_URL and KV_REST_API_TOKEN are read too", async () => {
    const r = await runCli(['doctor', '--codec', 'hmac', '--store', 'upstash'], {
      env: { MRTR_KEYS: KEYS, KV_REST_API_URL: shim!.url, KV_REST_API_TOKEN: shim!.token },
    });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ok {4}upstash +consume of a throwaway id/m);
  });

  it('a wrong token fails the store and its task store; a missing token fails naming the variable', async () => {
    const r = await runCli(['doctor', '--codec', 'hmac', '--store', 'upstash'], { env: { ...env(), UPSTASH_REDIS_REST_TOKEN: 'wrong' } });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^fail {2}upstash +http:\/\/127\.0\.0\.1:\d+: ERR_STORE_UNAVAILABLE .*Unauthorized/m);
    expect(r.stdout).toMatch(/^fail {2}upstash tasks +probe task: create failed: ERR_STORE_UNAVAILABLE .*Unauthorized/m);
    const m = await runCli(['doctor', '--codec', 'hmac', '--store', 'upstash'], {
      env: { MRTR_KEYS: KEYS, UPSTASH_REDIS_REST_URL: shim!.url },
    });
    expect(m.code).toBe(1);
    expect(m.stdout).toMatch(/^fail {2}upstash +UPSTASH_REDIS_REST_TOKEN \(or KV_REST_API_TOKEN\) is not set$/m);
  });
});

describe('mrtr doctor on Upstash, an endpoint that never answers', () => {
  it('fails within --timeout-ms, the store and its task store', async () => {
    const started = Date.now();
    const r = await runCli(['doctor', '--codec', 'hmac', '--store', 'upstash', '--timeout-ms', '500'], {
      env: { MRTR_KEYS: KEYS, UPSTASH_REDIS_REST_URL: silent!.url, UPSTASH_REDIS_REST_TOKEN: 'token' },
    });
    expect(r.code).toBe(1);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(r.stdout).toMatch(
      /^fail {2}upstash +http:\/\/127\.0\.0\.1:\d+: (upstash did not answer within 1000 ms|ERR_STORE_UNAVAILABLE .*)$/m,
    );
    expect(r.stdout).toMatch(/^fail {2}upstash tasks +probe task: create failed: .*did not answer/m);
  });
});

describe('mrtr doctor on DynamoDB (dynalite)', () => {
  let endpoint = '';
  let server: ReturnType<typeof dynalite> | undefined;
  const client = () => new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
  beforeAll(async () => {
    server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const c = client();
    await createTable(c, 'mrtr-doctor-test', { timeToLive: false });
    c.destroy();
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });
  const aws = (url = endpoint) => ({
    MRTR_KEYS: KEYS,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    AWS_ENDPOINT_URL_DYNAMODB: url,
  });

  it('the table, a consume, the service clock, the ledger epoch and a probe task: ok; the probe items are deleted', async () => {
    const r = await runCli(['doctor', '--codec', 'hmac', '--store', 'dynamodb', '--dynamodb-table', 'mrtr-doctor-test'], { env: aws() });
    expect(r.code).toBe(0);
    const place = `table "mrtr-doctor-test" at ${endpoint}`;
    expect(lines(r.stdout).slice(2)).toEqual([
      'ok    dynamodb table table "mrtr-doctor-test": partition key pk, index heavy (hv, hk), TTL disabled (expired items stay until deleted: TTL on attribute ttl tidies them up)',
      expect.stringMatching(/^ok {4}dynamodb +consume of a throwaway id: first accepted, replay refused \(.+ for both\) in /),
      expect.stringMatching(/^ok {4}dynamodb clock +(in step with|\d+ ms (ahead of|behind)) this host \(round trip .+; tolerated 5 s\)$/),
      expect.stringMatching(/^ok {4}dynamodb epoch +the ledger of namespace mrtr-doctor began .+ ago by the store's clock/),
      `ok    dynamodb tasks probe task created, read, completed and read back (${/\((.+) for all four\)/.exec(r.stdout)?.[1]} for all four) in ${place}`,
      '7 ok, 0 warn, 0 fail',
    ]);
    expect(lines(r.stdout)[3]!.endsWith(` in ${place}`)).toBe(true);
    // What the probes leave: the namespace's epoch and counters, never the throwaway id, the task or its principal.
    const c = client();
    const { Items = [] } = await c.send(new ScanCommand({ TableName: 'mrtr-doctor-test' }));
    c.destroy();
    const kinds = Items.map((item) => item.pk?.S?.split('#')[0]);
    expect(kinds).toContain('e');
    expect(kinds.filter((k) => k === 'r' || k === 't' || k === 'p')).toEqual([]);
  });

  it('MRTR_DYNAMODB_TABLE selects it by default; a table that does not exist fails naming its layout', async () => {
    const r = await runCli(['doctor', '--codec', 'hmac', '--json'], { env: { ...aws(), MRTR_DYNAMODB_TABLE: 'no-such-table' } });
    expect(r.code).toBe(1);
    const report = checksOf(r.stdout);
    expect(report.stores).toEqual(['dynamodb']);
    expect(report.checks.find((c) => c.name === 'dynamodb table')).toEqual({
      name: 'dynamodb table',
      status: 'fail',
      detail:
        'table "no-such-table" does not exist: create it in your infrastructure code (partition key pk, string; index heavy on hv, hk; TTL on ttl), or with createTable for development',
    });
    expect(report.checks.find((c) => c.name === 'dynamodb')?.status).toBe('fail');
  });

  it('without a table: fail, naming --dynamodb-table and MRTR_DYNAMODB_TABLE; a malformed name is a usage error', async () => {
    const r = await runCli(['doctor', '--codec', 'hmac', '--store', 'dynamodb'], { env: aws() });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^fail {2}dynamodb +no table: pass --dynamodb-table NAME \(or set MRTR_DYNAMODB_TABLE\)$/m);
    const bad = await runCli(['doctor', '--store', 'dynamodb', '--dynamodb-table', 'a b'], { env: aws() });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--dynamodb-table \(or MRTR_DYNAMODB_TABLE\) must be 3 to 255/);
  });

  it('an endpoint that never answers fails within --timeout-ms', async () => {
    const started = Date.now();
    const r = await runCli(['doctor', '--codec', 'hmac', '--store', 'dynamodb', '--dynamodb-table', 't-1', '--timeout-ms', '500'], {
      env: aws(silent!.url),
    });
    expect(r.code).toBe(1);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(r.stdout).toMatch(new RegExp(`^fail {2}dynamodb +table "t-1" at ${silent!.url.replaceAll('.', '\\.')}: .*abort`, 'm'));
    expect(r.stdout).toMatch(/^fail {2}dynamodb tasks +probe task: create failed: ERR_STORE_UNAVAILABLE /m);
  });
});

/**
 * A Worker's doctor route (`createDoctorRoute` of @mrtr/store-cloudflare) served by Node over a store that keeps ids
 * in a Set, with a clock `skewMs` off this host's. The same route over the real Durable Objects runs in workerd
 * (store-cloudflare's compliance.test.ts); here it is the CLI's side that is tested.
 */
async function doctorRoute(token: string, skewMs = 0): Promise<{ url: string; close(): Promise<void> }> {
  const seen = new Set<string>();
  const store: ReplayStore = {
    capabilities: { shared: true, keyExchange: false, clock: true, leases: false, epoch: true },
    consume: async (id) => !seen.has(id) && seen.add(id) !== undefined,
    time: async () => Date.now() + skewMs,
    ledgerEpoch: async () => Date.now() - 3_600_000,
    close: async () => {},
  };
  const route = createDoctorRoute({ store, token });
  const server = createHttpServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers = Object.entries(req.headers).map(([k, v]) => [k, String(v)] as [string, string]);
    const method = req.method ?? 'GET';
    const init: RequestInit = method === 'POST' ? { method, headers, body: Buffer.concat(chunks) } : { method, headers };
    const response = await route(new Request(`http://127.0.0.1${req.url}`, init));
    res.writeHead(response.status, { 'content-type': 'application/json' });
    res.end(await response.text());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/.well-known/mrtr-doctor`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

describe("mrtr doctor --store cloudflare (through the Worker's doctor route)", () => {
  const TOKEN = 'cli-test-doctor-token-0123456789abcdef';
  let route: { url: string; close(): Promise<void> } | undefined;
  let skewed: { url: string; close(): Promise<void> } | undefined;
  beforeAll(async () => {
    route = await doctorRoute(TOKEN);
    skewed = await doctorRoute(TOKEN, 120_000);
  });
  afterAll(async () => {
    await route?.close();
    await skewed?.close();
  });

  it("consume, the objects' clock and the ledger epoch: ok; MRTR_DOCTOR_URL selects it by default; the token is never printed", async () => {
    const r = await runCli(['doctor', '--codec', 'hmac'], {
      env: { MRTR_KEYS: KEYS, MRTR_DOCTOR_URL: route!.url, MRTR_DOCTOR_TOKEN: TOKEN },
    });
    expect(r.code).toBe(0);
    expect(lines(r.stdout).slice(2)).toEqual([
      expect.stringMatching(
        /^ok {4}cloudflare +consume of a throwaway id: first accepted, replay refused \(.+ for both\) through http:\/\/127\.0\.0\.1:\d+\/\.well-known\/mrtr-doctor$/,
      ),
      expect.stringMatching(/^ok {4}cloudflare clock +/),
      expect.stringMatching(/^ok {4}cloudflare epoch +the ledger of namespace .+ began 1 ?h/),
      '5 ok, 0 warn, 0 fail',
    ]);
    expect(r.stdout + r.stderr).not.toContain(TOKEN);
  });

  it("a wrong token, a clock off by 2 min, or no URL: the store's line fails and says why", async () => {
    const wrong = await runCli(['doctor', '--codec', 'hmac', '--store', 'cloudflare'], {
      env: { MRTR_KEYS: KEYS, MRTR_DOCTOR_URL: route!.url, MRTR_DOCTOR_TOKEN: `${TOKEN}-old` },
    });
    expect(wrong.code).toBe(1);
    expect(wrong.stdout).toMatch(
      /^fail {2}cloudflare +.*answered 401: unauthorized \(MRTR_DOCTOR_TOKEN is not the token the Worker was given\)$/m,
    );
    const off = await runCli(['doctor', '--codec', 'hmac', '--store', 'cloudflare'], {
      env: { MRTR_KEYS: KEYS, MRTR_DOCTOR_URL: skewed!.url, MRTR_DOCTOR_TOKEN: TOKEN },
    });
    expect(off.code).toBe(1);
    expect(off.stdout).toMatch(/^fail {2}cloudflare clock +/m);
    const none = await runCli(['doctor', '--codec', 'hmac', '--store', 'cloudflare'], { env: { MRTR_KEYS: KEYS } });
    expect(none.code).toBe(1);
    expect(none.stdout).toMatch(/^fail {2}cloudflare +MRTR_DOCTOR_URL is not set: the URL of the Worker's doctor route/m);
  });
});

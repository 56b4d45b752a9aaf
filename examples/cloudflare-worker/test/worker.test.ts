// The example Worker under workerd (npm `workerd`), driven over HTTP on 127.0.0.1. Two Worker services, `a` and
// `b`, run the same bundle in two isolates, both bound to one Durable Object namespace (the object lives with `a`):
// a retry that reaches the other isolate meets the same ledger, as on Cloudflare. MRTR rounds go through the
// official client (@modelcontextprotocol/client 2.4.0); the tasks through plain JSON-RPC POSTs, because that
// client does not know the tasks extension's wire shapes ("Unsupported result type 'task'").
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bundleWorker,
  findWorkerd,
  freePort,
  REQUIRE_SERVICES,
  startWorkerd,
  type Workerd,
  workDir,
} from '../../../packages/store-cloudflare/test/workerd/harness.js';

const TOKEN = 'example-token-0123456789abcdef';
const PROTOCOL = '2026-07-28';
const TASKS = 'io.modelcontextprotocol/tasks';
const found = findWorkerd();

const worker = (name: string, keys: string, extra: string) => `const ${name} :Workerd.Worker = (
  modules = [(name = "worker", esModule = embed "worker.js")],
  compatibilityDate = "2025-09-01",
  compatibilityFlags = ["nodejs_compat"],
  bindings = [
    (name = "MRTR_KEYS", text = ${JSON.stringify(keys)}),
    (name = "API_TOKENS", text = ${JSON.stringify(JSON.stringify({ [TOKEN]: 'alice' }))}),
    (name = "AUDIENCE", text = "https://mrtr-example.test/mcp"),
    ${extra}
  ],
  ${name === 'a' ? 'durableObjectNamespaces = [(className = "MrtrStoreObject", uniqueKey = "mrtr-example", enableSql = true)],\n  durableObjectStorage = (localDisk = "disk"),' : ''}
);`;

const config = (ports: [number, number], dir: string, keys: string) => `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "a", worker = .a),
    (name = "b", worker = .b),
    (name = "disk", disk = (path = ${JSON.stringify(dir)}, writable = true)),
  ],
  sockets = [
    (name = "a", address = "127.0.0.1:${ports[0]}", http = (), service = "a"),
    (name = "b", address = "127.0.0.1:${ports[1]}", http = (), service = "b"),
  ],
);
${worker('a', keys, '(name = "MRTR_STORE", durableObjectNamespace = "MrtrStoreObject"),')}
${worker('b', keys, '(name = "MRTR_STORE", durableObjectNamespace = (serviceName = "a", className = "MrtrStoreObject")),')}
`;

type Json = Record<string, unknown>;
const accept = (content: Json) => ({ action: 'accept', content });

async function connect(url: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${TOKEN}` } } });
  const client = new Client(
    { name: 'cloudflare-example-test', version: '1.0.0' },
    {
      versionNegotiation: { mode: 'auto' },
      capabilities: { elicitation: { form: {} } },
      inputRequired: { autoFulfill: false, maxRounds: 10 },
    },
  );
  await client.connect(transport);
  return client;
}

const callTool = async (client: Client, name: string, args: Json, extra: Json = {}) =>
  (await client.request(
    { method: 'tools/call', params: { name, arguments: args, ...extra } as never },
    { allowInputRequired: true },
  )) as Json;

const errorOf = async (promise: Promise<unknown>): Promise<ProtocolError> => {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(ProtocolError);
    return error as ProtocolError;
  }
  throw new Error('was accepted');
};

const textOf = (result: Json): string => ((result.content as { text: string }[] | undefined) ?? []).map((c) => c.text).join('');

/** One JSON-RPC request to a Worker over HTTP, with the 2026-07-28 headers and the tasks extension declared. */
let rpcId = 0;
async function rpc(url: string, method: string, params: Json): Promise<Json> {
  const name = typeof params.name === 'string' ? params.name : typeof params.taskId === 'string' ? params.taskId : undefined;
  const meta = {
    'io.modelcontextprotocol/protocolVersion': PROTOCOL,
    'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} }, extensions: { [TASKS]: {} } },
  };
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TOKEN}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL,
      'mcp-method': method,
      ...(name !== undefined && { 'mcp-name': name }),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params: { ...params, _meta: meta } }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await response.text();
  const data = text.trim().startsWith('{') ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? '');
  const json = JSON.parse(data) as { result?: Json; error?: { code: number; message: string } };
  if (json.error !== undefined) throw new Error(`${method}: ${json.error.code} ${json.error.message}`);
  return json.result!;
}

/** Polls tasks/get (on `url`) until `done` holds: bounded by a number of polls, each waiting for the server's answer. */
async function until(url: string, taskId: string, done: (task: Json) => boolean): Promise<Json> {
  let task: Json = {};
  for (let i = 0; i < 200; i++) {
    task = await rpc(url, 'tasks/get', { taskId });
    if (done(task)) return task;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`task never reached the expected state: ${JSON.stringify(task)}`);
}

if ('problem' in found) {
  if (REQUIRE_SERVICES) {
    it('workerd is required (MRTR_REQUIRE_SERVICES=1)', () => {
      throw new Error(found.problem);
    });
  } else {
    console.warn(`[example-cloudflare-worker] worker.test.ts: skipped, ${found.problem}`);
    it.skip(`workerd: ${found.problem}`, () => {});
  }
} else {
  describe('the example Worker in workerd: two isolates on one Durable Object namespace', () => {
    let workerd: Workerd | undefined;
    let a = '';
    let b = '';
    let clientA: Client;
    let clientB: Client;
    beforeAll(async () => {
      const dir = workDir();
      await bundleWorker(fileURLToPath(new URL('../src/worker.ts', import.meta.url)), join(dir, 'worker.js'));
      mkdirSync(join(dir, 'objects'));
      const ports: [number, number] = [await freePort(), await freePort()];
      a = `http://127.0.0.1:${ports[0]}/mcp`;
      b = `http://127.0.0.1:${ports[1]}/mcp`;
      const keys = `k1:${randomBytes(32).toString('base64url')}`;
      workerd = await startWorkerd(found.bin, dir, config(ports, join(dir, 'objects'), keys), `http://127.0.0.1:${ports[1]}/`);
      clientA = await connect(a);
      clientB = await connect(b);
    }, 120_000);
    afterAll(async () => {
      await clientA?.close();
      await clientB?.close();
      await workerd?.stop();
    });

    it('refuses a request without a known bearer token (401)', async () => {
      const response = await fetch(a, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
      expect(response.status).toBe(401);
      await response.text();
    });

    it('a confirmation flow completes: the client answers the elicitation and retries with the sealed state', async () => {
      const client = new Client(
        { name: 'auto', version: '1.0.0' },
        {
          versionNegotiation: { mode: 'auto' },
          capabilities: { elicitation: { form: {} } },
          inputRequired: { autoFulfill: true, maxRounds: 5 },
        },
      );
      const asked: string[] = [];
      client.setRequestHandler('elicitation/create', async (request) => {
        asked.push(String((request.params as { message?: unknown }).message));
        return accept({ ok: true }) as never;
      });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(a), { requestInit: { headers: { authorization: `Bearer ${TOKEN}` } } }),
      );
      try {
        const result = await client.callTool({ name: 'delete_files', arguments: { path: '/srv/a' } });
        expect(textOf(result as Json)).toMatch(/^Deleted \/srv\/a \(run [0-9a-f]{8}\)$/);
        expect(asked).toEqual(['Delete /srv/a?']);
      } finally {
        await client.close();
      }
    });

    it('a tampered state is refused on either isolate, with the opaque -32602', async () => {
      const r1 = await callTool(clientA, 'delete_files', { path: '/srv/t' });
      expect(r1.resultType).toBe('input_required');
      const state = String(r1.requestState);
      const i = Math.floor(state.length / 2);
      const tampered = `${state.slice(0, i)}${state[i] === 'A' ? 'B' : 'A'}${state.slice(i + 1)}`;
      for (const client of [clientA, clientB]) {
        const error = await errorOf(
          callTool(
            client,
            'delete_files',
            { path: '/srv/t' },
            { requestState: tampered, inputResponses: { confirm: accept({ ok: true }) } },
          ),
        );
        expect(error.code).toBe(-32602);
        expect(error.message).toBe('Invalid or expired requestState');
      }
    });

    it('an identical retry that reaches the other isolate after a lost response gets the same answer; a replay there is refused', async () => {
      const r1 = await callTool(clientA, 'delete_files', { path: '/srv/r' });
      expect(r1.resultType).toBe('input_required');
      const round2 = { requestState: r1.requestState, inputResponses: { confirm: accept({ ok: true }) } };
      // The answer of the first attempt is "lost" (the client never used it): it retries on the other isolate.
      const first = await callTool(clientA, 'delete_files', { path: '/srv/r' }, round2);
      const retried = await callTool(clientB, 'delete_files', { path: '/srv/r' }, round2);
      expect(textOf(first)).toMatch(/^Deleted \/srv\/r \(run [0-9a-f]{8}\)$/);
      expect(textOf(retried)).toBe(textOf(first)); // the same run: the round ran once, its recorded outcome came back
      // Another answer with the same state, on the other isolate: a replay.
      const replay = await errorOf(
        callTool(clientB, 'delete_files', { path: '/srv/r' }, { ...round2, inputResponses: { confirm: accept({ ok: false }) } }),
      );
      expect(replay.code).toBe(-32602);
      // A state spent on b is spent for a too (the ledger is the Durable Object, not the isolate).
      const s1 = await callTool(clientB, 'delete_files', { path: '/srv/s' });
      await callTool(
        clientB,
        'delete_files',
        { path: '/srv/s' },
        { requestState: s1.requestState, inputResponses: { confirm: accept({ ok: true }) } },
      );
      const again = await errorOf(
        callTool(
          clientA,
          'delete_files',
          { path: '/srv/s' },
          { requestState: s1.requestState, inputResponses: { confirm: accept({ ok: false }) } },
        ),
      );
      expect(again.code).toBe(-32602);
    });

    it('a task with approval midway completes: created on a, its work kept alive by waitUntil, answered on b', async () => {
      const created = await rpc(a, 'tools/call', { name: 'deploy', arguments: { service: 'api' } });
      expect(created.resultType).toBe('task');
      const taskId = String(created.taskId);
      const waiting = await until(b, taskId, (task) => task.status === 'input_required');
      expect(Object.keys(waiting.inputRequests as Json)).toEqual(['approve']);
      expect(waiting.statusMessage).toBe('built api, waiting for approval');
      await rpc(b, 'tasks/update', { taskId, inputResponses: { approve: accept({ approve: true }) } });
      const done = await until(a, taskId, (task) => task.status === 'completed' || task.status === 'failed');
      expect(done.status).toBe('completed');
      expect(textOf(done.result as Json)).toMatch(/^Deployed api \(run [0-9a-f]{8}\)$/);
    });

    it('a task answered on the isolate that runs its work (another request there wakes it) completes too', async () => {
      const created = await rpc(a, 'tools/call', { name: 'deploy', arguments: { service: 'web' } });
      const taskId = String(created.taskId);
      await until(a, taskId, (task) => task.status === 'input_required');
      await rpc(a, 'tasks/update', { taskId, inputResponses: { approve: accept({ approve: false }) } });
      const done = await until(b, taskId, (task) => task.status === 'completed' || task.status === 'failed');
      expect(done.status).toBe('completed');
      expect(textOf(done.result as Json)).toBe('Not deployed: web');
    });
  });
}

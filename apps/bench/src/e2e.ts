import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { toNodeHandler } from '@modelcontextprotocol/node';
import {
  type AuthInfo,
  acceptedContent,
  createMcpHandler,
  createRequestStateCodec,
  inputRequired,
  McpServer,
  type ServerOptions,
} from '@modelcontextprotocol/server';
import { KeyRing, type ReplayStore, type StateCodec } from '@mrtr/core';
import * as z from 'zod/v4';
import type { Job } from './harness.js';
import { loadFunction } from './load.js';
import { replayTables } from './stores.js';

/**
 * End to end in one process: the official client (`@modelcontextprotocol/client` 2.4.0, auto-fulfil on)
 * drives `createMcpHandler(...).fetch` of `@modelcontextprotocol/server` 2.4.0 through the Streamable HTTP
 * client transport with an in-process `fetch` (no sockets). One op = one whole two-round flow of a
 * confirmation tool: round 1 answers input_required (one form elicitation plus a state), the client answers
 * the elicitation and retries with the state, round 2 checks the answer and the state and completes.
 *
 * Rows h and i take the same flow over real sockets: a `node:http` server on 127.0.0.1 (`toNodeHandler` of
 * `@modelcontextprotocol/node`, as a Node deployment serves it) and the client's global `fetch`, both in this process.
 * h serves the unprotected tool with the SDK's `createMcpHandler`; i serves mrtr through `createHttpHandler` of
 * `@mrtr/mcp-server/http` with its defaults (recording on, legacy sessions served), so i ÷ h is what the HTTP path
 * costs a Node server in all (the guard, the codec, the larger messages, the handler's own wrapping).
 */
export const E2E_CONCURRENCY = [1, 16] as const;

export interface E2eRow {
  /** a–g of the issue. */
  letter: string;
  id: string;
  label: string;
  kind: 'sdk' | 'mrtr';
  store: 'none' | 'memory' | 'redis' | 'postgres';
  client: Client;
  /** The row its ratios divide by: `sdk-plain` (a) in process, `sdk-plain-http` (h) over loopback HTTP. */
  baseline: 'sdk-plain' | 'sdk-plain-http';
  /** Before each round, outside timing (fresh memory store). */
  prepare?: () => Promise<void>;
}

export interface E2eSetup {
  rows: E2eRow[];
  skipped: { id: string; label: string; reason: string }[];
  notes: string[];
  close(): Promise<void>;
}

const AUDIENCE = 'https://files.example/mcp';
export const PATH = '/srv/app/tmp/cache-1';
const RUN_TAG = randomBytes(6).toString('hex');
const AUTH: AuthInfo = { token: 'bench-token', clientId: 'bench-client', scopes: [], extra: { sub: 'user-7f3a9c2e' } };
const confirmSchema = {
  type: 'object' as const,
  properties: { ok: { type: 'boolean' as const, title: 'Really?' } },
  required: ['ok'],
};
const pathSchema = z.object({ path: z.string() });

/** A client connected to an in-process handler, auto-fulfilling the confirmation with `{ ok: true }`. */
export async function connectClient(buildServer: () => McpServer): Promise<Client> {
  const handler = createMcpHandler(() => buildServer(), { legacy: 'reject' });
  return connectTransport(
    new StreamableHTTPClientTransport(new URL('http://bench.local/mcp'), {
      fetch: (url, init) => handler.fetch(new Request(url, init), { authInfo: AUTH }),
    }),
  );
}

async function connectTransport(transport: StreamableHTTPClientTransport): Promise<Client> {
  const client = new Client(
    { name: 'bench', version: '1.0.0' },
    {
      versionNegotiation: { mode: 'auto' },
      capabilities: { elicitation: { form: {} } },
      inputRequired: { autoFulfill: true, maxRounds: 4 },
    },
  );
  client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { ok: true } }));
  await client.connect(transport);
  return client;
}

type FetchHandler = Parameters<typeof toNodeHandler>[0];
type NodeRequest = Parameters<ReturnType<typeof toNodeHandler>>[0];

/**
 * Serves `handler` on 127.0.0.1 (a free port) as a Node deployment does, the bench principal set as `req.auth` (what a
 * bearer-auth middleware in front would set), and connects a client to it through the global `fetch`.
 */
async function connectOverHttp(handler: FetchHandler): Promise<{ client: Client; close(): Promise<void> }> {
  const serve = toNodeHandler(handler);
  const server = createServer((req, res) => {
    // Node types `method` and `url` as optional, the adapter's structural type as plain strings: a server's request has both.
    void serve(Object.assign(req, { auth: AUTH }) as IncomingMessage & NodeRequest, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const client = await connectTransport(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
  return {
    client,
    close: async () => {
      await client.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** (a) and (b): the SDK alone; `codec` seals the state with `createRequestStateCodec`, otherwise it travels as plain base64url JSON. */
function sdkServer(codec: ReturnType<typeof createRequestStateCodec<{ path: string }>> | undefined): () => McpServer {
  const options: ServerOptions | undefined = codec === undefined ? undefined : { requestState: { verify: codec.verify } };
  return () => {
    const server = new McpServer({ name: 'bench', version: '1.0.0' }, options);
    server.registerTool('delete_files', { inputSchema: pathSchema }, async ({ path }, ctx) => {
      const confirm = acceptedContent<{ ok: boolean }>(ctx.mcpReq.inputResponses, 'confirm');
      if (!confirm) {
        const state = { path };
        return inputRequired({
          inputRequests: { confirm: inputRequired.elicit({ message: `Delete ${path}?`, requestedSchema: confirmSchema }) },
          requestState: codec === undefined ? Buffer.from(JSON.stringify(state)).toString('base64url') : await codec.mint(state),
        });
      }
      const raw = ctx.mcpReq.requestState<unknown>();
      const state =
        codec === undefined
          ? (JSON.parse(Buffer.from(String(raw), 'base64url').toString('utf8')) as { path?: unknown })
          : (raw as { path?: unknown } | undefined);
      if (state?.path !== path) return { content: [{ type: 'text', text: 'state mismatch' }], isError: true };
      return { content: [{ type: 'text', text: confirm.ok ? `Deleted ${path}` : 'Kept.' }] };
    });
    return server;
  };
}

export type CreateMrtr = typeof import('@mrtr/mcp-server').createMrtr;
export type CodecFactory = (keys: KeyRing) => StateCodec;

/**
 * (c)–(g): the mcp-server adapter with a codec and a store. `recordOutcomes` is passed on only when given (the
 * rows c–g leave the adapter's default; the outcome rows set it both ways).
 */
/**
 * The per-principal bounds off: one bench principal mints and records far more in a state lifetime than a server lets
 * one user (the default mint quota of a memory store, 1 MiB of outcomes), and the rows measure the path that keeps
 * every outcome, not the cheaper "done, not kept" one.
 */
export const UNBOUNDED_PRINCIPAL = { mintQuota: false, outcomeQuota: { maxBytes: Number.MAX_SAFE_INTEGER } } as const;

export function mrtrServer(
  createMrtr: CreateMrtr,
  codec: CodecFactory,
  store: ReplayStore,
  keys: KeyRing,
  recordOutcomes?: boolean,
): () => McpServer {
  const mrtr = createMrtr({
    keys,
    codec,
    store,
    audience: AUDIENCE,
    ...UNBOUNDED_PRINCIPAL,
    ...(recordOutcomes === undefined ? {} : { recordOutcomes }),
  });
  return () => {
    const server = new McpServer({ name: 'bench', version: '1.0.0' }, { ...mrtr.serverOptions });
    mrtr.registerTool(server, 'delete_files', { inputSchema: pathSchema }, async ({ path }, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      if (confirm.action !== 'accept') return need.fail(`Not deleted: ${confirm.action}`);
      return { content: [{ type: 'text', text: confirm.content.ok ? `Deleted ${path}` : 'Kept.' }] };
    });
    return server;
  };
}

type CreateHttpHandler = typeof import('@mrtr/mcp-server/http').createHttpHandler;

/**
 * A memory store made fresh before each round (outside timing) behind a delegate the adapter keeps: each round starts
 * from an empty ledger. The in-process rows see its `consume` alone (no outcome recording, as they always have);
 * `whole` forwards every member the store has but its clock and epoch (claim and record, leases: the adapter's
 * defaults run, recording included).
 */
function freshMemory(
  factory: MemoryFactory,
  namespace: string,
  closers: (() => Promise<unknown> | unknown)[],
  whole = false,
): { store: ReplayStore; prepare(): Promise<void> } {
  const make = () => factory({ maxEntries: 4_000_000, namespace, ...OUTCOME_BUDGET });
  let store = make();
  closers.push(() => store.close());
  const consumeOnly: ReplayStore = {
    capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
    consume: (id, expiresAtMs) => store.consume(id, expiresAtMs),
    close: async () => {},
  };
  // Its clock and epoch are not passed on: a fresh store every round starts a new ledger, which would refuse the
  // states minted with the epoch the guard learned before (as it refuses them after a store that lost its data).
  const forwardAll = new Proxy(consumeOnly, {
    get(_target, key) {
      if (key === 'close') return consumeOnly.close;
      if (key === 'capabilities') return { ...store.capabilities, clock: false, epoch: false };
      const value: unknown = Reflect.get(store, key);
      return typeof value === 'function' ? value.bind(store) : value;
    },
    has: (_target, key) => Reflect.has(store, key),
  });
  return {
    store: whole ? forwardAll : consumeOnly,
    async prepare() {
      await store.close();
      store = make();
    },
  };
}

/** Every end-to-end store keeps every outcome (no store-wide budget reached): the kept path is what is measured. */
const OUTCOME_BUDGET = { outcomeBudgetBytes: 2 ** 40 } as const;
type Budget = { outcomeBudgetBytes?: number };
type MemoryFactory = (options: { maxEntries?: number; namespace?: string } & Budget) => ReplayStore & { close(): Promise<void> | void };
type RedisFactory = (options: { url: string; namespace?: string } & Budget) => ReplayStore & { close(): Promise<void> };
type PostgresFactory = (options: { connectionString: string; table?: string; namespace?: string } & Budget) => ReplayStore & {
  ensureSchema(): Promise<void>;
  close(): Promise<void>;
};

export interface E2eEnv {
  redisUrl?: string | undefined;
  databaseUrl?: string | undefined;
}

/** Every e2e row; Redis and PostgreSQL rows need `REDIS_URL` / `DATABASE_URL` and are skipped with a note otherwise. */
export async function setupE2e(env: E2eEnv): Promise<E2eSetup> {
  const rows: E2eRow[] = [];
  const skipped: E2eSetup['skipped'] = [];
  const notes: string[] = [];
  const closers: (() => Promise<unknown> | unknown)[] = [];
  const add = async (row: Omit<E2eRow, 'client' | 'baseline'>, build: () => McpServer): Promise<void> => {
    const client = await connectClient(build);
    closers.push(() => client.close());
    rows.push({ ...row, client, baseline: 'sdk-plain' });
  };

  await add(
    { letter: 'a', id: 'sdk-plain', label: 'SDK only, state unprotected (base64url JSON)', kind: 'sdk', store: 'none' },
    sdkServer(undefined),
  );
  const sdkCodec = createRequestStateCodec<{ path: string }>({ key: randomBytes(32) });
  await add(
    { letter: 'b', id: 'sdk-codec', label: 'SDK createRequestStateCodec (HMAC, no bind)', kind: 'sdk', store: 'none' },
    sdkServer(sdkCodec),
  );

  const adapter = await loadFunction<CreateMrtr>('@mrtr/mcp-server', 'createMrtr');
  const memory = await loadFunction<MemoryFactory>('@mrtr/store-memory', 'createMemoryStore');
  if (!adapter.ok || !memory.ok) {
    const reason = adapter.ok ? (memory as { reason: string }).reason : adapter.reason;
    skipped.push({ id: 'mrtr', label: '@mrtr/mcp-server rows', reason });
    return { rows, skipped, notes, close: async () => closeAll(closers) };
  }
  const keys = new KeyRing([{ kid: 'k1', secret: new Uint8Array(randomBytes(32)) }]);
  const codecs: { letter: string; id: string; specifier: string; factory: string }[] = [
    { letter: 'c', id: 'hmac', specifier: '@mrtr/codec-hmac', factory: 'createHmacCodec' },
    { letter: 'd', id: 'jwe', specifier: '@mrtr/codec-jwe', factory: 'createJweCodec' },
    { letter: 'e', id: 'aead', specifier: '@mrtr/codec-aead', factory: 'createAeadCodec' },
  ];
  let hmac: CodecFactory | undefined;
  for (const spec of codecs) {
    const codec = await loadFunction<CodecFactory>(spec.specifier, spec.factory);
    if (!codec.ok) {
      skipped.push({ id: `mrtr-${spec.id}`, label: spec.specifier, reason: codec.reason });
      continue;
    }
    if (spec.id === 'hmac') hmac = codec.value;
    const fresh = freshMemory(memory.value, `e2e-${spec.id}`, closers);
    await add(
      {
        letter: spec.letter,
        id: `mrtr-${spec.id}`,
        label: `mrtr ${spec.specifier} + @mrtr/store-memory`,
        kind: 'mrtr',
        store: 'memory',
        prepare: fresh.prepare,
      },
      mrtrServer(adapter.value, codec.value, fresh.store, keys),
    );
  }
  if (hmac === undefined) return { rows, skipped, notes, close: async () => closeAll(closers) };

  // h and i: over loopback HTTP, each row divided by h.
  const overHttp = async (row: Omit<E2eRow, 'client' | 'baseline'>, handler: FetchHandler): Promise<void> => {
    const served = await connectOverHttp(handler);
    closers.push(() => served.close());
    rows.push({ ...row, client: served.client, baseline: 'sdk-plain-http' });
  };
  await overHttp(
    { letter: 'h', id: 'sdk-plain-http', label: 'SDK only, state unprotected, over loopback HTTP', kind: 'sdk', store: 'none' },
    createMcpHandler(sdkServer(undefined), { legacy: 'reject' }),
  );
  const createHttpHandler = await loadFunction<CreateHttpHandler>('@mrtr/mcp-server/http', 'createHttpHandler');
  if (createHttpHandler.ok) {
    const fresh = freshMemory(memory.value, 'e2e-http', closers, true);
    await overHttp(
      {
        letter: 'i',
        id: 'mrtr-hmac-http',
        label: 'mrtr @mrtr/codec-hmac + @mrtr/store-memory (recording on), `createHttpHandler` over loopback HTTP',
        kind: 'mrtr',
        store: 'memory',
        prepare: fresh.prepare,
      },
      createHttpHandler.value(mrtrServer(adapter.value, hmac, fresh.store, keys)),
    );
  } else {
    skipped.push({ id: 'mrtr-hmac-http', label: '@mrtr/mcp-server/http', reason: createHttpHandler.reason });
  }

  if (env.redisUrl === undefined || env.redisUrl === '') {
    notes.push('REDIS_URL is not set: e2e row f (hmac + Redis) skipped.');
  } else {
    const redis = await loadFunction<RedisFactory>('@mrtr/store-redis', 'createRedisStore');
    if (redis.ok) {
      const store = redis.value({ url: env.redisUrl, namespace: `mrtr-bench-e2e:${RUN_TAG}`, ...OUTCOME_BUDGET });
      closers.push(() => store.close());
      await add(
        { letter: 'f', id: 'mrtr-hmac-redis', label: 'mrtr @mrtr/codec-hmac + @mrtr/store-redis', kind: 'mrtr', store: 'redis' },
        mrtrServer(adapter.value, hmac, store, keys),
      );
    } else {
      skipped.push({ id: 'mrtr-hmac-redis', label: '@mrtr/store-redis', reason: redis.reason });
    }
  }
  if (env.databaseUrl === undefined || env.databaseUrl === '') {
    notes.push('DATABASE_URL is not set: e2e row g (hmac + PostgreSQL) skipped.');
  } else {
    const pg = await loadFunction<PostgresFactory>('@mrtr/store-sql', 'createPostgresStore');
    if (pg.ok) {
      const table = `mrtr_bench_e2e_${RUN_TAG}`;
      const store = pg.value({ connectionString: env.databaseUrl, table, namespace: 'e2e', ...OUTCOME_BUDGET });
      await store.ensureSchema();
      closers.push(() => dropTable(env.databaseUrl, table));
      closers.push(() => store.close());
      await add(
        {
          letter: 'g',
          id: 'mrtr-hmac-postgres',
          label: 'mrtr @mrtr/codec-hmac + @mrtr/store-sql (PostgreSQL)',
          kind: 'mrtr',
          store: 'postgres',
        },
        mrtrServer(adapter.value, hmac, store, keys),
      );
    } else {
      skipped.push({ id: 'mrtr-hmac-postgres', label: '@mrtr/store-sql', reason: pg.reason });
    }
  }
  return { rows, skipped, notes, close: async () => closeAll(closers) };
}

/** Drops a replay table of this run and its side tables, best effort (its name is the run's own). */
export async function dropTable(connectionString: string | undefined, table: string): Promise<void> {
  const { default: pgModule } = await import('pg');
  const client = new pgModule.Client({ connectionString });
  try {
    await client.connect();
    for (const t of replayTables(table)) await client.query(`DROP TABLE IF EXISTS "${t}"`);
  } catch {
    // best effort: the table is named after this run
  } finally {
    await client.end().catch(() => {});
  }
}

export async function closeAll(closers: (() => Promise<unknown> | unknown)[]): Promise<void> {
  // Last opened, first closed (clients before their stores, the table drop after its store).
  for (const close of closers.reverse()) {
    try {
      await close();
    } catch {
      // closing is best effort
    }
  }
}

export class E2eCheckFailure extends Error {}

export const flow = (client: Client) => client.callTool({ name: 'delete_files', arguments: { path: PATH } });

/** Before timing: every row completes the flow with the confirmed text (two rounds, the state checked). */
export async function checkE2e(setup: E2eSetup): Promise<string[]> {
  const checks: string[] = [];
  for (const row of setup.rows) {
    const result = (await flow(row.client)) as { content?: { type: string; text?: string }[]; isError?: boolean };
    const text = result.content?.[0]?.text;
    if (result.isError === true || text !== `Deleted ${PATH}`) {
      throw new E2eCheckFailure(`e2e ${row.id}: expected "Deleted ${PATH}", got ${JSON.stringify(result)}`);
    }
    checks.push(`${row.letter} ${row.id}: two-round flow completes`);
  }
  return checks;
}

/** One job per row and concurrency: one op = one whole flow. */
export function e2eJobs(setup: E2eSetup): Job[] {
  const jobs: Job[] = [];
  for (const c of E2E_CONCURRENCY) {
    for (const row of setup.rows) {
      jobs.push({
        key: `e2e|${row.id}|c${c}`,
        concurrency: c,
        // A flow takes ~0.1–1 ms in process and more with a network store: larger samples.
        batchMs: row.store === 'redis' || row.store === 'postgres' ? 60 : 40,
        ...(row.prepare === undefined ? {} : { prepare: row.prepare }),
        op: () => flow(row.client),
      });
    }
  }
  return jobs;
}

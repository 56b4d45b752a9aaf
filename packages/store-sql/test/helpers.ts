import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { PgPoolLike, PgQueryConfigLike } from '../src/index.js';

const here = dirname(fileURLToPath(import.meta.url));
export const packageDir = join(here, '..');

/** The replay table's columns, sorted (as ensureSchema leaves them). */
export const REPLAY_COLUMNS = ['expires_at', 'fence', 'fp', 'id', 'lease_until', 'misses', 'ns', 'outcome', 'owner'];

/** A table name unique to this test run (valid identifier, ≤ 48 characters). */
export function uniqueTable(tag: string): string {
  return `mrtr_${tag}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'mrtr-store-sql-'));
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// PostgreSQL availability: skip with a printed reason when DATABASE_URL is unset, unless
// MRTR_REQUIRE_SERVICES=1, where a missing or unreachable server fails.

export const DATABASE_URL = process.env.DATABASE_URL;
export const REQUIRE_SERVICES = process.env.MRTR_REQUIRE_SERVICES === '1';
export const skipPostgres = DATABASE_URL === undefined || DATABASE_URL === '';

export function postgresSkipReason(file: string): void {
  if (!skipPostgres) return;
  if (REQUIRE_SERVICES) return; // the file registers a failing test instead
  console.warn(`[store-sql] ${file}: PostgreSQL tests skipped because DATABASE_URL is not set`);
}

/** Fails fast (clear message) when the configured server does not answer. */
export async function assertPostgresReachable(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (error) {
    throw new Error(`PostgreSQL at DATABASE_URL is unreachable: ${(error as Error).message}`, { cause: error });
  } finally {
    await client.end().catch(() => {});
  }
}

export async function dropTables(url: string, tables: readonly string[]): Promise<void> {
  if (tables.length === 0) return;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    // With the stores' side tables: the replay store's outcome budget, the task store's namespace counts.
    for (const table of tables)
      await client.query(`DROP TABLE IF EXISTS "${table}", "${table}_budget", "${table}_counts", "${table}_epoch"`);
  } finally {
    await client.end();
  }
}

/** `DATABASE_URL` with host/port replaced (to route through a proxy or to a dead port). */
export function withHostPort(url: string, host: string, port: number): string {
  const parsed = new URL(url);
  parsed.hostname = host;
  parsed.port = String(port);
  return parsed.toString();
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy under the test's control, used to cut PostgreSQL off without touching the server.

export interface TcpProxy {
  readonly port: number;
  /** Connections currently open through the proxy. */
  readonly connections: number;
  /** Stops listening and destroys every open connection (the server stays up). */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
  /** Keeps accepting but stops forwarding bytes in both directions (a black hole). */
  stall(): void;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const clients = new Set<net.Socket>();
  let stalled = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    clients.add(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      clients.delete(client);
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (chunk) => {
      if (!stalled) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!stalled) client.write(chunk);
    });
  });
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  await listen(0);
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    get connections() {
      return clients.size;
    },
    async stop() {
      stalled = false;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      clients.clear();
      await closed;
    },
    start: () => listen(port),
    stall() {
      stalled = true;
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Child processes: TypeScript entries are bundled with esbuild (tsup's copy) first.

const bundles = new Map<string, Promise<string>>();

/**
 * Bundles a TypeScript entry (relative to this package) into an .mjs inside this package's
 * node_modules/.cache, so plain Node runs it and resolves the drivers and workspace packages.
 * `@mrtr/store-sql` is mapped to this package's src.
 */
export function bundle(entry: string): Promise<string> {
  let pending = bundles.get(entry);
  if (pending === undefined) {
    pending = (async () => {
      const requireHere = createRequire(import.meta.url);
      const requireFromTsup = createRequire(requireHere.resolve('tsup'));
      const esbuild = requireFromTsup('esbuild') as {
        build(options: Record<string, unknown>): Promise<unknown>;
      };
      const outDir = join(packageDir, 'node_modules', '.cache', 'mrtr-store-sql-test');
      mkdirSync(outDir, { recursive: true });
      const name = entry.replace(/[^A-Za-z0-9]+/g, '-');
      const outfile = join(outDir, `${name}-${process.pid}-${randomBytes(4).toString('hex')}.mjs`);
      await esbuild.build({
        entryPoints: [join(packageDir, entry)],
        outfile,
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node20',
        alias: { '@mrtr/store-sql': join(packageDir, 'src', 'index.ts') },
        external: ['pg', 'better-sqlite3', '@mrtr/core', '@mrtr/codec-hmac'],
        logLevel: 'silent',
      });
      return outfile;
    })();
    bundles.set(entry, pending);
  }
  return pending;
}

export const workerScript = (): Promise<string> => bundle('test/fixtures/worker.ts');

/** Deletes the bundles this test file created. */
export function removeBundles(): void {
  for (const pending of bundles.values()) void pending.then((file) => rmSync(file, { force: true })).catch(() => {});
  bundles.clear();
}

export interface WorkerResult {
  trues: number;
  falses: number;
  errors: string[];
  elapsedMs: number;
}

export type WorkerTask =
  | {
      kind: 'race';
      dialect: 'sqlite' | 'postgres';
      target: string;
      table: string;
      namespace: string;
      ids: string[];
      connections: number;
      consumersPerConnection: number;
      expiresAtMs: number;
    }
  | { kind: 'schema'; dialect: 'sqlite' | 'postgres'; target: string; table: string }
  /** Consumes one id twice; with `close: false` leaves the store open (the process must still exit). */
  | { kind: 'smoke'; dialect: 'sqlite' | 'postgres'; target: string; table: string; close: boolean };

export interface Worker {
  child: ChildProcess;
  ready: Promise<void>;
  result: Promise<WorkerResult>;
  go(): void;
}

/** Forks a worker; it reports `ready`, waits for `go`, runs the task and reports its result. */
export async function spawnWorker(
  task: WorkerTask,
  timeoutMs: number,
  options: { block?: string; blockMode?: 'missing' | 'broken' | 'missing-dep' } = {},
): Promise<Worker> {
  const script = await workerScript();
  // `block` makes the named package unresolvable in the child, as if it were not installed.
  const execArgv = options.block === undefined ? [] : ['--import', join(here, 'fixtures', 'block-module.mjs')];
  const env =
    options.block === undefined
      ? process.env
      : { ...process.env, MRTR_TEST_BLOCK_MODULE: options.block, MRTR_TEST_BLOCK_MODE: options.blockMode ?? 'missing' };
  const child = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv, env });
  let onReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    onReady = resolve;
  });
  const result = new Promise<WorkerResult>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`worker ${child.pid} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('message', (message: { type: string; result?: WorkerResult; error?: string }) => {
      if (message.type === 'ready') onReady();
      if (message.type === 'result' && message.result) {
        clearTimeout(timer);
        resolve(message.result);
      }
      if (message.type === 'error') {
        clearTimeout(timer);
        reject(new Error(`worker ${child.pid} failed: ${message.error}`));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`worker ${child.pid} exited with ${code} before reporting`));
    });
  });
  result.catch(() => {});
  child.send({ type: 'task', task });
  return { child, ready, result, go: () => child.send({ type: 'go' }) };
}

/** Records every statement text a store sends (through `pool.query` or on a checked-out connection). */
export function recorded(inner: PgPoolLike): { pool: PgPoolLike; texts: string[] } {
  const texts: string[] = [];
  const pool: PgPoolLike = {
    query: (config) => {
      texts.push(config.text);
      return inner.query(config);
    },
    async connect() {
      const client = await inner.connect();
      return {
        query: (config: PgQueryConfigLike) => {
          texts.push(config.text);
          return client.query(config);
        },
        release: (error?: Error | boolean) => client.release(error),
      };
    },
    end: () => inner.end(),
  };
  return { pool, texts };
}

// ---------------------------------------------------------------------------------------------
// A fake server clock for PostgreSQL: the store judges time by the server's statement_timestamp(), which a test
// cannot inject; a schema of the test's own defines a statement_timestamp() that reads a one-row table, and the
// store's connections put that schema before pg_catalog on their search_path (tables still go to public). The
// server itself is untouched.

export interface FakeServerClock {
  /** DATABASE_URL whose connections see the fake clock. */
  readonly url: string;
  /** The same, as pg.Pool options for an injected pool. */
  readonly options: string;
  now(): number;
  /** Moves the server's (fake) clock on. */
  advance(ms: number): Promise<void>;
  /** Sets the server's (fake) clock. */
  set(ms: number): Promise<void>;
  close(): Promise<void>;
}

export async function fakeServerClock(url: string, startMs: number): Promise<FakeServerClock> {
  const schema = `mrtr_clock_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  await admin.connect();
  await admin.query(
    `CREATE SCHEMA ${schema}; CREATE TABLE ${schema}.clock (t bigint NOT NULL); INSERT INTO ${schema}.clock VALUES (${startMs}); ` +
      `CREATE FUNCTION ${schema}.statement_timestamp() RETURNS timestamptz LANGUAGE sql STABLE AS ` +
      `$$ SELECT to_timestamp(0) + (SELECT t FROM ${schema}.clock) * interval '1 millisecond' $$`,
  );
  let t = startMs;
  // Every update in order; a caller waits until the clock it asked for is on the server.
  let written: Promise<unknown> = Promise.resolve();
  const write = (value: number) => {
    written = written.then(() => admin.query(`UPDATE ${schema}.clock SET t = $1`, [value]));
    return written.then(() => {});
  };
  const options = `-c search_path=public,${schema},pg_catalog`;
  const parsed = new URL(url);
  parsed.searchParams.set('options', options);
  return {
    url: parsed.toString(),
    options,
    now: () => t,
    advance(ms) {
      t += ms;
      return write(t);
    },
    set(ms) {
      if (ms === t) return written.then(() => {});
      t = ms;
      return write(t);
    },
    async close() {
      await admin.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => {});
      await admin.end().catch(() => {});
    },
  };
}

/**
 * A PostgreSQL store on a fake server clock that follows a test's own clock: before each call the server's clock is
 * set to `now()` (so tests written for an injected clock read the same on the server's).
 */
export function onServerClock<S extends object>(store: S, server: FakeServerClock, now: () => number): S {
  const synced = ['consume', 'claim', 'record', 'renew', 'release', 'time', 'purge'];
  return new Proxy(store, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof key !== 'string' || !synced.includes(key) || typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        await server.set(now());
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

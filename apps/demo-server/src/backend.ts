import type { ReplayStore } from '@mrtr/core';
import type { TaskStore, TaskStoreLimits } from '@mrtr/core/tasks';
import { createMemoryTaskStore } from '@mrtr/store-memory';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { MEMORY_STORE_ENTRIES, redactUrl, type StoreName } from './config.js';
import { escapeForTerminal } from './observe.js';
import {
  type ConnectLedger,
  createMemoryLedger,
  createPostgresLedger,
  createRedisLedger,
  createSqliteLedger,
  type LedgerLimits,
  type PgLike,
  type RedisLike,
  type SqliteLike,
  withGenericErrors,
} from './ledger.js';

/** The replay store, the task store and the connect ledger of one backend, and how to close them. */
export interface Backend {
  name: StoreName;
  store: ReplayStore;
  /** Where tasks live (tasks extension): on the same backend, so they survive a restart where it does. */
  tasks: TaskStore;
  ledger: ConnectLedger;
  /** For the startup line (no secrets). */
  detail: string;
  /** Closes the ledger, the store and any connection the backend opened. Idempotent. */
  close(): Promise<void>;
}

export interface BackendOptions {
  sqliteFile: string;
  redisUrl: string;
  databaseUrl: string | undefined;
  /** Replay ledger namespace (same for every instance of one fleet). */
  namespace: string;
  /** Per-principal bounds of the connect ledger (defaults: DEFAULT_LEDGER_LIMITS). */
  ledgerLimits?: Partial<LedgerLimits> | undefined;
  /** Where the connect ledger reports why it refused or failed (the client only sees a generic message). */
  report?: ((line: string) => void) | undefined;
  /** Per-principal bounds of the task store (defaults: 16 unfinished, 256 kept). */
  taskLimits?: TaskStoreLimits | undefined;
}

/** A startup failure the CLI reports in one line (exit code 1). */
export class BackendError extends Error {}

function onceAsync(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => {
    running ??= fn();
    return running;
  };
}

const errorText = (error: unknown): string => {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
};

/** Opens the chosen backend and checks it answers (a dead Redis/PostgreSQL fails here, not on the first call). */
export async function openBackend(name: StoreName, options: BackendOptions): Promise<Backend> {
  const backend = await openRaw(name, options);
  return { ...backend, ledger: withGenericErrors(backend.ledger, options.report ?? (() => {})) };
}

async function openRaw(name: StoreName, options: BackendOptions): Promise<Backend> {
  const ledgerOptions = { limits: options.ledgerLimits };
  switch (name) {
    case 'memory': {
      const { createMemoryStore } = await import('@mrtr/store-memory');
      const store = createMemoryStore({ namespace: options.namespace, maxEntries: MEMORY_STORE_ENTRIES });
      const ledger = createMemoryLedger(ledgerOptions);
      const tasks = createMemoryTaskStore({ ...options.taskLimits });
      return {
        name,
        store,
        tasks,
        ledger,
        detail: 'in-process, one instance',
        close: onceAsync(async () => {
          await ledger.close();
          await tasks.close?.();
          await store.close();
        }),
      };
    }
    case 'sqlite': {
      const [sqlite, { configureSqliteDatabase, createSqliteStore, createSqliteTaskStore }] = await Promise.all([
        import('better-sqlite3'),
        import('@mrtr/store-sql'),
      ]);
      // better-sqlite3 is CommonJS (`export =`): under ESM its constructor is the default export.
      const Database = ((sqlite as { default?: unknown }).default ?? sqlite) as typeof sqlite;
      let db: InstanceType<typeof Database>;
      try {
        // Several instances may open one new file at the same moment: configureSqliteDatabase retries
        // the switch to WAL, which SQLite can refuse at once (SQLITE_BUSY) while another one converts it.
        db = await configureSqliteDatabase(new Database(options.sqliteFile));
      } catch (error) {
        throw new BackendError(`cannot open SQLite file ${options.sqliteFile}: ${errorText(error)}`);
      }
      const store = createSqliteStore({ database: db, namespace: options.namespace });
      const tasks = createSqliteTaskStore({ database: db, namespace: options.namespace, ...options.taskLimits });
      try {
        await store.ensureSchema();
        await tasks.ensureSchema();
        const ledger = createSqliteLedger(db as unknown as SqliteLike, ledgerOptions);
        return {
          name,
          store,
          tasks,
          ledger,
          // A path from the command line, shown on the operator's terminal: control and bidi characters escaped.
          detail: escapeForTerminal(options.sqliteFile),
          close: onceAsync(async () => {
            await ledger.close();
            await tasks.close?.();
            await store.close();
            db.close();
          }),
        };
      } catch (error) {
        await store.close().catch(() => {});
        db.close();
        throw new BackendError(`SQLite store ${options.sqliteFile} is unusable: ${errorText(error)}`);
      }
    }
    case 'redis': {
      const { createRedisStore, createRedisTaskStore } = await import('@mrtr/store-redis');
      // The store's own reports (eviction policy, persistence, a new ledger) go to the demo's stderr, without its prefix.
      const store = createRedisStore({
        url: options.redisUrl,
        namespace: options.namespace,
        connectTimeoutMs: 3000,
        onError: (error) => options.report?.(error.message.replace(/^@mrtr\/store-redis: /, 'redis: ')),
      });
      try {
        // A throwaway id with a 1 s lifetime: waits (bounded) for the first connection and proves SET NX PXAT works.
        await store.consume(`startup-probe:${base64urlEncode(randomBytes(16))}`, Date.now() + 1000);
      } catch (error) {
        await store.close().catch(() => {});
        throw new BackendError(`Redis does not answer: ${errorText(error)}`);
      }
      const ledger = createRedisLedger(store.client as unknown as RedisLike, `mrtr-demo:connect:${options.namespace}:`, ledgerOptions);
      // Tasks on the same connection (the task store never closes a client it was given).
      const tasks = createRedisTaskStore({ client: store.client, namespace: options.namespace, ...options.taskLimits });
      return {
        name,
        store,
        tasks,
        ledger,
        detail: redactUrl(options.redisUrl),
        close: onceAsync(async () => {
          await ledger.close();
          await tasks.close?.();
          await store.close();
        }),
      };
    }
    case 'postgres': {
      if (options.databaseUrl === undefined || options.databaseUrl === '') {
        throw new BackendError('--store postgres needs DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/test)');
      }
      const [{ default: pg }, { createPostgresStore, createPostgresTaskStore }] = await Promise.all([
        import('pg'),
        import('@mrtr/store-sql'),
      ]);
      // Server-side bounds on every connection (sent as startup parameters): the server cancels a statement
      // or a lock wait that runs too long, so one the client gave up on cannot commit later, and the replay
      // store sends each consume as one statement (without them it wraps each in SET LOCAL bounds).
      const pool = new pg.Pool({
        connectionString: options.databaseUrl,
        max: 10,
        connectionTimeoutMillis: 5000,
        statement_timeout: 5000,
        lock_timeout: 2000,
      });
      pool.on('error', () => {
        // Idle-client errors surface on the next query (as ERR_STORE_UNAVAILABLE); never crash the process.
      });
      const store = createPostgresStore({ pool, namespace: options.namespace });
      const tasks = createPostgresTaskStore({ pool, namespace: options.namespace, ...options.taskLimits });
      try {
        await store.ensureSchema();
        await tasks.ensureSchema();
        const ledger = await withRetry(() => createPostgresLedger(pool as unknown as PgLike, ledgerOptions));
        return {
          name,
          store,
          tasks,
          ledger,
          detail: redactUrl(options.databaseUrl),
          close: onceAsync(async () => {
            await ledger.close();
            await tasks.close?.();
            await store.close();
            await pool.end();
          }),
        };
      } catch (error) {
        await store.close().catch(() => {});
        await pool.end().catch(() => {});
        throw new BackendError(`PostgreSQL is unusable: ${errorText(error)}`);
      }
    }
  }
}

/** Two instances creating the ledger table at the same moment can collide on the catalog: retry once. */
async function withRetry<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch {
    await new Promise((resolve) => setTimeout(resolve, 100));
    return fn();
  }
}

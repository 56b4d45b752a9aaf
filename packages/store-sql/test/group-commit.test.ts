// Group commit: consumes started in the same tick go into one statement (PostgreSQL: one INSERT … SELECT
// FROM unnest; SQLite: one BEGIN IMMEDIATE … COMMIT), each gets its own answer, a repeated id in one
// batch is true at most once, a failed batch fails every waiter closed, close() fails queued consumes
// closed, nothing waits on a timer. Batches are made by starting consumes in one tick, never by timing.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { MrtrError } from '@mrtr/core';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createPostgresStore, createSqliteStore, type PgPoolLike, type PgQueryConfigLike, type PgQueryResultLike } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  postgresSkipReason,
  REQUIRE_SERVICES,
  skipPostgres,
  tempDir,
  uniqueTable,
} from './helpers.js';

postgresSkipReason('group-commit.test.ts');
if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

async function settle<T>(promise: Promise<T>): Promise<T | MrtrError> {
  return promise.then(
    (value) => value,
    (error: unknown) => {
      if (!MrtrError.is(error)) throw error;
      return error;
    },
  );
}

const unavailable = (value: unknown): boolean => MrtrError.is(value) && value.code === 'ERR_STORE_UNAVAILABLE';
/** A consume statement (a batch over unnest, or a single one over VALUES). */
const isConsume = (config: PgQueryConfigLike) => config.text.includes('AS u(id, expires_at, owner, minted)');
const isBatch = (config: PgQueryConfigLike) => isConsume(config) && config.text.includes('unnest(');
const isSingle = (config: PgQueryConfigLike) => isConsume(config) && !isBatch(config);
/** A statement that writes the replay table (consume or claim). */
const isWrite = (config: PgQueryConfigLike) => config.text.includes(') AS u(id, expires_at, owner');

/**
 * A pg.Pool (or a fake) whose queries are recorded and can be held back or made to fail: those sent with
 * `pool.query` and those sent on a connection taken with `pool.connect()` (how the store sends consumes).
 */
function recording(inner: PgPoolLike) {
  const queries: PgQueryConfigLike[] = [];
  let hold: Promise<void> | undefined;
  let failNext: ((config: PgQueryConfigLike) => Error | undefined) | undefined;
  let afterNext: ((config: PgQueryConfigLike) => Error | undefined) | undefined;
  const run = async (config: PgQueryConfigLike, query: (config: PgQueryConfigLike) => Promise<PgQueryResultLike>) => {
    queries.push(config);
    if (hold !== undefined && isWrite(config)) await hold;
    const before = failNext?.(config);
    if (before !== undefined) {
      failNext = undefined;
      throw before;
    }
    const result = await query(config);
    const after = afterNext?.(config);
    if (after !== undefined) {
      afterNext = undefined;
      throw after;
    }
    return result;
  };
  const pool: PgPoolLike = {
    query: (config) => run(config, (c) => inner.query(c)),
    async connect() {
      const client = await inner.connect();
      return { query: (config) => run(config, (c) => client.query(c)), release: (error) => client.release(error) };
    },
    end: () => inner.end(),
  };
  return {
    pool,
    queries,
    /** INSERTs wait until the returned function is called. */
    holdInserts(): () => void {
      let release: () => void = () => {};
      hold = new Promise<void>((resolve) => {
        release = () => {
          hold = undefined;
          resolve();
        };
      });
      return release;
    },
    failBefore(check: (config: PgQueryConfigLike) => Error | undefined) {
      failNext = check;
    },
    failAfter(check: (config: PgQueryConfigLike) => Error | undefined) {
      afterNext = check;
    },
  };
}

/** Resolves once an INSERT carrying `id` has been sent (waits for the event, bounded: 2,000 turns of the event loop). */
async function sent(queries: PgQueryConfigLike[], id: string): Promise<void> {
  for (let turn = 0; turn < 2000; turn++) {
    if (queries.some((q) => isWrite(q) && JSON.stringify(q.values ?? []).includes(JSON.stringify(id)))) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`no INSERT of ${id} was sent`);
}

/**
 * A fake pool that answers the store's consume statements from a Map (for the queue mechanics, without a server), by
 * its own clock (the wall clock: every expiry in these tests is a minute away), with the clock row the store reads.
 */
function fakePool(): PgPoolLike {
  const rows = new Map<string, number>();
  const pool: PgPoolLike = {
    async query(config) {
      const values = config.values ?? [];
      if (isConsume(config)) {
        const t = Date.now();
        const [, id, expiry] = values as [string, string | string[], number | number[]];
        const ids = Array.isArray(id) ? id : [id];
        const expires = Array.isArray(expiry) ? expiry : [expiry];
        const won: { id: string | null; now_ms?: number; epoch_ms?: number }[] = [];
        ids.forEach((one, i) => {
          const held = rows.get(one);
          const exp = expires[i] as number;
          if (exp > t && (held === undefined || held < t)) {
            rows.set(one, exp);
            won.push({ id: one });
          }
        });
        won.push({ id: null, now_ms: t, epoch_ms: 0 });
        return { rows: won, rowCount: won.length };
      }
      // pg_settings of a server that bounds statements (5 s), as the store checks on each connection.
      if (config.text.includes('pg_settings')) {
        const rows = [
          { name: 'lock_timeout', setting: '2000' },
          { name: 'statement_timeout', setting: '5000' },
        ];
        return { rows, rowCount: rows.length };
      }
      return { rows: [], rowCount: 0 };
    },
    async connect() {
      return { query: (config: PgQueryConfigLike) => pool.query(config), release: () => {} };
    },
    end: async () => {},
  };
  return pool;
}

describe('group commit mechanics (fake pool)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('nothing waits on a timer: with every timer frozen, a lone consume and a batch both resolve', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'setInterval', 'setImmediate', 'clearTimeout', 'clearInterval'] });
    const { pool, queries } = recording(fakePool());
    const store = createPostgresStore({ pool, ensureSchema: false, purgeIntervalMs: 0 });
    expect(await store.consume('alone', Date.now() + 60_000)).toBe(true);
    const burst = await Promise.all(['a', 'b', 'a'].map((id) => store.consume(id, Date.now() + 60_000)));
    expect(burst).toEqual([true, true, false]);
    expect(queries.filter(isSingle)).toHaveLength(1);
    expect(queries.filter(isBatch)).toHaveLength(1);
    await store.close();
  });

  it('a batch holds at most maxBatchSize consumes; the rest follow as soon as it ends', async () => {
    const { pool, queries } = recording(fakePool());
    const store = createPostgresStore({ pool, ensureSchema: false, purgeIntervalMs: 0, maxBatchSize: 256 });
    const ids = Array.from({ length: 600 }, (_, i) => `bound:${i}`);
    const results = await Promise.all(ids.map((id) => store.consume(id, Date.now() + 60_000)));
    expect(results.every((r) => r === true)).toBe(true);
    expect(queries.filter(isBatch).map((q) => ((q.values ?? [])[1] as string[]).length)).toEqual([256, 256, 88]);
    // Ids go in sorted (one lock order for every batch) with their own expiry and distinct owners.
    const first = queries.find(isBatch) as PgQueryConfigLike;
    const [, sent, , owners] = first.values as [string, string[], number[], string[]];
    expect([...sent].sort()).toEqual(sent);
    expect(new Set(owners).size).toBe(256);
    for (const owner of owners) expect(owner).toMatch(/^[A-Za-z0-9_-]{22}$/);
    await store.close();
  });

  it('consumes that arrive while a statement is in flight go into the next one, together', async () => {
    const recorder = recording(fakePool());
    const store = createPostgresStore({ pool: recorder.pool, ensureSchema: false, purgeIntervalMs: 0 });
    expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
    const release = recorder.holdInserts();
    const first = store.consume('first', Date.now() + 60_000);
    await sent(recorder.queries, 'first'); // the lone consume's statement is on its way
    const later = ['x', 'y', 'z', 'x'].map((id) => store.consume(id, Date.now() + 60_000));
    release();
    expect(await first).toBe(true);
    expect(await Promise.all(later)).toEqual([true, true, true, false]);
    expect(recorder.queries.filter(isSingle)).toHaveLength(2);
    const batches = recorder.queries.filter(isBatch);
    expect(batches).toHaveLength(1);
    expect(batches[0]?.values?.[1]).toEqual(['x', 'y', 'z']);
    await store.close();
  });

  it('several batches in flight, up to maxConnections: a statement that hangs does not hold up the next consumes', async () => {
    const recorder = recording(fakePool());
    const store = createPostgresStore({ pool: recorder.pool, ensureSchema: false, purgeIntervalMs: 0, maxConnections: 2 });
    expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
    const release = recorder.holdInserts();
    const first = store.consume('one', Date.now() + 60_000);
    await sent(recorder.queries, 'one');
    const second = store.consume('two', Date.now() + 60_000);
    await sent(recorder.queries, 'two'); // sent while the first is still held: two statements in flight
    const third = store.consume('three', Date.now() + 60_000);
    // Both connections busy: the third waits for a free one (checked over many turns of the event loop).
    for (let turn = 0; turn < 50; turn++) await new Promise<void>((resolve) => setImmediate(resolve));
    expect(recorder.queries.filter(isSingle).map((q) => q.values?.[1])).toEqual(['warm', 'one', 'two']);
    release();
    expect(await Promise.all([first, second, third])).toEqual([true, true, true]);
    await store.close();
  });

  it('batch: false sends one statement per consume', async () => {
    const { pool, queries } = recording(fakePool());
    const store = createPostgresStore({ pool, ensureSchema: false, purgeIntervalMs: 0, batch: false });
    const results = await Promise.all(['p', 'q', 'p'].map((id) => store.consume(id, Date.now() + 60_000)));
    expect(results.filter((r) => r).length).toBe(2);
    expect(queries.filter(isSingle)).toHaveLength(3);
    expect(queries.filter(isBatch)).toHaveLength(0);
    await store.close();
  });

  it('batch is the switch: false sends one statement per consume, true batches', async () => {
    for (const options of [{ batch: false }]) {
      const { pool, queries } = recording(fakePool());
      const store = createPostgresStore({ pool, ensureSchema: false, purgeIntervalMs: 0, ...options });
      await Promise.all(['p', 'q', 'r'].map((id) => store.consume(id, Date.now() + 60_000)));
      expect(queries.filter(isSingle)).toHaveLength(3);
      expect(queries.filter(isBatch)).toHaveLength(0);
      await store.close();
    }
    const { pool, queries } = recording(fakePool());
    const store = createPostgresStore({ pool, ensureSchema: false, purgeIntervalMs: 0, batch: true });
    expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
    await Promise.all(['a', 'b', 'c'].map((id) => store.consume(id, Date.now() + 60_000)));
    expect(queries.filter(isBatch)).toHaveLength(1);
    await store.close();
    expect(() => createSqliteStore({ filename: 'x.db', batch: 'yes' as unknown as boolean })).toThrow(TypeError);
  });

  it('maxQueued bounds the queue: one more consume fails closed at once', async () => {
    const recorder = recording(fakePool());
    const store = createPostgresStore({ pool: recorder.pool, ensureSchema: false, purgeIntervalMs: 0, maxQueued: 4 });
    const release = recorder.holdInserts();
    const pending = Array.from({ length: 9 }, (_, i) => settle(store.consume(`q:${i}`, Date.now() + 60_000)));
    release();
    const results = await Promise.all(pending);
    // 4 queued and sent together; the 5th to 9th found the queue full.
    expect(results.slice(0, 4)).toEqual([true, true, true, true]);
    for (const result of results.slice(4)) expect(unavailable(result)).toBe(true);
    await store.close();
  });

  it('close() fails queued consumes closed; the statement in flight settles by itself', async () => {
    const recorder = recording(fakePool());
    const store = createPostgresStore({ pool: recorder.pool, ensureSchema: false, purgeIntervalMs: 0 });
    expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
    const release = recorder.holdInserts();
    const inFlight = settle(store.consume('sent', Date.now() + 60_000));
    await sent(recorder.queries, 'sent');
    const queued = ['u', 'v'].map((id) => settle(store.consume(id, Date.now() + 60_000)));
    const closing = store.close();
    for (const result of await Promise.all(queued)) expect(unavailable(result)).toBe(true);
    release();
    expect(await inFlight).toBe(true);
    await closing;
    expect(recorder.queries.filter(isBatch)).toHaveLength(0);
  });

  it('rejects bad group-commit options at construction', () => {
    const pool = fakePool();
    expect(() => createPostgresStore({ pool, batch: 'yes' as unknown as boolean })).toThrow(TypeError);
    expect(() => createPostgresStore({ pool, maxBatchSize: 0 })).toThrow(RangeError);
    expect(() => createSqliteStore({ filename: 'x.db', maxBatchSize: 4097 })).toThrow(RangeError);
    expect(() => createSqliteStore({ filename: 'x.db', maxQueued: 1.5 })).toThrow(TypeError);
  });
});

describe.skipIf(skipPostgres)('PostgreSQL group commit (real server)', () => {
  const url = DATABASE_URL as string;
  const tables: string[] = [];
  let shared: pg.Pool;
  const newTable = (tag: string) => {
    const table = uniqueTable(tag);
    tables.push(table);
    return table;
  };
  beforeAll(async () => {
    await assertPostgresReachable(url);
    // Server-side bounds on every connection (what the README asks of an injected pool): consumes are single statements.
    shared = new pg.Pool({ connectionString: url, max: 4, statement_timeout: 5000, lock_timeout: 2000 });
    shared.on('error', () => {});
  });
  afterAll(async () => {
    await shared?.end();
    await dropTables(url, tables);
  });

  it('one batch holding the same id twice (and three times): exactly one true per id, each waiter its own answer', async () => {
    const recorder = recording(shared);
    const store = createPostgresStore({ pool: recorder.pool, table: newTable('gcdup'), purgeIntervalMs: 0 });
    try {
      await store.ensureSchema();
      expect(await store.consume('live', Date.now() + 60_000)).toBe(true);
      const order = ['d', 'e', 'd', 'live', 'f', 'd', 'e'];
      const results = await Promise.all(order.map((id) => store.consume(id, Date.now() + 60_000)));
      expect(results).toEqual([true, true, false, false, true, false, false]);
      const batches = recorder.queries.filter(isBatch);
      expect(batches).toHaveLength(1);
      expect(batches[0]?.values?.[1]).toEqual(['d', 'e', 'f', 'live']);
      // Written, and single use holds afterwards.
      expect(await Promise.all(['d', 'e', 'f'].map((id) => store.consume(id, Date.now() + 60_000)))).toEqual([false, false, false]);
    } finally {
      await store.close();
    }
  });

  it('a batch takes over expired rows and leaves live ones (the ON CONFLICT … WHERE expired path)', async () => {
    const table = newTable('gcexp');
    const store = createPostgresStore({ pool: shared, table, purgeIntervalMs: 0 });
    try {
      expect(await Promise.all(['old', 'young'].map((id) => store.consume(id, Date.now() + 60_000)))).toEqual([true, true]);
      // Expired by the server's clock (the store's clock): written in its past.
      await shared.query(`UPDATE "${table}" SET expires_at = 1 WHERE id = 'old'`);
      const results = await Promise.all(['old', 'young', 'old'].map((id) => store.consume(id, Date.now() + 60_000)));
      expect(results).toEqual([true, false, false]);
    } finally {
      await store.close();
    }
  });

  it('a batch the server refuses fails every waiter closed, repeated ids included; nothing was written', async () => {
    const recorder = recording(shared);
    const store = createPostgresStore({ pool: recorder.pool, table: newTable('gcfail'), purgeIntervalMs: 0 });
    try {
      await store.ensureSchema();
      recorder.failBefore((config) =>
        isBatch(config) ? Object.assign(new Error('canceling statement'), { code: '57014', severity: 'ERROR' }) : undefined,
      );
      const ids = ['g', 'h', 'g'];
      const results = await Promise.all(ids.map((id) => settle(store.consume(id, Date.now() + 60_000))));
      for (const result of results) expect(unavailable(result)).toBe(true);
      // The statement never ran: the ids are still fresh.
      expect(await Promise.all(['g', 'h'].map((id) => store.consume(id, Date.now() + 60_000)))).toEqual([true, true]);
    } finally {
      await store.close();
    }
  });

  it('a batch whose reply is lost: each waiter is answered by owner (own → true, repeated → false, live → false)', async () => {
    const recorder = recording(shared);
    const store = createPostgresStore({ pool: recorder.pool, table: newTable('gclost'), purgeIntervalMs: 0 });
    try {
      await store.ensureSchema();
      expect(await store.consume('taken', Date.now() + 60_000)).toBe(true);
      recorder.failAfter((config) => (isBatch(config) ? new Error('Connection terminated unexpectedly') : undefined));
      const results = await Promise.all(['m', 'n', 'm', 'taken'].map((id) => store.consume(id, Date.now() + 60_000)));
      expect(results).toEqual([true, true, false, false]);
      expect(recorder.queries.filter((q) => q.text.includes('ANY('))).toHaveLength(1);
    } finally {
      await store.close();
    }
  });
});

describe('SQLite group commit', () => {
  const CONSUME = 'INSERT INTO "mrtr_replay" (ns, id, expires_at, owner) ';
  const dir = tempDir();
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let sequence = 0;
  const newFile = () => join(dir, `gc-${sequence++}.sqlite`);

  /** A better-sqlite3 database whose statement runs are counted by source. */
  function counted(database: Database.Database) {
    const runs = new Map<string, number>();
    const wrapper = {
      prepare(source: string) {
        const statement = database.prepare(source);
        return {
          run: (...params: unknown[]) => {
            runs.set(source, (runs.get(source) ?? 0) + 1);
            return statement.run(...params);
          },
          get: (...params: unknown[]) => statement.get(...params),
          all: (...params: unknown[]) => statement.all(...params),
        };
      },
      exec: (source: string) => database.exec(source),
      close: () => database.close(),
      get open() {
        return database.open;
      },
    };
    const count = (prefix: string) => [...runs].filter(([source]) => source.startsWith(prefix)).reduce((n, [, c]) => n + c, 0);
    return { wrapper, count };
  }

  it('one batch holding the same id twice: one transaction, exactly one true per id, each waiter its own answer', async () => {
    const database = new Database(newFile());
    const { wrapper, count } = counted(database);
    const store = createSqliteStore({ database: wrapper, purgeIntervalMs: 0 });
    try {
      expect(await store.consume('live', Date.now() + 60_000)).toBe(true);
      // A lone consume is one transaction too: the ledger epoch is checked in it.
      expect(count('BEGIN IMMEDIATE')).toBe(1);
      const results = await Promise.all(['d', 'e', 'd', 'live', 'f', 'd'].map((id) => store.consume(id, Date.now() + 60_000)));
      expect(results).toEqual([true, true, false, false, true, false]);
      expect(count('BEGIN IMMEDIATE')).toBe(2);
      expect(count('COMMIT')).toBe(2);
      // The repeated id is answered without a statement: four upserts for d, e, live, f; one epoch check per batch.
      expect(count(CONSUME)).toBe(1 + 4);
      expect(count(`INSERT INTO "mrtr_replay_epoch"`)).toBe(2);
      expect(await Promise.all(['d', 'e', 'f'].map((id) => store.consume(id, Date.now() + 60_000)))).toEqual([false, false, false]);
    } finally {
      await store.close();
      database.close();
    }
  });

  it('a batch that cannot take the write lock fails every waiter closed (SQLITE_BUSY); nothing is written', async () => {
    const filename = newFile();
    const holder = new Database(filename);
    const other = new Database(filename, { timeout: 0 });
    other.pragma('busy_timeout = 0');
    const store = createSqliteStore({ database: other, purgeIntervalMs: 0 });
    try {
      await store.ensureSchema();
      holder.exec('BEGIN IMMEDIATE');
      const results = await Promise.all(['a', 'b', 'a'].map((id) => settle(store.consume(id, Date.now() + 60_000))));
      for (const result of results) {
        expect(unavailable(result)).toBe(true);
        expect(((result as MrtrError).cause as { code?: string }).code).toBe('SQLITE_BUSY');
      }
      holder.exec('ROLLBACK');
      expect(await Promise.all(['a', 'b', 'a'].map((id) => store.consume(id, Date.now() + 60_000)))).toEqual([true, true, false]);
    } finally {
      await store.close();
      other.close();
      holder.close();
    }
  });

  it('a batch failing at COMMIT is rolled back and fails every waiter closed', async () => {
    const database = new Database(newFile());
    let failCommit = false;
    const wrapper = {
      prepare(source: string) {
        const statement = database.prepare(source);
        return {
          run: (...params: unknown[]) => {
            if (failCommit && source === 'COMMIT') {
              failCommit = false;
              throw Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR' });
            }
            return statement.run(...params);
          },
          get: (...params: unknown[]) => statement.get(...params),
          all: (...params: unknown[]) => statement.all(...params),
        };
      },
      exec: (source: string) => database.exec(source),
      close: () => database.close(),
      get open() {
        return database.open;
      },
    };
    const store = createSqliteStore({ database: wrapper, purgeIntervalMs: 0 });
    try {
      await store.ensureSchema();
      failCommit = true;
      const results = await Promise.all(['c1', 'c2'].map((id) => settle(store.consume(id, Date.now() + 60_000))));
      for (const result of results) expect(unavailable(result)).toBe(true);
      expect(database.inTransaction).toBe(false);
      expect(await Promise.all(['c1', 'c2'].map((id) => store.consume(id, Date.now() + 60_000)))).toEqual([true, true]);
    } finally {
      await store.close();
      database.close();
    }
  });

  it('close() fails consumes still queued closed; none of them is written', async () => {
    const filename = newFile();
    const store = createSqliteStore({ filename, purgeIntervalMs: 0 });
    await store.ensureSchema();
    const queued = ['s', 't'].map((id) => settle(store.consume(id, Date.now() + 60_000)));
    await store.close();
    for (const result of await Promise.all(queued)) expect(unavailable(result)).toBe(true);
    const again = createSqliteStore({ filename, purgeIntervalMs: 0 });
    try {
      expect(await Promise.all(['s', 't'].map((id) => again.consume(id, Date.now() + 60_000)))).toEqual([true, true]);
    } finally {
      await again.close();
    }
  });

  it('batch: false runs one transaction per consume', async () => {
    const database = new Database(newFile());
    const { wrapper, count } = counted(database);
    const store = createSqliteStore({ database: wrapper, purgeIntervalMs: 0, batch: false });
    try {
      const results = await Promise.all(['p', 'q', 'p'].map((id) => store.consume(id, Date.now() + 60_000)));
      expect(results).toEqual([true, true, false]);
      expect(count('BEGIN IMMEDIATE')).toBe(3);
      expect(count(CONSUME)).toBe(3);
    } finally {
      await store.close();
      database.close();
    }
  });
});

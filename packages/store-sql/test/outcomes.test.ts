// Outcome recording (issue 20) on both dialects against real databases, beyond the shared compliance suite:
// the upgrade of a table of the previous version (columns added once, no DDL on the next start), 50 identical
// claims over two store instances, the size cap, expiry on an injected clock (no wall-clock window), consume and
// claim taking over each other's expired rows, the purge, misuse and failures; on PostgreSQL also a claim that
// waited on a row another transaction was writing, a lost reply, and claims mixed into group-commit batches.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { MrtrError } from '@mrtr/core';
import type { ClaimResult } from '@mrtr/core/store';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresStore, createSqliteStore, type SqliteDatabaseLike, type SqlReplayStore } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  type FakeServerClock,
  fakeServerClock,
  onServerClock,
  postgresSkipReason,
  recorded,
  REQUIRE_SERVICES,
  skipPostgres,
  sleep,
  tempDir,
  uniqueTable,
  withHostPort,
  REPLAY_COLUMNS,
} from './helpers.js';

postgresSkipReason('outcomes.test.ts');
if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

const status = (r: ClaimResult): string => (r.status === 'recorded' ? `recorded:${r.outcome}` : r.status);
const DDL = /^\s*(ALTER|CREATE|BEGIN IMMEDIATE)\b|pg_advisory/i;

/** The code a call rejected with (`undefined` when it resolved). */
const codeOf = (promise: Promise<unknown>): Promise<string | undefined> =>
  promise.then(
    () => undefined,
    (error: unknown) => (MrtrError.is(error) ? error.code : String(error)),
  );

async function expectUnavailable(promise: Promise<unknown>): Promise<MrtrError> {
  const error = await promise.then(
    (value) => {
      throw new Error(`expected ERR_STORE_UNAVAILABLE, resolved ${JSON.stringify(value)}`);
    },
    (reason: unknown) => reason,
  );
  expect(MrtrError.is(error)).toBe(true);
  expect((error as MrtrError).code).toBe('ERR_STORE_UNAVAILABLE');
  return error as MrtrError;
}

interface Row {
  ns: string;
  id: string;
  expires_at: number;
  owner: string | null;
  fp: string | null;
  outcome: string | null;
}

/** What the shared tests need of a dialect. */
interface Backend {
  /** A store the test closes in afterAll; `table` is created by the test's own `table()`. */
  store(options: {
    table: string;
    now: () => number;
    namespace?: string;
    maxOutcomeBytes?: number;
    outcomeBudgetBytes?: number;
    ensureSchema?: boolean;
  }): SqlReplayStore;
  /** A store on a connection that records every statement text it is sent. */
  recordingStore(options: { table: string }): { store: SqlReplayStore; texts: string[] };
  table(tag: string): string;
  /** A table of the previous version (owner, no fp/outcome, expiry index) with one live row `old` (no owner). */
  createPreviousTable(table: string, oldExpiresAt: number): Promise<void>;
  columns(table: string): Promise<string[]>;
  row(table: string, id: string): Promise<Row | undefined>;
  count(table: string): Promise<number>;
  /** A store whose backend does not answer. */
  unreachable(): SqlReplayStore;
}

function outcomeTests(backend: Backend): void {
  let t = 1_000_000;
  const now = () => t;

  it('a table of the previous version is upgraded in place: fp and outcome are added once, its rows still count, and the next start runs no DDL', async () => {
    const table = backend.table('upg');
    await backend.createPreviousTable(table, t + 60_000);
    const unmanaged = backend.store({ table, now, ensureSchema: false });
    // A migration tool manages the schema and has not added the columns yet: consumes fail closed.
    const error = await expectUnavailable(unmanaged.consume('early', t + 60_000));
    expect(String((error.cause as Error | undefined)?.message ?? error.cause)).toMatch(/\bfp\b|outcome|lease_until|fence|_epoch/);

    const first = backend.recordingStore({ table });
    await first.store.ensureSchema();
    const ddl = first.texts.filter((text) => /^\s*(ALTER|CREATE)\b/i.test(text));
    expect(ddl.length).toBeGreaterThan(0);
    // The missing columns are added (ALTER), the side tables (outcome budget, epoch, key fingerprints) are created; the table itself is kept.
    const sides = ['_budget', '_epoch', '_keys'].map((suffix) => `"${table}${suffix}"`);
    expect(ddl.every((text) => text.startsWith('ALTER') || sides.some((side) => text.includes(side)))).toBe(true);
    expect(ddl.join('\n')).toMatch(/\bfp\b/);
    expect(ddl.join('\n')).toMatch(/\boutcome\b/);
    expect(ddl.join('\n')).toMatch(/\bmisses\b/);
    expect(ddl.join('\n')).toMatch(/\blease_until\b/);
    expect(ddl.join('\n')).toMatch(/\bfence\b/);
    expect((await backend.columns(table)).sort()).toEqual(REPLAY_COLUMNS);

    // Every later start: the catalog shows nothing missing, so no DDL, no lock, no transaction.
    for (let start = 0; start < 2; start++) {
      const next = backend.recordingStore({ table });
      await next.store.ensureSchema();
      expect(next.texts.filter((text) => DDL.test(text))).toEqual([]);
      expect(next.texts.length).toBeGreaterThan(0); // it did read the catalog
    }

    const store = backend.store({ table, now });
    // The old row (taken by a consume of the previous version) is held for consume and claim alike.
    expect(await store.consume('old', t + 60_000)).toBe(false);
    expect(status(await store.claim('old', t + 60_000, 'fp'))).toBe('replayed');
    expect(await store.record('old', 'fp', 'x')).toBe(false);
    expect(status(await store.claim('new', t + 60_000, 'fp'))).toBe('first');
    expect(await store.record('new', 'fp', 'done')).toBe(true);
    expect(status(await unmanaged.claim('new', t + 60_000, 'fp'))).toBe('recorded:done');
    expect(await unmanaged.consume('after', t + 60_000)).toBe(true);
  });

  it('50 identical claims over two store instances: exactly one first, 49 pending; after record all 50 get the outcome (fresh and expired rows)', async () => {
    const table = backend.table('c50');
    const namespace = 'fleet';
    const a = backend.store({ table, now, namespace });
    const b = backend.store({ table, now, namespace });
    for (const round of ['fresh', 'expired'] as const) {
      const ids = Array.from({ length: 5 }, (_, i) => `${round}-${i}`);
      const exp = t + 60_000;
      if (round === 'expired') {
        // Rows that expired: a claim takes one over (and only one claim does).
        for (const id of ids) expect(await a.consume(id, t + 10)).toBe(true);
        t += 11;
      }
      for (const id of ids) {
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? a : b).claim(id, exp, 'same')));
        const counts = new Map<string, number>();
        for (const r of results) counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
        expect({ round, ...Object.fromEntries(counts) }).toEqual({ round, first: 1, pending: 49 });
        // Another fingerprint is a replay; the winner (either instance) records once.
        expect(status(await b.claim(id, exp, 'other'))).toBe('replayed');
        expect(await b.record(id, 'same', `outcome of ${id}`)).toBe(true);
        expect(await a.record(id, 'same', 'again')).toBe(false);
        const after = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? a : b).claim(id, exp, 'same')));
        expect(new Set(after.map(status))).toEqual(new Set([`recorded:outcome of ${id}`]));
      }
    }
  });

  it('an outcome over maxOutcomeBytes (UTF-8 bytes) is recorded as not kept: record resolves false and identical retries are replays', async () => {
    const table = backend.table('cap');
    const store = backend.store({ table, now, maxOutcomeBytes: 10 });
    expect(store.maxOutcomeBytes).toBe(10);
    const exp = t + 60_000;
    const cases: [string, string, boolean][] = [
      ['exact', 'x'.repeat(10), true],
      ['quoted', "a'\\b'';\\'", true], // quotes and backslashes come back unchanged (PostgreSQL writes records as literals)
      ['over', 'x'.repeat(11), false],
      ['multibyte', 'é'.repeat(6), false], // 6 characters, 12 bytes
      ['nul', 'a\u0000b', false], // PostgreSQL text cannot hold it unchanged
      ['empty', '', false],
    ];
    for (const [id, outcome, kept] of cases) {
      expect(status(await store.claim(id, exp, 'fp'))).toBe('first');
      expect(await store.record(id, 'fp', outcome)).toBe(kept);
      expect(status(await store.claim(id, exp, 'fp'))).toBe(kept ? `recorded:${outcome}` : 'replayed');
      expect((await backend.row(table, id))?.outcome).toBe(kept ? outcome : '');
      expect(await store.record(id, 'fp', 'small')).toBe(false); // recorded once, even as not kept
    }
    // The default keeps 16 KiB (OutcomeStoreLimits).
    const plain = backend.store({ table, now });
    expect(plain.maxOutcomeBytes).toBe(16_384);
    expect(status(await plain.claim('big', exp, 'fp'))).toBe('first');
    expect(await plain.record('big', 'fp', 'y'.repeat(16_384))).toBe(true);
    expect(status(await plain.claim('big2', exp, 'fp'))).toBe('first');
    expect(await plain.record('big2', 'fp', 'y'.repeat(16_385))).toBe(false);
  });

  it("expiry on an injected clock: a claim after expiry is first (the old outcome is gone), consume and claim take over each other's expired rows, record after expiry is refused", async () => {
    const table = backend.table('exp');
    const store = backend.store({ table, now });
    const ttl = 60_000;
    let exp = t + ttl;
    expect(status(await store.claim('c', exp, 'fp'))).toBe('first');
    expect(await store.record('c', 'fp', 'out')).toBe(true);
    t = exp; // live up to and including its expiry; a claim whose own expiry the store's clock reached is refused
    expect(await codeOf(store.claim('c', exp, 'fp'))).toBe('ERR_STATE_EXPIRED');
    expect(status(await store.claim('c', t + ttl, 'fp'))).toBe('recorded:out');
    t = exp + 1;
    exp = t + ttl;
    expect(status(await store.claim('c', exp, 'fp'))).toBe('first');
    expect(status(await store.claim('c', exp, 'fp'))).toBe('pending'); // the old outcome went with the old row
    expect((await backend.row(table, 'c'))?.outcome).toBeNull();

    // A claimed row with an outcome, expired, taken over by a plain consume: fingerprint and outcome are cleared.
    expect(await store.record('c', 'fp', 'second')).toBe(true);
    t = exp + 1;
    expect(await store.consume('c', t + ttl)).toBe(true);
    expect(await backend.row(table, 'c')).toMatchObject({ fp: null, outcome: null });
    expect(status(await store.claim('c', t + ttl, 'fp'))).toBe('replayed');
    expect(await store.record('c', 'fp', 'x')).toBe(false);

    // A consumed row, expired, taken over by a claim.
    t += ttl + 1;
    expect(status(await store.claim('c', t + ttl, 'fp2'))).toBe('first');

    // record after the id expired (the round outlived its state): refused, nothing kept.
    expect(status(await store.claim('late', t + 100, 'fp'))).toBe('first');
    t += 101;
    expect(await store.record('late', 'fp', 'too late')).toBe(false);
    expect((await backend.row(table, 'late'))?.outcome).toBeNull();
    // An expiry that is not in the future (by the store's clock) is refused, and writes nothing.
    expect(await codeOf(store.claim('never', t, 'fp'))).toBe('ERR_STATE_EXPIRED');
    expect(await codeOf(store.consume('never', t - 1))).toBe('ERR_STATE_EXPIRED');
    expect(await backend.row(table, 'never')).toBeUndefined();
  });

  it('the purge drops expired rows with their outcomes, and keeps live ones', async () => {
    const table = backend.table('pur');
    const store = backend.store({ table, now });
    for (let i = 0; i < 5; i++) {
      expect(status(await store.claim(`old${i}`, t + 100, 'fp'))).toBe('first');
      expect(await store.record(`old${i}`, 'fp', `outcome ${i}`)).toBe(true);
    }
    expect(status(await store.claim('live', t + 60_000, 'fp'))).toBe('first');
    expect(await store.record('live', 'fp', 'kept')).toBe(true);
    t += 101;
    expect(await store.purge()).toBe(5);
    expect(await backend.count(table)).toBe(1);
    expect(status(await store.claim('live', t + 60_000, 'fp'))).toBe('recorded:kept');
    expect(status(await store.claim('old0', t + 60_000, 'fp'))).toBe('first');
  });

  it('misuse is a TypeError/RangeError; a bad maxOutcomeBytes or outcomeBudgetBytes is a labelled error at construction', async () => {
    const table = backend.table('bad');
    const store = backend.store({ table, now });
    await expect(store.claim('id', t + 1000, '')).rejects.toBeInstanceOf(RangeError);
    await expect(store.claim('id', t + 1000, 42 as unknown as string)).rejects.toBeInstanceOf(TypeError);
    await expect(store.claim('', t + 1000, 'fp')).rejects.toBeInstanceOf(RangeError);
    await expect(store.claim('id', Number.NaN, 'fp')).rejects.toBeInstanceOf(RangeError);
    await expect(store.record('id', 'fp', 42 as unknown as string)).rejects.toBeInstanceOf(TypeError);
    await expect(store.record('id', 'x'.repeat(257), 'o')).rejects.toBeInstanceOf(RangeError);
    for (const [value, kind] of [
      [-1, RangeError],
      [512 * 1024 * 1024 + 1, RangeError],
      [1.5, TypeError],
      ['10', TypeError],
    ] as const) {
      expect(() => backend.store({ table, now, maxOutcomeBytes: value as number })).toThrow(kind);
      expect(() => backend.store({ table, now, maxOutcomeBytes: value as number })).toThrow(/maxOutcomeBytes/);
    }
    expect(backend.store({ table, now, maxOutcomeBytes: 0 }).maxOutcomeBytes).toBe(0);
    for (const [value, kind] of [
      [-1, RangeError],
      [1.5, TypeError],
      ['10', TypeError],
    ] as const) {
      expect(() => backend.store({ table, now, outcomeBudgetBytes: value as number })).toThrow(kind);
      expect(() => backend.store({ table, now, outcomeBudgetBytes: value as number })).toThrow(/outcomeBudgetBytes/);
    }
    expect(backend.store({ table, now }).outcomeBudgetBytes).toBe(64 * 1024 * 1024);
    // A budget of 0 keeps nothing: every outcome is done, not kept.
    const none = backend.store({ table, now, outcomeBudgetBytes: 0 });
    expect(status(await none.claim('nobudget', t + 60_000, 'fp'))).toBe('first');
    expect(await none.record('nobudget', 'fp', 'x')).toBe(false);
    expect(status(await none.claim('nobudget', t + 60_000, 'fp'))).toBe('replayed');
  });

  it('a backend failure rejects claim and record with ERR_STORE_UNAVAILABLE (never first); so does a closed store', async () => {
    const down = backend.unreachable();
    try {
      await expectUnavailable(down.claim('id', Date.now() + 60_000, 'fp'));
      await expectUnavailable(down.record('id', 'fp', 'o'));
    } finally {
      await down.close();
    }
    const table = backend.table('cls');
    const store = backend.store({ table, now });
    expect(status(await store.claim('a', t + 60_000, 'fp'))).toBe('first');
    await store.close();
    await expectUnavailable(store.claim('b', t + 60_000, 'fp'));
    await expectUnavailable(store.record('a', 'fp', 'o'));
  });
}

// ---------------------------------------------------------------------------------------------

describe('SQLite: outcome recording', () => {
  const dir = tempDir();
  const filename = join(dir, 'outcomes.db');
  const admin = new Database(filename);
  const stores: SqlReplayStore[] = [];
  const databases: Database.Database[] = [];
  const track = (store: SqlReplayStore) => {
    stores.push(store);
    return store;
  };
  afterAll(async () => {
    for (const store of stores) await store.close();
    for (const database of databases) database.close();
    admin.close();
    rmSync(dir, { recursive: true, force: true });
  });

  outcomeTests({
    store: (options) => track(createSqliteStore({ filename, purgeIntervalMs: 0, ...options })),
    recordingStore({ table }) {
      const database = new Database(filename, { timeout: 5000 });
      const texts: string[] = [];
      const wrapper: SqliteDatabaseLike = {
        prepare(source) {
          texts.push(source);
          return database.prepare(source);
        },
        exec(source) {
          texts.push(source);
          return database.exec(source);
        },
        close: () => database.close(),
        get open() {
          return database.open;
        },
      };
      const store = track(createSqliteStore({ database: wrapper, table, purgeIntervalMs: 0 }));
      databases.push(database);
      return { store, texts };
    },
    table: (tag) => uniqueTable(tag),
    async createPreviousTable(table, oldExpiresAt) {
      admin.exec(
        `CREATE TABLE "${table}" (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, owner TEXT, PRIMARY KEY (ns, id))`,
      );
      admin.exec(`CREATE INDEX "${table}_expires_at_idx" ON "${table}" (expires_at)`);
      admin.prepare(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'old', ?)`).run(oldExpiresAt);
    },
    async columns(table) {
      return (admin.prepare(`PRAGMA table_info("${table}")`).all() as { name: string }[]).map((c) => c.name);
    },
    async row(table, id) {
      return admin.prepare(`SELECT * FROM "${table}" WHERE id = ?`).get(id) as Row | undefined;
    },
    async count(table) {
      return (admin.prepare(`SELECT count(*) AS n FROM "${table}"`).get() as { n: number }).n;
    },
    unreachable: () => {
      const database = new Database(join(dir, 'closed.db'));
      database.close();
      return createSqliteStore({ database, table: 'mrtr_replay', purgeIntervalMs: 0 });
    },
  });

  it('two stores on one file share claims: 50 identical claims, one first', async () => {
    const table = uniqueTable('two');
    const a = track(createSqliteStore({ filename, table, purgeIntervalMs: 0 }));
    const database = new Database(filename, { timeout: 5000 });
    databases.push(database);
    const b = track(createSqliteStore({ database, table, purgeIntervalMs: 0 }));
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? a : b).claim('x', Date.now() + 60_000, 'fp')));
    expect(results.filter((r) => r.status === 'first')).toHaveLength(1);
  });
});

describe.skipIf(skipPostgres)('PostgreSQL: outcome recording', () => {
  const url = DATABASE_URL as string;
  const tables: string[] = [];
  const cleanups: Array<() => Promise<unknown>> = [];
  let admin: pg.Pool;
  const newTable = (tag: string) => {
    const table = uniqueTable(tag);
    tables.push(table);
    return table;
  };
  const track = (store: SqlReplayStore) => {
    cleanups.push(() => store.close());
    return store;
  };
  const barePool = (): pg.Pool => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {});
    cleanups.push(() => pool.end().catch(() => {}));
    return pool;
  };
  /** A session of its own holding a transaction open (ended by the test, or at the latest in afterAll). */
  const holder = async (): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    await client.connect();
    cleanups.push(() => client.end().catch(() => {}));
    return client;
  };
  const waitingOnLock = async (table: string): Promise<void> => {
    for (let i = 0; i < 1000; i++) {
      const { rows } = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%' || $1 || '%'",
        [table],
      );
      if (Number(rows[0].n) > 0) return;
      await sleep(20);
    }
    throw new Error('the claim never waited on the lock');
  };

  // The store's clock is the server's: the shared tests' clock drives a fake server clock (see onServerClock), and the
  // process's clock the store is given is far off, to show it is never used.
  let server: FakeServerClock;
  beforeAll(async () => {
    await assertPostgresReachable(url);
    admin = new pg.Pool({ connectionString: url, max: 4 });
    admin.on('error', () => {});
    server = await fakeServerClock(url, 0);
  });
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await admin?.end();
    await dropTables(url, tables);
    await server?.close();
  });

  outcomeTests({
    store: ({ now, ...options }) =>
      onServerClock(
        track(createPostgresStore({ connectionString: server.url, purgeIntervalMs: 0, ...options, now: () => now() + 86_400_000 })),
        server,
        now,
      ),
    recordingStore({ table }) {
      const { pool, texts } = recorded(barePool());
      return { store: track(createPostgresStore({ pool, table, purgeIntervalMs: 0 })), texts };
    },
    table: newTable,
    async createPreviousTable(table, oldExpiresAt) {
      await admin.query(
        `CREATE TABLE "${table}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, PRIMARY KEY (ns, id))`,
      );
      await admin.query(`CREATE INDEX "${table}_expires_at_idx" ON "${table}" (expires_at)`);
      await admin.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'old', $1)`, [oldExpiresAt]);
    },
    async columns(table) {
      const { rows } = await admin.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1', [table]);
      return rows.map((r) => r.column_name as string);
    },
    async row(table, id) {
      const { rows } = await admin.query(`SELECT * FROM "${table}" WHERE id = $1`, [id]);
      return rows[0] === undefined ? undefined : ({ ...rows[0], expires_at: Number(rows[0].expires_at) } as Row);
    },
    async count(table) {
      return Number((await admin.query(`SELECT count(*)::int AS n FROM "${table}"`)).rows[0].n);
    },
    unreachable: () =>
      createPostgresStore({
        connectionString: withHostPort(url, '127.0.0.1', 1),
        table: 'mrtr_replay',
        connectTimeoutMs: 1000,
        statementTimeoutMs: 1000,
        purgeIntervalMs: 0,
      }),
  });

  for (const kind of ['insert', 'take-over'] as const) {
    for (const ending of ['COMMIT', 'ROLLBACK'] as const) {
      it(`a claim that waited on a row another transaction was writing (${kind}, ${ending}) answers by what committed: never a wrong first, never an error`, async () => {
        const table = newTable('snap');
        const store = track(
          createPostgresStore({ connectionString: url, table, purgeIntervalMs: 0, statementTimeoutMs: 20_000, lockTimeoutMs: 20_000 }),
        );
        await store.ensureSchema();
        if (kind === 'take-over') {
          await admin.query(`INSERT INTO "${table}" (ns, id, expires_at, fp, outcome) VALUES ('', 'x', 1, 'fp', 'old')`);
        }
        const other = await holder();
        await other.query('BEGIN');
        const exp = Date.now() + 60_000;
        if (kind === 'insert') {
          await other.query(`INSERT INTO "${table}" (ns, id, expires_at, fp) VALUES ('', 'x', $1, 'fp')`, [exp]);
        } else {
          await other.query(`UPDATE "${table}" SET expires_at = $1, fp = 'fp', outcome = NULL WHERE id = 'x'`, [exp]);
        }
        // The claim's statement starts (and takes its snapshot) while the other write is uncommitted.
        const same = store.claim('x', exp, 'fp');
        const other2 = store.claim('x', exp, 'other');
        await waitingOnLock(table);
        await other.query(ending);
        const results = [status(await same), status(await other2)];
        if (ending === 'COMMIT') expect(results).toEqual(['pending', 'replayed']);
        // Nothing committed: exactly one of the two claims took the id, and the other has another fingerprint.
        else expect(results.sort()).toEqual(['first', 'replayed']);
      });
    }
  }

  it('claims mixed into group-commit batches: every consume and claim of one id gets its own answer, exactly one takes it', async () => {
    const table = newTable('mix');
    const store = track(createPostgresStore({ connectionString: url, table, purgeIntervalMs: 0 }));
    await store.ensureSchema();
    for (let round = 0; round < 5; round++) {
      const id = `mixed-${round}`;
      const exp = Date.now() + 60_000;
      const calls = Array.from({ length: 32 }, (_, i) =>
        i % 2 === 0 ? store.consume(id, exp).then((won) => (won ? 'first' : 'taken')) : store.claim(id, exp, 'fp').then((r) => r.status),
      );
      const answers = await Promise.all(calls);
      expect(answers.filter((a) => a === 'first')).toHaveLength(1);
      const winner = answers.indexOf('first');
      // A claim that lost to a consume is a replay; to a claim (same fingerprint), pending.
      const claimAnswers = answers.filter((_, i) => i % 2 === 1 && i !== winner);
      expect(new Set(claimAnswers)).toEqual(new Set([winner % 2 === 0 ? 'replayed' : 'pending']));
    }
    expect(await store.consume('after', Date.now() + 60_000)).toBe(true);
  });

  it('injected pool without server-side timeouts: claim and record run in a transaction with SET LOCAL bounds (a record batch in one request)', async () => {
    const table = newTable('bare');
    const { pool, texts } = recorded(barePool());
    const store = track(createPostgresStore({ pool, table, purgeIntervalMs: 0 }));
    await store.ensureSchema();
    texts.length = 0;
    expect(status(await store.claim('x', Date.now() + 60_000, 'fp'))).toBe('first');
    expect(await store.record('x', 'fp', 'done')).toBe(true);
    // The claim: BEGIN with the bounds, the statement, COMMIT. The record batch: one request from BEGIN with the
    // bounds (and the namespace's budget lock) to COMMIT.
    const begins = texts.filter((text) => text.startsWith('BEGIN; SET LOCAL statement_timeout'));
    expect(begins).toHaveLength(2);
    expect(texts.filter((text) => text === 'COMMIT' || (text.startsWith('BEGIN; SET LOCAL') && text.endsWith('; COMMIT')))).toHaveLength(2);
    expect(texts.filter((text) => text.includes('pg_advisory_xact_lock') && text.includes('SET LOCAL lock_timeout'))).toHaveLength(1);
  });

  it('a claim or record whose reply is lost after it committed is resolved by owner (first / true), not failed', async () => {
    const table = newTable('lost');
    const target = new URL(url);
    const { startReplyLosingProxy } = await import('@mrtr/test-suite');
    const proxy = await startReplyLosingProxy({ host: target.hostname || '127.0.0.1', port: Number(target.port || 5432) });
    cleanups.push(() => proxy.close());
    const store = track(
      createPostgresStore({
        connectionString: withHostPort(url, '127.0.0.1', proxy.port),
        table,
        statementTimeoutMs: 1000,
        connectTimeoutMs: 1000,
        purgeIntervalMs: 0,
      }),
    );
    const peer = track(createPostgresStore({ connectionString: url, table, purgeIntervalMs: 0 }));
    const exp = Date.now() + 60_000;
    expect(status(await store.claim('warm', exp, 'fp'))).toBe('first');
    proxy.loseNextReply('late');
    expect(status(await store.claim('mine', exp, 'fp'))).toBe('first');
    proxy.restore();
    expect(status(await peer.claim('mine', exp, 'fp'))).toBe('pending');
    proxy.loseNextReply('late');
    expect(await store.record('mine', 'fp', 'kept')).toBe(true);
    proxy.restore();
    expect(status(await peer.claim('mine', exp, 'fp'))).toBe('recorded:kept');
    // Someone else's row: the late reply is answered by how it is held.
    expect(status(await peer.claim('theirs', exp, 'fp'))).toBe('first');
    proxy.loseNextReply('late');
    expect(status(await store.claim('theirs', exp, 'fp'))).toBe('pending');
    proxy.restore();
    // Reply and check both lost: unknown, so it fails closed (never first); the write landed.
    proxy.loseNextReply('lost');
    await expectUnavailable(store.claim('unknown', exp, 'fp'));
    proxy.restore();
    expect(status(await peer.claim('unknown', exp, 'fp'))).toBe('pending');
  });
});

// PostgreSQL specifics against a real server: outage through a TCP proxy we control (the shared
// server is never stopped), timeouts, pool ownership, concurrent ensureSchema, quoting, purge.
import { MrtrError } from '@mrtr/core';
import { BackgroundError } from '@mrtr/core/store';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresStore, type SqlReplayStore } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  type FakeServerClock,
  fakeServerClock,
  onServerClock,
  postgresSkipReason,
  REQUIRE_SERVICES,
  removeBundles,
  skipPostgres,
  sleep,
  spawnWorker,
  startTcpProxy,
  uniqueTable,
  withHostPort,
  REPLAY_COLUMNS,
} from './helpers.js';

postgresSkipReason('postgres.behaviour.test.ts');
if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

/** Awaits a promise that must reject with ERR_STORE_UNAVAILABLE; returns the error. */
async function expectUnavailable(promise: Promise<unknown>): Promise<MrtrError> {
  const error = await promise.then(
    (value) => {
      throw new Error(`expected ERR_STORE_UNAVAILABLE, resolved ${String(value)}`);
    },
    (reason: unknown) => reason,
  );
  expect(MrtrError.is(error)).toBe(true);
  expect((error as MrtrError).code).toBe('ERR_STORE_UNAVAILABLE');
  return error as MrtrError;
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await condition()) return true;
    await sleep(25);
  }
  return condition();
}

describe.skipIf(skipPostgres)('PostgreSQL store behaviour', () => {
  const url = DATABASE_URL as string;
  const target = new URL(url ?? 'postgres://127.0.0.1:5432/'); // the body is collected even when skipped
  const upstream = { host: target.hostname || '127.0.0.1', port: Number(target.port || 5432) };
  const tables: string[] = [];
  let admin: pg.Pool;
  const newTable = (tag: string) => {
    const table = uniqueTable(tag);
    tables.push(table);
    return table;
  };
  const rowCount = async (table: string) => Number((await admin.query(`SELECT count(*)::int AS n FROM "${table}"`)).rows[0].n);

  // The store's clock is the server's: tests written on a clock of their own run on a fake server clock that follows
  // it (see onServerClock); the process's clock the store is given is a day off, to show it is never used.
  let server: FakeServerClock;
  const onClock = (now: () => number, options: Omit<Parameters<typeof createPostgresStore>[0], 'connectionString' | 'pool'>) =>
    onServerClock(createPostgresStore({ ...options, connectionString: server.url, now: () => now() + 86_400_000 }), server, now);

  beforeAll(async () => {
    await assertPostgresReachable(url);
    admin = new pg.Pool({ connectionString: url, max: 4 });
    admin.on('error', () => {});
    server = await fakeServerClock(url, 0);
  });
  afterAll(async () => {
    removeBundles();
    await admin?.end();
    await dropTables(url, tables);
    await server?.close();
  });

  describe('outage through a TCP proxy', () => {
    const cases = ['owned pool', 'injected pool'] as const;
    for (const kind of cases) {
      it(`${kind}: every consume during the outage rejects with ERR_STORE_UNAVAILABLE; it recovers by itself`, async () => {
        const proxy = await startTcpProxy(upstream);
        const proxied = withHostPort(url, '127.0.0.1', proxy.port);
        const table = newTable('out');
        let injected: pg.Pool | undefined;
        let store: SqlReplayStore;
        const timeouts = { connectTimeoutMs: 1000, statementTimeoutMs: 1000, table };
        if (kind === 'owned pool') {
          store = createPostgresStore({ connectionString: proxied, ...timeouts });
        } else {
          injected = new pg.Pool({ connectionString: proxied, max: 4, connectionTimeoutMillis: 1000 });
          injected.on('error', () => {});
          store = createPostgresStore({ pool: injected, ...timeouts });
        }
        const consumed: string[] = [];
        const outcomes: Array<'true' | 'false' | 'unavailable'> = [];
        try {
          const started = Date.now();
          for (let i = 0; i < 90; i++) {
            expect(Date.now() - started).toBeLessThan(45_000);
            if (i === 30) await proxy.stop();
            if (i === 60) await proxy.start();
            const id = `outage:${kind}:${i}:${Date.now()}`;
            try {
              const result = await store.consume(id, Date.now() + 60_000);
              outcomes.push(result ? 'true' : 'false');
              if (result) consumed.push(id);
            } catch (error) {
              expect(MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE').toBe(true);
              expect((error as Error).cause).toBeDefined();
              // Fails fast: the connection was refused or cut, no consume waited out a timer. (Asserted
              // on the cause, not on elapsed time, so a loaded machine cannot fail it.)
              expect(String((error as Error).cause)).not.toMatch(/time(d)? ?out/i);
              outcomes.push('unavailable');
            }
          }
          expect(outcomes.slice(0, 30)).toEqual(Array(30).fill('true'));
          expect(outcomes.slice(30, 60)).toEqual(Array(30).fill('unavailable'));
          expect(outcomes.slice(60)).toEqual(Array(30).fill('true'));
          // The ledger survived: ids from before the outage are still single-use.
          for (const id of consumed.slice(0, 5)) expect(await store.consume(id, Date.now() + 60_000)).toBe(false);
        } finally {
          await store.close();
          await injected?.end();
          await proxy.stop();
        }
      });
    }

    it('a store created while the server is unreachable fails closed, then works once it is reachable', async () => {
      const proxy = await startTcpProxy(upstream);
      await proxy.stop();
      const table = newTable('late');
      const store = createPostgresStore({
        connectionString: withHostPort(url, '127.0.0.1', proxy.port),
        table,
        connectTimeoutMs: 500,
        statementTimeoutMs: 500,
      });
      try {
        for (let i = 0; i < 3; i++) await expectUnavailable(store.consume(`late:${i}`, Date.now() + 60_000));
        await expectUnavailable(store.ensureSchema());
        await proxy.start();
        // The schema is created on the first consume after the outage, then single use holds.
        expect(await store.consume('late:0', Date.now() + 60_000)).toBe(true);
        expect(await store.consume('late:0', Date.now() + 60_000)).toBe(false);
      } finally {
        await store.close();
        await proxy.stop();
      }
    });

    it('consumes in flight when the connection drops settle as a boolean or ERR_STORE_UNAVAILABLE, never hang', async () => {
      const proxy = await startTcpProxy(upstream);
      const table = newTable('inflight');
      const store = createPostgresStore({
        connectionString: withHostPort(url, '127.0.0.1', proxy.port),
        table,
        connectTimeoutMs: 1000,
        statementTimeoutMs: 1000,
      });
      try {
        await store.ensureSchema();
        const ids = Array.from({ length: 64 }, (_, i) => `inflight:${i}:${Date.now()}`);
        const pending = ids.map((id) =>
          store.consume(id, Date.now() + 60_000).then(
            (value) => ({ id, value: value as boolean | 'unavailable' }),
            (error: unknown) => {
              expect(MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE').toBe(true);
              // Settled by the cut connection, not by waiting out a timer.
              expect(String((error as Error).cause)).not.toMatch(/time(d)? ?out/i);
              return { id, value: 'unavailable' as const };
            },
          ),
        );
        await proxy.stop();
        const settled = await Promise.all(pending);
        expect(settled.some((s) => s.value === 'unavailable')).toBe(true);
        await proxy.start();
        // Whatever the outcome was, a committed id is never reported true again.
        for (const { id, value } of settled) {
          const again = await store.consume(id, Date.now() + 60_000);
          if (value === true) expect(again).toBe(false);
        }
      } finally {
        await store.close();
        await proxy.stop();
      }
    });

    it('a server that stops answering (black hole) gives ERR_STORE_UNAVAILABLE within the statement timeout', async () => {
      const proxy = await startTcpProxy(upstream);
      const table = newTable('hole');
      const store = createPostgresStore({
        connectionString: withHostPort(url, '127.0.0.1', proxy.port),
        table,
        connectTimeoutMs: 500,
        statementTimeoutMs: 500,
      });
      try {
        expect(await store.consume(`hole:a:${Date.now()}`, Date.now() + 60_000)).toBe(true);
        proxy.stall();
        for (let i = 0; i < 3; i++) {
          // Ended by the store's own bounds (query_timeout / connection timeout), asserted on the cause
          // rather than on elapsed time.
          const error = await expectUnavailable(store.consume(`hole:b:${i}:${Date.now()}`, Date.now() + 60_000));
          expect(String(error.cause)).toMatch(/time(d)? ?out/i);
        }
        await proxy.stop();
        await proxy.start();
        expect(await store.consume(`hole:c:${Date.now()}`, Date.now() + 60_000)).toBe(true);
      } finally {
        await store.close();
        await proxy.stop();
      }
    });
  });

  describe('ownership', () => {
    it('close() leaves an injected pool open; a closed injected pool gives ERR_STORE_UNAVAILABLE', async () => {
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
      const table = newTable('own');
      const store = createPostgresStore({ pool, table });
      expect(await store.consume(`own:${Date.now()}`, Date.now() + 60_000)).toBe(true);
      await store.close();
      expect((await pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
      const second = createPostgresStore({ pool, table });
      await pool.end();
      await expectUnavailable(second.consume(`own:after-end:${Date.now()}`, Date.now() + 60_000));
      await second.close();
    });

    it('close() ends a pool the store created (its connections go away)', async () => {
      const proxy = await startTcpProxy(upstream);
      try {
        const store = createPostgresStore({ connectionString: withHostPort(url, '127.0.0.1', proxy.port), table: newTable('own2') });
        await Promise.all(Array.from({ length: 8 }, (_, i) => store.consume(`own2:${i}:${Date.now()}`, Date.now() + 60_000)));
        expect(proxy.connections).toBeGreaterThan(0);
        await store.close();
        await store.close();
        expect(await waitFor(() => proxy.connections === 0, 30_000)).toBe(true);
        await expectUnavailable(store.consume(`own2:closed:${Date.now()}`, Date.now() + 60_000));
      } finally {
        await proxy.stop();
      }
    });

    it('a store that is closed before its first use opens no connection', async () => {
      const proxy = await startTcpProxy(upstream);
      try {
        const store = createPostgresStore({ connectionString: withHostPort(url, '127.0.0.1', proxy.port), table: newTable('own3') });
        await store.close();
        await expectUnavailable(store.consume(`own3:${Date.now()}`, Date.now() + 60_000));
        expect(proxy.connections).toBe(0);
      } finally {
        await proxy.stop();
      }
    });

    it('needs only pg (better-sqlite3 blocked); a process that never calls close() still exits', async () => {
      const worker = await spawnWorker({ kind: 'smoke', dialect: 'postgres', target: url, table: newTable('exit'), close: false }, 30_000, {
        block: 'better-sqlite3',
      });
      const exited = new Promise<number | null>((resolve) => worker.child.on('exit', (code) => resolve(code)));
      await worker.ready;
      worker.go();
      const result = await worker.result;
      expect(result).toMatchObject({ trues: 1, falses: 1, errors: [] });
      const code = await Promise.race([exited, sleep(15_000).then(() => 'still running' as const)]);
      if (code === 'still running') worker.child.kill('SIGKILL');
      expect(code).toBe(0);
    });
  });

  describe('schema', () => {
    it('an existing table without the owner column is upgraded by ensureSchema; its old rows still count', async () => {
      const table = newTable('upg');
      await admin.query(`CREATE TABLE "${table}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, id))`);
      await admin.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'before-upgrade', 5000)`);
      let t = 1_000;
      const unmanaged = onClock(() => t, { table, ensureSchema: false, purgeIntervalMs: 0 });
      const store = onClock(() => t, { table, purgeIntervalMs: 0 });
      try {
        // Schema managed elsewhere and not migrated yet: fails closed (column "owner" does not exist).
        const error = await expectUnavailable(unmanaged.consume('new', 5_000));
        expect(String(error.cause)).toMatch(/owner|_epoch/);
        expect(await store.consume('before-upgrade', 5_000)).toBe(false);
        expect(await store.consume('new', 5_000)).toBe(true);
        const owner = await admin.query(`SELECT owner FROM "${table}" WHERE id = 'new'`);
        expect(owner.rows[0].owner).toMatch(/^[A-Za-z0-9_-]{22}$/);
        expect(await unmanaged.consume('new', 5_000)).toBe(false);
        // Concurrent upgrades of one old table (eight pools) serialise on the advisory lock.
        const old = newTable('upg8');
        await admin.query(`CREATE TABLE "${old}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, id))`);
        const stores = Array.from({ length: 8 }, () => createPostgresStore({ connectionString: url, table: old, purgeIntervalMs: 0 }));
        await Promise.all(stores.map((s) => s.ensureSchema()));
        await Promise.all(stores.map((s) => s.close()));
        const columns = await admin.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1', [old]);
        expect(columns.rows.map((r) => r.column_name as string).sort()).toEqual(REPLAY_COLUMNS);
        t = 5_001;
        expect(await store.consume('before-upgrade', 9_000)).toBe(true); // an expired old row is taken over
      } finally {
        await store.close();
        await unmanaged.close();
      }
    });

    it('a reply lost after the INSERT committed: its own row → true, a live row of an older version (no owner) → false', async () => {
      const table = newTable('lost');
      const target = new URL(url);
      const { startReplyLosingProxy } = await import('@mrtr/test-suite');
      const proxy = await startReplyLosingProxy({ host: target.hostname || '127.0.0.1', port: Number(target.port || 5432) });
      const store = createPostgresStore({
        connectionString: withHostPort(url, '127.0.0.1', proxy.port),
        table,
        statementTimeoutMs: 1000,
        connectTimeoutMs: 1000,
        purgeIntervalMs: 0,
      });
      try {
        expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
        proxy.loseNextReply('late');
        expect(await store.consume('mine', Date.now() + 60_000)).toBe(true);
        proxy.restore();
        await admin.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'old-version', $1)`, [Date.now() + 60_000]);
        proxy.loseNextReply('late');
        expect(await store.consume('old-version', Date.now() + 60_000)).toBe(false);
        proxy.restore();
      } finally {
        await store.close();
        await proxy.close();
      }
    });

    it('two processes running ensureSchema at once on a new table both succeed (5 rounds)', async () => {
      for (let round = 0; round < 5; round++) {
        const table = newTable('mig');
        const workers = await Promise.all(
          [0, 1].map(() => spawnWorker({ kind: 'schema', dialect: 'postgres', target: url, table }, 30_000)),
        );
        await Promise.all(workers.map((w) => w.ready));
        for (const worker of workers) worker.go();
        const results = await Promise.all(workers.map((w) => w.result));
        expect(results.map((r) => r.errors)).toEqual([[], []]);
        expect(await rowCount(table)).toBe(0);
        const index = await admin.query('SELECT indexdef FROM pg_indexes WHERE tablename = $1', [table]);
        expect(index.rows.map((r) => r.indexdef as string).some((d) => d.includes('(expires_at)'))).toBe(true);
      }
    });

    it('eight pools running ensureSchema at once on a new table all succeed; it is idempotent', async () => {
      const table = newTable('mig8');
      const stores = Array.from({ length: 8 }, () => createPostgresStore({ connectionString: url, table }));
      try {
        await Promise.all(stores.map((store) => store.ensureSchema()));
        await Promise.all(stores.map((store) => store.ensureSchema()));
        const again = createPostgresStore({ connectionString: url, table });
        await again.ensureSchema();
        await again.close();
      } finally {
        for (const store of stores) await store.close();
      }
    });

    it('ensureSchema: false does not create the table; consume fails closed until ensureSchema()', async () => {
      const table = newTable('noschema');
      const store = createPostgresStore({ connectionString: url, table, ensureSchema: false });
      try {
        await expectUnavailable(store.consume(`ns:${Date.now()}`, Date.now() + 60_000));
        await store.ensureSchema();
        expect(await store.consume(`ns:${Date.now()}`, Date.now() + 60_000)).toBe(true);
      } finally {
        await store.close();
      }
    });

    it('quotes reserved and mixed-case names and honours a schema', async () => {
      const schema = `mrtr_s_${process.pid}_${Date.now().toString(36)}`;
      await admin.query(`CREATE SCHEMA "${schema}"`);
      try {
        for (const table of ['select', 'MixedCase_Table', `T${'x'.repeat(47)}`]) {
          const store = createPostgresStore({ connectionString: url, schema, table });
          expect(store.table).toBe(`"${schema}"."${table}"`);
          expect(await store.consume('quoted', Date.now() + 60_000)).toBe(true);
          expect(await store.consume('quoted', Date.now() + 60_000)).toBe(false);
          await store.close();
          const found = await admin.query('SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = $2', [
            schema,
            table,
          ]);
          expect(found.rowCount).toBe(1);
        }
      } finally {
        await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
      }
    });

    it('works without named prepared statements (preparedStatements: false) and on a pool shared by two tables', async () => {
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      pool.on('error', () => {});
      const stores = [
        createPostgresStore({ pool, table: newTable('unnamed'), preparedStatements: false }),
        createPostgresStore({ pool, table: newTable('named1') }),
        createPostgresStore({ pool, table: newTable('named2') }),
      ];
      try {
        for (const store of stores) {
          expect(await store.consume('same-id', Date.now() + 60_000)).toBe(true);
          expect(await store.consume('same-id', Date.now() + 60_000)).toBe(false);
        }
      } finally {
        for (const store of stores) await store.close();
        await pool.end();
      }
    });

    it('rejects unsafe identifiers and bad options at construction', () => {
      const bad = ['', 'a-b', 'x"; DROP TABLE y; --', '1abc', 'a b', 'a'.repeat(49), 'tä'];
      for (const table of bad) expect(() => createPostgresStore({ connectionString: url, table })).toThrow(TypeError);
      expect(() => createPostgresStore({ connectionString: url, schema: 'pg_catalog"."x' })).toThrow(TypeError);
      expect(() => createPostgresStore({} as never)).toThrow(TypeError);
      expect(() => createPostgresStore({ connectionString: url, pool: admin })).toThrow(TypeError);
      expect(() => createPostgresStore({ connectionString: url, statementTimeoutMs: 0 })).toThrow(RangeError);
      expect(() => createPostgresStore({ connectionString: url, purgeBatchSize: 1.5 })).toThrow(TypeError);
      expect(() => createPostgresStore({ connectionString: url, namespace: 'a\u0000b' })).toThrow(TypeError);
    });
  });

  describe('purge', () => {
    it('deletes expired rows in bounded batches and keeps live ones', async () => {
      const table = newTable('purge');
      let t = 1_000_000;
      const store = onClock(() => t, { table, purgeIntervalMs: 0, purgeBatchSize: 1000, purgeMaxBatches: 2 });
      try {
        await store.ensureSchema();
        const soon = t + 200;
        await admin.query(`INSERT INTO "${table}" (ns, id, expires_at) SELECT 'p', 'old' || g, $1 FROM generate_series(1, 2500) g`, [soon]);
        const live = Array.from({ length: 10 }, (_, i) => `live:${i}`);
        for (const id of live) expect(await store.consume(id, t + 60_000)).toBe(true);
        t = soon; // live up to and including expiresAtMs
        expect(await store.purge()).toBe(0);
        t = soon + 50;
        expect(await store.purge()).toBe(2000);
        expect(await store.purge()).toBe(500);
        expect(await store.purge()).toBe(0);
        expect(await rowCount(table)).toBe(10);
        for (const id of live) expect(await store.consume(id, t + 60_000)).toBe(false);
      } finally {
        await store.close();
      }
    });

    it('extraRetentionMs keeps recently expired rows; a renewed row is never purged', async () => {
      const table = newTable('grace');
      let t = 1_000_000;
      const store = onClock(() => t, { table, purgeIntervalMs: 0, extraRetentionMs: 60_000 });
      const plain = onClock(() => t, { table, purgeIntervalMs: 0 });
      try {
        const exp = t + 100;
        expect(await store.consume('g1', exp)).toBe(true);
        expect(await store.consume('g2', exp)).toBe(true);
        t = exp + 50;
        expect(await store.purge()).toBe(0);
        expect(await store.consume('g2', t + 60_000)).toBe(true); // expired → taken over
        expect(await plain.purge()).toBe(1); // only g1
        expect(await store.consume('g2', t + 60_000)).toBe(false);
        expect(await store.consume('g1', t + 60_000)).toBe(true);
      } finally {
        await store.close();
        await plain.close();
      }
    });

    it('the background purge runs on its own and reports errors to onError', async () => {
      const table = newTable('bg');
      const errors: unknown[] = [];
      let t = 1_000_000;
      const store = onClock(() => t, { table, purgeIntervalMs: 100, onError: (e) => errors.push(e) });
      try {
        const exp = t + 100;
        for (let i = 0; i < 20; i++) expect(await store.consume(`bg:${i}`, exp)).toBe(true);
        t = exp + 1; // expired by the store's clock: only the background run can remove them now
        await server.set(t);
        // Waits for the events (rows gone, an error reported); 30 s is a liveness bound, not a window.
        expect(await waitFor(async () => (await rowCount(table)) === 0, 30_000)).toBe(true);
        await admin.query(`DROP TABLE "${table}"`);
        expect(await waitFor(() => errors.length > 0, 30_000)).toBe(true);
        // One shape for every store's onError: a BackgroundError with a stable code, the purge's error as cause.
        expect(errors[0]).toBeInstanceOf(BackgroundError);
        expect((errors[0] as BackgroundError).code).toBe('STORE_PURGE_FAILED');
        expect((errors[0] as BackgroundError).message).toMatch(/^createPostgresStore: the background purge failed \(/);
        const cause = (errors[0] as BackgroundError).cause;
        expect(MrtrError.is(cause) || cause instanceof Error).toBe(true);
      } finally {
        await store.close();
      }
    });
  });
});

// The PostgreSQL task store: the shared compliance suite (an owned pool from a URL, an injected pool with and
// without server-side timeouts, two instances sharing one table), then what the suite cannot see: a restart,
// the bounds under concurrent creates from two pools, a corrupt row, the schema made once, the purge of expired
// rows, the bound on update retries, and failures.
import { MrtrError } from '@mrtr/core';
import type { TaskRecord } from '@mrtr/core/tasks';
import { taskStoreCompliance } from '@mrtr/test-suite';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresTaskStore, type PgPoolLike, type PgQueryConfigLike, type SqlTaskStore } from '../src/index.js';
import { countShards, principalShard } from '../src/postgres/tasks.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  postgresSkipReason,
  REQUIRE_SERVICES,
  recorded,
  skipPostgres,
  uniqueTable,
  withHostPort,
} from './helpers.js';

postgresSkipReason('postgres.tasks.test.ts');

if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

const DDL = /^\s*(ALTER|CREATE|BEGIN)\b|pg_advisory/i;

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => {
      throw new Error(`expected a rejection, resolved ${JSON.stringify(value)}`);
    },
    (reason: unknown) => reason,
  );
}

async function expectUnavailable(promise: Promise<unknown>): Promise<void> {
  const error = await rejection(promise);
  expect(MrtrError.is(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
}

describe.skipIf(skipPostgres)('PostgreSQL task store', () => {
  const url = DATABASE_URL as string;
  const table = uniqueTable('tsk');
  const tables = [table, `${table}_inj`, `${table}_bare`, `${table}_x`];
  let shared: pg.Pool;
  let bare: pg.Pool;
  let admin: pg.Pool;

  beforeAll(async () => {
    await assertPostgresReachable(url);
    shared = new pg.Pool({ connectionString: url, max: 10, statement_timeout: 5000, lock_timeout: 2000 });
    shared.on('error', () => {});
    bare = new pg.Pool({ connectionString: url, max: 10 });
    bare.on('error', () => {});
    admin = new pg.Pool({ connectionString: url, max: 2 });
    admin.on('error', () => {});
  });

  afterAll(async () => {
    await shared?.end();
    await bare?.end();
    await admin?.end();
    await dropTables(url, tables);
  });

  // The store judges expiry by its injected clock (PostgreSQL's own clock is never used).
  let t = Date.now();
  const clock = { now: () => t, advance: (ms: number) => void (t += ms) };

  describe('owned pool (connectionString)', () => {
    taskStoreCompliance(it, (limits) => createPostgresTaskStore({ connectionString: url, table, now: clock.now, ...limits }), {
      name: 'postgres tasks(url)',
      clock,
      sharedBackend: true,
    });
  });

  describe('injected pool', () => {
    taskStoreCompliance(it, (limits) => createPostgresTaskStore({ pool: shared, table: `${table}_inj`, now: clock.now, ...limits }), {
      name: 'postgres tasks(pool)',
      clock,
      sharedBackend: true,
    });
  });

  describe('injected pool without server-side timeouts', () => {
    taskStoreCompliance(it, (limits) => createPostgresTaskStore({ pool: bare, table: `${table}_bare`, now: clock.now, ...limits }), {
      name: 'postgres tasks(bare pool)',
      clock,
      sharedBackend: true,
    });
  });

  describe('beyond the suite', () => {
    let n = 0;
    const task = (principal: string, extra: Partial<TaskRecord> = {}): TaskRecord => ({
      taskId: `task-${process.pid}-${n++}`,
      principal,
      status: 'working',
      createdAt: t,
      lastUpdatedAt: t,
      ttlMs: 60_000,
      inputRequests: {},
      askedKeys: [],
      ...extra,
    });
    const stores: SqlTaskStore[] = [];
    const open = (options: Partial<Parameters<typeof createPostgresTaskStore>[0]> = {}) => {
      const store = createPostgresTaskStore({ connectionString: url, table: `${table}_x`, now: clock.now, ...options } as Parameters<
        typeof createPostgresTaskStore
      >[0]);
      stores.push(store);
      return store;
    };
    const rows = async (where: string, values: unknown[]) =>
      Number((await admin.query(`SELECT count(*) AS n FROM "${table}_x" WHERE ${where}`, values)).rows[0].n);

    afterAll(async () => {
      await Promise.all(stores.map((store) => store.close()));
    });

    it('maxTasks: a full store drops its expired tasks before any final one; two stores on their own pools racing creates keep the bound', async () => {
      const namespace = `full-${n++}`;
      const store = open({ namespace, maxTasks: 4, purgeBatchSize: 0 });
      for (let i = 0; i < 2; i++) await store.create(task('old', { ttlMs: 1_000 }));
      const finals = [
        task('done', { status: 'completed', result: { content: [] } }),
        task('done', { status: 'completed', result: { content: [] } }),
      ];
      for (const final of finals) await store.create(final);
      clock.advance(1_000);
      // Full (4 rows, 2 of them expired and not purged): the expired ones make the room, no final task goes.
      await store.create(task('new'));
      for (const final of finals) expect(await store.get(final.taskId)).toBeDefined();
      expect(await rows('ns = $1', [namespace])).toBe(3);
      const other = createPostgresTaskStore({ connectionString: url, table: `${table}_x`, now: clock.now, namespace, maxTasks: 4 });
      stores.push(other);
      const settled = await Promise.allSettled(
        Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? store : other).create(task(`racer-${i}`))),
      );
      // One slot left, then room from a final task while its holder keeps two more than a newcomer (2 of 2): two
      // more, whoever wins the races; its last final task stays.
      expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(2);
      expect(await rows('ns = $1', [namespace])).toBe(4);
      expect(await rows('ns = $1 AND NOT live', [namespace])).toBe(1);
    });

    it('a restart: a task created before close() is read, updated and counted by a store opened afterwards', async () => {
      const namespace = `restart-${n++}`;
      const first = open({ namespace, maxLivePerPrincipal: 2, maxPerPrincipal: 2 });
      const created = task('alice');
      await first.create(created);
      await first.create(task('alice'));
      await first.close();
      await expectUnavailable(first.get(created.taskId));
      const second = open({ namespace, maxLivePerPrincipal: 2, maxPerPrincipal: 2 });
      expect(await second.get(created.taskId)).toEqual(created);
      expect((await second.update(created.taskId, (r) => ({ ...r, statusMessage: 'after restart' })))?.statusMessage).toBe('after restart');
      const refused = await rejection(second.create(task('alice')));
      expect(MrtrError.is(refused) && refused.code).toBe('ERR_TASK_LIMIT');
    });

    it('60 concurrent creates of one principal from two stores with their own pools: exactly the bound, in the table too', async () => {
      const namespace = `race-${n++}`;
      const a = open({ namespace, maxLivePerPrincipal: 7, maxPerPrincipal: 9 });
      const b = open({ namespace, maxLivePerPrincipal: 7, maxPerPrincipal: 9 });
      await Promise.all([a.ensureSchema(), b.ensureSchema()]);
      const settled = await Promise.allSettled(Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? a : b).create(task('carol'))));
      expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(7);
      for (const s of settled) if (s.status === 'rejected') expect((s.reason as { limit?: unknown }).limit).toBe('live');
      expect(await rows('ns = $1 AND principal = $2', [namespace, 'carol'])).toBe(7);
      // Final tasks count for the kept bound only: two more fit, then none, under concurrency again.
      const done = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).create(task('carol', { status: 'completed', result: { content: [] } }))),
      );
      expect(done.filter((s) => s.status === 'fulfilled')).toHaveLength(2);
      for (const s of done) if (s.status === 'rejected') expect((s.reason as { limit?: unknown }).limit).toBe('kept');
      expect(await rows('ns = $1 AND principal = $2', [namespace, 'carol'])).toBe(9);
    });

    describe('count shards (issue 43)', () => {
      /** A principal of count shard `k` of `shards`. */
      const principalOf = (prefix: string, k: number, shards: number): string => {
        for (let i = 0; ; i++) if (principalShard(`${prefix}${i}`, shards) === k) return `${prefix}${i}`;
      };
      /** Sessions of this test's table waiting on a lock (a row's or an advisory lock), as the server sees them. */
      const lockWaiters = async (): Promise<number> => {
        const waiting = await admin.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%' || $1 || '%'",
          [`${table}_x`],
        );
        return waiting.rows[0].n;
      };
      /** Resolves once at least `n` sessions wait on a lock (polls the server; never judges by time), or when `stop()`. */
      const waitingOnLock = (n: number): { seen: Promise<boolean>; stop(): void } => {
        let stopped = false;
        const seen = (async () => {
          while (!stopped) {
            if ((await lockWaiters()) >= n) return true;
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
          return false;
        })();
        return { seen, stop: () => void (stopped = true) };
      };
      /**
       * Whether `promise` settles without waiting on a lock: it races a watch of pg_stat_activity for one more
       * session waiting on a lock than the `already` waiting before it started (an event, not a time window).
       */
      const withoutWaiting = async <T>(promise: Promise<T>, already: number): Promise<'finished' | 'waited on a lock'> => {
        const watch = waitingOnLock(already + 1);
        try {
          return await Promise.race([promise.then(() => 'finished' as const), watch.seen.then(() => 'waited on a lock' as const)]);
        } finally {
          watch.stop();
        }
      };

      it('a create waits only for creates of its own count shard: while one holds shard 0 (waiting for a row), a create of shard 1 goes through', async () => {
        const namespace = `shards-${n++}`;
        // Eight shards (100,000 ≥ 8 × 256); a long lock_timeout, so a wait for shard 0 would hang rather than fail.
        const store = open({ namespace, lockTimeoutMs: 60_000, statementTimeoutMs: 60_000 });
        const shards = countShards(100_000, 256);
        expect(shards).toBe(8);
        const zero = principalOf('zero', 0, shards);
        const first = task(zero);
        await store.create(first);
        // Another session holds the task's row: a create of the same id (shard 0) waits for it, inside its
        // transaction, holding its principal's and its shard's locks.
        const holder = new pg.Client({ connectionString: url });
        await holder.connect();
        try {
          await holder.query('BEGIN');
          await holder.query(`SELECT 1 FROM "${table}_x" WHERE ns = $1 AND task_id = $2 FOR UPDATE`, [namespace, first.taskId]);
          const blocked = rejection(store.create({ ...first }));
          expect(await waitingOnLock(1).seen).toBe(true);
          // Before shards every create of the namespace took one lock: this one waited behind the blocked create.
          expect(await withoutWaiting(store.create(task(principalOf('one', 1, shards))), 1)).toBe('finished');
          await holder.query('ROLLBACK');
          const refused = await blocked;
          expect(String((refused as Error).message)).toMatch(/already exists/);
        } finally {
          await holder.end();
        }
      });

      it('a create is one request (one round trip): BEGIN, the bounds, both locks, the create statement, COMMIT', async () => {
        // Issue 43: a create was six requests (BEGIN; the locks; the counts; the insert; the purge; COMMIT).
        const namespace = `shardrt-${n++}`;
        const { pool, texts } = recorded(shared);
        const store = createPostgresTaskStore({ pool, table: `${table}_x`, namespace, now: clock.now });
        stores.push(store);
        await store.create(task('rt'));
        texts.length = 0;
        await store.create(task('rt'));
        expect(texts).toHaveLength(1);
        expect(texts[0]).toMatch(/^BEGIN; SET LOCAL statement_timeout = \d+; SET LOCAL lock_timeout = \d+; SELECT pg_advisory_xact_lock\(/);
        expect(texts[0]).toMatch(/; COMMIT$/);
      });

      it('maxTasks holds in total: each shard keeps its part; a full shard refuses (or makes room) while another has room', async () => {
        const namespace = `shardfull-${n++}`;
        // Four shards of two tasks (8 ≥ 4 × 2).
        const store = open({ namespace, maxTasks: 8, maxLivePerPrincipal: 2, maxPerPrincipal: 2 });
        const shards = countShards(8, 2);
        expect(shards).toBe(4);
        const principals = Array.from({ length: 40 }, (_, i) => `p${i}`);
        const settled = await Promise.allSettled(principals.map((p) => store.create(task(p))));
        const made = principals.filter((_, i) => settled[i]?.status === 'fulfilled');
        for (const s of settled) if (s.status === 'rejected') expect((s.reason as { limit?: unknown }).limit).toBe('store');
        expect(made.length).toBeLessThanOrEqual(8);
        expect(await rows('ns = $1', [namespace])).toBe(made.length);
        const perShard = new Map<number, number>();
        for (const p of made) perShard.set(principalShard(p, shards), (perShard.get(principalShard(p, shards)) ?? 0) + 1);
        expect([...perShard.values()].every((count) => count === 2)).toBe(true);
        // Every shard some principal fell in is full: 8 in all, none past.
        expect(perShard.size).toBe(new Set(principals.map((p) => principalShard(p, shards))).size);
        // A full shard refuses a new principal of it, even though the namespace has fewer than maxTasks… only when
        // another shard is not full; here all are: each refuses, and the table never passes 8.
        const again = await rejection(store.create(task(principalOf('q', 0, shards))));
        expect((again as { limit?: unknown }).limit).toBe('store');
        expect(await rows('ns = $1', [namespace])).toBeLessThanOrEqual(8);
      });

      it('a store of another layout (another number of shards) counts afresh and keeps the bound', async () => {
        const namespace = `shardlayout-${n++}`;
        const four = open({ namespace, maxTasks: 8, maxLivePerPrincipal: 2, maxPerPrincipal: 2 });
        for (let i = 0; i < 12; i++) await four.create(task(`l${i}`)).catch(() => {});
        const held = await rows('ns = $1', [namespace]);
        expect(held).toBeLessThanOrEqual(8);
        // One shard (8 < 2 × 8): the namespace's own count, missing → counted from the table.
        const one = open({ namespace, maxTasks: 8, maxLivePerPrincipal: 8, maxPerPrincipal: 8 });
        for (let i = 0; i < 12; i++) await one.create(task(`m${i % 2}`)).catch(() => {});
        expect(await rows('ns = $1', [namespace])).toBe(8);
        // Back to four shards: the old counts of that layout were deleted and are counted afresh; still 8 at most.
        for (let i = 0; i < 12; i++) await four.create(task(`r${i}`)).catch(() => {});
        expect(await rows('ns = $1', [namespace])).toBeLessThanOrEqual(8);
      });
    });

    it('a corrupt or foreign record fails closed (ERR_STORE_UNAVAILABLE) on get and update, without calling change', async () => {
      const namespace = `corrupt-${n++}`;
      const store = open({ namespace });
      const broken = ['{not json', JSON.stringify({ taskId: 'x' }), '[]', 'null'];
      for (const text of broken) {
        const created = task('dave');
        await store.create(created);
        await admin.query(`UPDATE "${table}_x" SET record = $3 WHERE ns = $1 AND task_id = $2`, [namespace, created.taskId, text]);
        await expectUnavailable(store.get(created.taskId));
        let called = false;
        await expectUnavailable(
          store.update(created.taskId, (r) => {
            called = true;
            return r;
          }),
        );
        expect(called).toBe(false);
      }
      // Another task's record under this id, or a row whose principal column disagrees with its record.
      const victim = task('dave');
      const other = task('mallory');
      await store.create(victim);
      await admin.query(`UPDATE "${table}_x" SET record = $3 WHERE ns = $1 AND task_id = $2`, [
        namespace,
        victim.taskId,
        JSON.stringify(other),
      ]);
      await expectUnavailable(store.get(victim.taskId));
      const moved = task('erin');
      await store.create(moved);
      await admin.query(`UPDATE "${table}_x" SET principal = 'frank' WHERE ns = $1 AND task_id = $2`, [namespace, moved.taskId]);
      await expectUnavailable(store.get(moved.taskId));
    });

    it('ensureSchema: the first start creates the table, both indexes and the namespace counts table; later starts read the catalog only (no DDL, no lock, no transaction)', async () => {
      const fresh = uniqueTable('tskddl');
      tables.push(fresh);
      const first = recorded(shared);
      const store = createPostgresTaskStore({ pool: first.pool, table: fresh });
      await store.ensureSchema();
      await store.ensureSchema();
      const ddl = first.texts.filter((text) => /^\s*CREATE\b/i.test(text));
      expect(ddl).toHaveLength(4);
      const indexes = await admin.query('SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [fresh]);
      expect(indexes.rows.map((r) => r.indexname)).toEqual([`${fresh}_expires_at_idx`, `${fresh}_pkey`, `${fresh}_principal_idx`]);
      for (let start = 0; start < 2; start++) {
        const next = recorded(shared);
        const again = createPostgresTaskStore({ pool: next.pool, table: fresh });
        await again.ensureSchema();
        expect(next.texts.filter((text) => DDL.test(text))).toEqual([]);
        expect(next.texts.length).toBe(1); // the catalog read
        await again.close();
      }
      await store.close();
    });

    it('eight stores running ensureSchema at once on a new table all succeed', async () => {
      const fresh = uniqueTable('tskconc');
      tables.push(fresh);
      const many = Array.from({ length: 8 }, () => createPostgresTaskStore({ connectionString: url, table: fresh, maxConnections: 2 }));
      try {
        await Promise.all(many.map((store) => store.ensureSchema()));
      } finally {
        await Promise.all(many.map((store) => store.close()));
      }
    });

    it('a create deletes its principal’s expired rows and a bounded batch of other expired rows', async () => {
      const namespace = `purge-${n++}`;
      const store = open({ namespace, purgeBatchSize: 3 });
      for (let i = 0; i < 5; i++) await store.create(task('gina', { ttlMs: 1_000 }));
      for (let i = 0; i < 2; i++) await store.create(task('hank', { ttlMs: 1_000 }));
      clock.advance(1_000);
      expect(await rows('ns = $1', [namespace])).toBe(7);
      await store.create(task('hank'));
      // hank's two expired rows, then at most 3 others (the oldest of the namespace).
      expect(await rows('ns = $1 AND principal = $2', [namespace, 'hank'])).toBe(1);
      expect(await rows('ns = $1 AND principal = $2', [namespace, 'gina'])).toBeGreaterThanOrEqual(2);
      const before = await rows('expires_at <= $1', [t]);
      await store.create(task('ivan'));
      expect(before - (await rows('expires_at <= $1', [t]))).toBeLessThanOrEqual(3);
    });

    it('an expired task id can be created again; a live one is refused and kept', async () => {
      const namespace = `reuse-${n++}`;
      const store = open({ namespace });
      const first = task('judy', { ttlMs: 1_000 });
      await store.create(first);
      await expect(store.create({ ...first, principal: 'mallory' })).rejects.toThrow(/already exists/);
      expect(await store.get(first.taskId)).toEqual(first);
      clock.advance(1_000);
      const again = { ...first, principal: 'kate', createdAt: t, lastUpdatedAt: t };
      await store.create(again);
      expect(await store.get(first.taskId)).toEqual(again);
    });

    it('an update whose row changes under every try gives up after 32 tries with ERR_STORE_UNAVAILABLE and writes nothing', async () => {
      const namespace = `retry-${n++}`;
      // Every UPDATE of the store is preceded by another writer bumping the version.
      const inner: PgPoolLike = shared;
      let bumps = 0;
      const bump = (config: PgQueryConfigLike) => {
        if (!/^UPDATE\b/.test(config.text)) return Promise.resolve();
        bumps++;
        return admin.query(`UPDATE "${table}_x" SET version = version + 1 WHERE ns = $1`, [namespace]);
      };
      const pool: PgPoolLike = {
        query: async (config) => inner.query(config),
        async connect() {
          const client = await inner.connect();
          return {
            query: async (config: PgQueryConfigLike) => {
              await bump(config);
              return client.query(config);
            },
            release: (error?: Error | boolean) => client.release(error),
          };
        },
        end: () => inner.end(),
      };
      const store = createPostgresTaskStore({ pool, table: `${table}_x`, namespace, now: clock.now });
      const created = task('liam');
      await store.create(created);
      let calls = 0;
      await expectUnavailable(
        store.update(created.taskId, (r) => {
          calls++;
          return { ...r, statusMessage: 'never' };
        }),
      );
      expect(calls).toBe(32);
      expect(bumps).toBe(32);
      expect((await store.get(created.taskId))?.statusMessage).toBeUndefined();
      await store.close();
    });

    it('misuse is a TypeError/RangeError before any database access; odd ids are unknown tasks', async () => {
      expect(() => createPostgresTaskStore({ connectionString: url, table: 'bad-name' })).toThrow(TypeError);
      expect(() => createPostgresTaskStore({ connectionString: url, maxLivePerPrincipal: 5, maxPerPrincipal: 4 })).toThrow(RangeError);
      expect(() => createPostgresTaskStore({ connectionString: url, pool: shared })).toThrow(TypeError);
      const store = open({ namespace: `misuse-${n++}`, maxRecordBytes: 2048 });
      await expect(store.create({ ...task('mia'), taskId: '' })).rejects.toThrow(TypeError);
      await expect(store.create({ ...task('mia'), taskId: 'x'.repeat(257) })).rejects.toThrow(TypeError);
      await expect(store.create({ ...task('mia'), taskId: 'a\u0000b' })).rejects.toThrow(TypeError);
      await expect(store.create({ ...task('mia'), principal: 'a\uD800' })).rejects.toThrow(TypeError);
      await expect(store.create({ ...task('mia'), status: 'nope' } as unknown as TaskRecord)).rejects.toThrow(TypeError);
      await expect(store.create(task('mia', { statusMessage: 'x'.repeat(4096) }))).rejects.toThrow(RangeError);
      const small = task('mia');
      await store.create(small);
      await expect(store.update(small.taskId, (r) => ({ ...r, statusMessage: 'x'.repeat(4096) }))).rejects.toThrow(RangeError);
      expect(await store.get(small.taskId)).toEqual(small);
      expect(await store.get('a\u0000b')).toBeUndefined();
      expect(await store.get('x'.repeat(257))).toBeUndefined();
      expect(await store.get(42 as unknown as string)).toBeUndefined();
    });

    it('an unreachable server: every operation rejects with ERR_STORE_UNAVAILABLE within its deadline', async () => {
      const store = createPostgresTaskStore({
        connectionString: withHostPort(url, '127.0.0.1', 1),
        table: `${table}_x`,
        connectTimeoutMs: 500,
        statementTimeoutMs: 500,
      });
      try {
        const started = performance.now();
        await expectUnavailable(store.create(task('nina')));
        await expectUnavailable(store.get('whatever'));
        await expectUnavailable(store.update('whatever', (r) => r));
        await expectUnavailable(store.ensureSchema());
        expect(performance.now() - started).toBeLessThan(20_000);
      } finally {
        await store.close();
      }
    });

    it('close() ends an owned pool but never an injected one', async () => {
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => {});
      const store = createPostgresTaskStore({ pool, table: `${table}_x`, namespace: `close-${n++}` });
      const created = task('olga');
      await store.create(created);
      await store.close();
      await store.close();
      await expectUnavailable(store.get(created.taskId));
      expect((await pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
      await pool.end();
    });
  });
});

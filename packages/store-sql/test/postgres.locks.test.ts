// Issue 19, items 2 and 3, against a real server: a starting instance's ensureSchema takes no table lock
// when nothing is missing (so an open reader of the table cannot stall the fleet through it), DDL that
// is needed gives up after lockTimeoutMs, one locked row holds up only the consumes that need it, a
// statement that timed out burns none of its states, and a missing reply after the deadline is resolved
// by owner. Every wait is for an event, bounded by a generous limit; nothing asserts on elapsed time.
import { MrtrError } from '@mrtr/core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresStore, type PgPoolLike, type PgQueryConfigLike, type SqlReplayStore } from '../src/index.js';
import { budgetShardOf, budgetShards } from '../src/shared/claims.js';
import { lockKey } from '../src/postgres/statements.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  postgresSkipReason,
  recorded,
  REQUIRE_SERVICES,
  skipPostgres,
  sleep,
  uniqueTable,
  REPLAY_COLUMNS,
} from './helpers.js';

postgresSkipReason('postgres.locks.test.ts');
if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

/** A liveness bound, not a timing window: generous, so only a hang (the bug) reaches it. */
const BOUND_MS = 20_000;

function within<T>(promise: Promise<T>, what: string, ms = BOUND_MS): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms (blocked)`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/** Waits (bounded) until `condition` holds; polls the server, never asserts on time. */
async function waitFor(condition: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + BOUND_MS;
  while (Date.now() < deadline) {
    if (await condition()) return;
    await sleep(20);
  }
  throw new Error(`gave up waiting for ${what}`);
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

describe.skipIf(skipPostgres)('PostgreSQL: locks, timeouts and head-of-line blocking', () => {
  const url = DATABASE_URL as string;
  const tables: string[] = [];
  const cleanups: Array<() => Promise<unknown>> = [];
  let admin: pg.Pool;
  const newTable = (tag: string) => {
    const table = uniqueTable(tag);
    tables.push(table);
    return table;
  };
  /** A session of its own holding a transaction open (ended by the test, or at the latest in afterAll). */
  const holder = async (): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    await client.connect();
    cleanups.push(() => client.end().catch(() => {}));
    return client;
  };
  /** A pool like the demo's before this fix: no server-side statement_timeout or lock_timeout. */
  const barePool = (): pg.Pool => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {});
    cleanups.push(() => pool.end().catch(() => {}));
    return pool;
  };
  const track = (store: SqlReplayStore): SqlReplayStore => {
    cleanups.push(() => store.close());
    return store;
  };
  const waitingOnLock = (table: string) => async () =>
    Number(
      (
        await admin.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%' || $1 || '%'",
          [table],
        )
      ).rows[0].n,
    ) > 0;

  beforeAll(async () => {
    await assertPostgresReachable(url);
    admin = new pg.Pool({ connectionString: url, max: 2 });
    admin.on('error', () => {});
  });
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await admin?.end();
    await dropTables(url, tables);
  });

  describe('ensureSchema', () => {
    it('on a complete schema it takes no table lock: behind an open transaction reading the table, a starting store is ready at once and consumes keep flowing', async () => {
      const table = newTable('lkread');
      const running = track(createPostgresStore({ connectionString: url, table, purgeIntervalMs: 0 }));
      await running.ensureSchema();
      expect(await running.consume('warm', Date.now() + 60_000)).toBe(true);
      // pg_dump or an idle transaction: ACCESS SHARE on the table, held until the test ends it.
      const reader = await holder();
      await reader.query('BEGIN');
      await reader.query(`SELECT count(*) FROM "${table}"`);
      // A new instance starts: its pool has no server-side bounds (like the demo's had none) and a long
      // client timeout, so any DDL it sent would queue behind the reader and every consume behind that.
      const { pool, texts } = recorded(barePool());
      const starting = track(createPostgresStore({ pool, table, statementTimeoutMs: 60_000, purgeIntervalMs: 0 }));
      const [, first, second] = await within(
        Promise.all([
          starting.ensureSchema(),
          running.consume('during-start', Date.now() + 60_000),
          starting.consume('from-new-instance', Date.now() + 60_000),
        ]),
        'ensureSchema and consumes next to an open reader',
      );
      expect([first, second]).toEqual([true, true]);
      expect(texts.filter((text) => /^\s*(ALTER|CREATE)\b/i.test(text) || text.includes('pg_advisory'))).toEqual([]);
      // The reader is still there, and still nothing waits.
      expect(await within(running.consume('after-start', Date.now() + 60_000), 'a consume after the start')).toBe(true);
      await reader.query('ROLLBACK');
    });

    it('missing columns or a missing expiry index are still created, and only what is missing (one ALTER TABLE for all missing columns)', async () => {
      // 0.1: no owner, fp or outcome.
      const noOwner = newTable('lkold');
      await admin.query(`CREATE TABLE "${noOwner}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, id))`);
      await admin.query(`CREATE INDEX "${noOwner}_expires_at_idx" ON "${noOwner}" (expires_at)`);
      // Before outcome recording: owner, no fp or outcome.
      const noOutcome = newTable('lknofp');
      await admin.query(
        `CREATE TABLE "${noOutcome}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, PRIMARY KEY (ns, id))`,
      );
      await admin.query(`CREATE INDEX "${noOutcome}_expires_at_idx" ON "${noOutcome}" (expires_at)`);
      const noIndex = newTable('lknoix');
      await admin.query(
        `CREATE TABLE "${noIndex}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, fp text, outcome text, misses integer, lease_until bigint, fence integer, PRIMARY KEY (ns, id))`,
      );
      for (const [table, missing] of [
        [noOwner, 'ALTER'],
        [noOutcome, 'ALTER'],
        [noIndex, 'CREATE INDEX'],
      ] as const) {
        const { pool, texts } = recorded(barePool());
        const store = track(createPostgresStore({ pool, table, purgeIntervalMs: 0 }));
        await store.ensureSchema();
        // The outcome budget's own table is created besides (a new table: no lock on the replay table).
        const ddl = texts.filter(
          (text) =>
            /^\s*(ALTER|CREATE)\b/i.test(text) && !['_budget', '_epoch', '_keys'].some((suffix) => text.includes(`"${table}${suffix}"`)),
        );
        expect(ddl).toHaveLength(1);
        expect(ddl[0]?.startsWith(missing)).toBe(true);
        const columns = await admin.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1', [table]);
        expect(columns.rows.map((r) => r.column_name as string).sort()).toEqual(REPLAY_COLUMNS);
        const index = await admin.query('SELECT indexdef FROM pg_indexes WHERE tablename = $1', [table]);
        expect(index.rows.some((r) => (r.indexdef as string).includes('(expires_at)'))).toBe(true);
        expect(await store.consume('works', Date.now() + 60_000)).toBe(true);
      }
    });

    // ADD COLUMN needs ACCESS EXCLUSIVE (blocked by any reader); CREATE INDEX needs SHARE (blocked by any
    // open write). Either request, while queued, holds up every consume behind it.
    for (const missing of ['owner column', 'expiry index'] as const) {
      it(`DDL that waits for a lock (missing ${missing}) gives up after lockTimeoutMs with an error that says so, instead of hanging; writes keep flowing`, async () => {
        const table = newTable('lkddl');
        await admin.query(
          `CREATE TABLE "${table}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL${missing === 'owner column' ? '' : ', owner text, fp text, outcome text, misses integer, lease_until bigint, fence integer'}, PRIMARY KEY (ns, id))`,
        );
        if (missing === 'owner column') await admin.query(`CREATE INDEX "${table}_expires_at_idx" ON "${table}" (expires_at)`);
        const other = await holder();
        await other.query('BEGIN');
        if (missing === 'owner column') await other.query(`SELECT count(*) FROM "${table}"`);
        else await other.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'held', $1)`, [Date.now() + 60_000]);
        const starting = track(
          createPostgresStore({ connectionString: url, table, statementTimeoutMs: 60_000, lockTimeoutMs: 300, purgeIntervalMs: 0 }),
        );
        const failed = await within(settle(starting.ensureSchema()), 'ensureSchema behind a lock');
        expect(unavailable(failed)).toBe(true);
        const cause = String((failed as MrtrError).cause);
        expect(cause).toMatch(/lockTimeoutMs \(300 ms\)/);
        expect(cause).toContain(`"${table}"`);
        expect(cause).toMatch(/nothing was changed/);
        // The rest of the fleet (here: a plain write, as an instance of an older version would send) is not held up.
        await within(
          admin.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'meanwhile', $1)`, [Date.now() + 60_000]),
          'a write',
        );
        // This store's consumes fail closed until its schema is ensured.
        expect(unavailable(await within(settle(starting.consume('early', Date.now() + 60_000)), 'an early consume'))).toBe(true);
        await other.query('ROLLBACK');
        await within(starting.ensureSchema(), 'ensureSchema once the lock is gone');
        const columns = await admin.query('SELECT column_name FROM information_schema.columns WHERE table_name = $1', [table]);
        expect(columns.rows.map((r) => r.column_name as string).sort()).toEqual(REPLAY_COLUMNS);
        const index = await admin.query('SELECT indexdef FROM pg_indexes WHERE tablename = $1', [table]);
        expect(index.rows.some((r) => (r.indexdef as string).includes('(expires_at)'))).toBe(true);
        expect(await starting.consume('after', Date.now() + 60_000)).toBe(true);
      });
    }
  });

  describe('group commit', () => {
    it('a row locked by another transaction holds up only the consumes that need it: consumes sent meanwhile, in other batches, resolve', async () => {
      const table = newTable('lkhol');
      // Long server and client bounds: the consume of the locked row waits for as long as the holder stays.
      const store = track(
        createPostgresStore({ connectionString: url, table, statementTimeoutMs: 60_000, lockTimeoutMs: 60_000, purgeIntervalMs: 0 }),
      );
      expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
      const locker = await holder();
      await locker.query('BEGIN');
      await locker.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'locked', $1)`, [Date.now() + 60_000]);
      let settled = false;
      const blocked = store.consume('locked', Date.now() + 60_000).finally(() => {
        settled = true;
      });
      await waitFor(waitingOnLock(table), 'the consume of the locked row to wait on its lock');
      expect(await within(store.consume('free', Date.now() + 60_000), 'an unrelated consume')).toBe(true);
      const burst = ['f1', 'f2', 'f3', 'f1'].map((id) => store.consume(id, Date.now() + 60_000));
      expect(await within(Promise.all(burst), 'an unrelated batch')).toEqual([true, true, true, false]);
      expect(settled).toBe(false);
      await locker.query('ROLLBACK');
      expect(await within(blocked, 'the consume of the once-locked row')).toBe(true);
    });

    for (const op of ['consume', 'claim'] as const) {
      it(`a ${op} batch that gives up on a row another transaction holds locked fails only that id: the 200 unrelated ids in it resolve, none burned`, async () => {
        const table = newTable('lkhead');
        const store = track(
          createPostgresStore({ connectionString: url, table, statementTimeoutMs: 2000, lockTimeoutMs: 300, purgeIntervalMs: 0 }),
        );
        await store.ensureSchema();
        // An expired row: a consume or claim would take it over, but another transaction holds it locked.
        await admin.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'm:locked', 1)`);
        const locker = await holder();
        await locker.query('BEGIN');
        await locker.query(`SELECT 1 FROM "${table}" WHERE id = 'm:locked' FOR UPDATE`);
        const exp = Date.now() + 60_000;
        const take = (id: string) =>
          op === 'consume' ? store.consume(id, exp) : store.claim(id, exp, 'fp').then((r) => r.status === 'first');
        // One tick: one batch (maxBatchSize 256) holding the locked id among 200 others, on both sides of it.
        const ids = [...Array.from({ length: 100 }, (_, i) => `a:${i}`), 'm:locked', ...Array.from({ length: 100 }, (_, i) => `z:${i}`)];
        const results = await within(Promise.all(ids.map((id) => settle(take(id)))), 'the batch');
        expect(unavailable(results[100])).toBe(true);
        expect(results.filter((r, i) => i !== 100 && r === true)).toHaveLength(200);
        await locker.query('ROLLBACK');
        // The locked id was not burned: it is taken exactly once now.
        expect(await take('m:locked')).toBe(true);
        expect(await take('m:locked')).toBe(false);
      });
    }

    // Issue 41, item 3: an id another transaction is still inserting is invisible to every other snapshot, so no
    // SKIP LOCKED question can name it; the stalled batch is split, each id settling alone within its time.
    for (const op of ['consume', 'claim'] as const) {
      it(`a ${op} batch stalled by an open transaction inserting one of its ids fails only that id: the 200 unrelated ids resolve, the held one is taken exactly once after`, async () => {
        const table = newTable('lkins');
        const store = track(
          createPostgresStore({ connectionString: url, table, statementTimeoutMs: 2000, lockTimeoutMs: 300, purgeIntervalMs: 0 }),
        );
        await store.ensureSchema();
        const exp = Date.now() + 60_000;
        const locker = await holder();
        await locker.query('BEGIN');
        await locker.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'm:held', $1)`, [exp]);
        const take = (id: string) =>
          op === 'consume' ? store.consume(id, exp) : store.claim(id, exp, 'fp').then((r) => r.status === 'first');
        // One tick: one batch holding the held id among 200 others, on both sides of it.
        const ids = [...Array.from({ length: 100 }, (_, i) => `a:${i}`), 'm:held', ...Array.from({ length: 100 }, (_, i) => `z:${i}`)];
        const results = await within(Promise.all(ids.map((id) => settle(take(id)))), 'the batch');
        expect(unavailable(results[100])).toBe(true);
        expect(results.filter((r, i) => i !== 100 && r === true)).toHaveLength(200);
        await locker.query('ROLLBACK');
        // Nothing of the stalled statement committed: the held id is taken exactly once now, the others stay taken.
        expect(await take('m:held')).toBe(true);
        expect(await take('m:held')).toBe(false);
        expect(await Promise.all(['a:0', 'z:99'].map(take))).toEqual([false, false]);
      });
    }

    for (const kind of ['owned pool', 'injected pool without server-side timeouts', 'injected pool with server-side timeouts'] as const) {
      it(`${kind}: a batch that times out on a row another transaction is inserting fails only that id closed and burns none of its states (each is consumable exactly once)`, async () => {
        const table = newTable('lkburn');
        const bounds = { statementTimeoutMs: 1000, connectTimeoutMs: 1000, lockTimeoutMs: 200, purgeIntervalMs: 0, table };
        let store: SqlReplayStore;
        if (kind === 'owned pool') {
          store = createPostgresStore({ connectionString: url, ...bounds });
        } else if (kind === 'injected pool with server-side timeouts') {
          const pool = new pg.Pool({ connectionString: url, max: 4, statement_timeout: 1000, lock_timeout: 200 });
          pool.on('error', () => {});
          cleanups.push(() => pool.end().catch(() => {}));
          store = createPostgresStore({ pool, ...bounds });
        } else {
          store = createPostgresStore({ pool: barePool(), ...bounds });
        }
        track(store);
        expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
        const locker = await holder();
        await locker.query('BEGIN');
        // Sorts last: the batch has written the other two ids (uncommitted) when it reaches this one.
        await locker.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'zz:locked', $1)`, [Date.now() + 60_000]);
        const ids = ['aa:one', 'bb:two', 'zz:locked'];
        const results = await within(Promise.all(ids.map((id) => settle(store.consume(id, Date.now() + 60_000)))), 'the batch');
        // The stalled batch is split: the two others are taken alone, only the held id fails closed.
        expect(results.slice(0, 2)).toEqual([true, true]);
        expect(unavailable(results[2])).toBe(true);
        // The holder goes away; a statement the store abandoned would now get the lock and commit.
        await locker.query('ROLLBACK');
        expect(await within(store.consume('zz:locked', Date.now() + 60_000), 'a retry of zz:locked')).toBe(true);
        for (const id of ids) expect(await store.consume(id, Date.now() + 60_000)).toBe(false);
      });
    }

    // Issue 41, item 3: a record batch skips a row another transaction holds locked (never waiting on it under the
    // namespace's budget lock) and settles that record alone afterwards, within the batch's time.
    describe('records', () => {
      /** `count` ids on both sides of `m:held`, claimed by `store` (unowned) and recorded as `out:<id>` by the test. */
      const claimAll = async (store: SqlReplayStore, ids: readonly string[], exp: number) => {
        const claims = await within(Promise.all(ids.map((id) => store.claim(id, exp, 'fp'))), 'the claims');
        expect(claims.every((claim) => claim.status === 'first')).toBe(true);
      };
      const record = (store: SqlReplayStore, id: string) => settle(store.record(id, 'fp', `out:${id}`));
      const ids = [...Array.from({ length: 100 }, (_, i) => `a:${i}`), 'm:held', ...Array.from({ length: 100 }, (_, i) => `z:${i}`)];

      it("a record batch with one row another transaction holds locked fails only that record: the 200 other users' outcomes are kept; the held one is kept by its retry", async () => {
        const table = newTable('lkrec');
        const store = track(
          createPostgresStore({ connectionString: url, table, statementTimeoutMs: 2000, lockTimeoutMs: 300, purgeIntervalMs: 0 }),
        );
        const exp = Date.now() + 60_000;
        await claimAll(store, ids, exp);
        const locker = await holder();
        await locker.query('BEGIN');
        await locker.query(`SELECT 1 FROM "${table}" WHERE id = 'm:held' FOR UPDATE`);
        // One tick: one batch of records.
        const results = await within(Promise.all(ids.map((id) => record(store, id))), 'the records');
        expect(unavailable(results[100])).toBe(true);
        expect(results.filter((r, i) => i !== 100 && r === true)).toHaveLength(200);
        await locker.query('ROLLBACK');
        // The held record wrote nothing: its retry keeps it. Every outcome answers the next claim.
        expect(await store.record('m:held', 'fp', 'out:m:held')).toBe(true);
        const again = await Promise.all(['a:0', 'm:held', 'z:99'].map((id) => store.claim(id, exp, 'fp')));
        expect(again).toEqual(['a:0', 'm:held', 'z:99'].map((id) => ({ status: 'recorded', outcome: `out:${id}` })));
      });

      it("while a record waits for a held row it holds no budget lock: another instance's records of the namespace are kept meanwhile, and the held one is kept once the holder ends", async () => {
        const table = newTable('lkrecw');
        // Long bounds: the held record waits for as long as the holder stays.
        const bounds = { table, statementTimeoutMs: 60_000, lockTimeoutMs: 60_000, purgeIntervalMs: 0 };
        const store = track(createPostgresStore({ connectionString: url, ...bounds }));
        const peer = track(createPostgresStore({ connectionString: url, ...bounds }));
        const exp = Date.now() + 60_000;
        const peerIds = Array.from({ length: 10 }, (_, i) => `p:${i}`);
        await claimAll(store, [...ids, ...peerIds], exp);
        const locker = await holder();
        await locker.query('BEGIN');
        await locker.query(`SELECT 1 FROM "${table}" WHERE id = 'm:held' FOR UPDATE`);
        let settled = false;
        const results = ids.map((id) => record(store, id));
        const held = (results[100] as Promise<unknown>).finally(() => {
          settled = true;
        });
        const others = await within(Promise.all(results.filter((_, i) => i !== 100)), 'the 200 other records');
        expect(others.filter((r) => r === true)).toHaveLength(200);
        await waitFor(waitingOnLock(table), 'the held record to wait on its row');
        expect(await within(Promise.all(peerIds.map((id) => record(peer, id))), "another instance's records")).toEqual(
          peerIds.map(() => true),
        );
        expect(settled).toBe(false);
        await locker.query('ROLLBACK');
        expect(await within(held, 'the held record')).toBe(true);
        const again = await Promise.all(['m:held', 'p:0'].map((id) => store.claim(id, exp, 'fp')));
        expect(again).toEqual(['m:held', 'p:0'].map((id) => ({ status: 'recorded', outcome: `out:${id}` })));
      });
    });

    for (const shape of ['a lone consume', 'a batch'] as const) {
      it(`${shape} whose statement committed but whose reply never comes is resolved by owner after the deadline (not failed, not burned)`, async () => {
        const table = newTable('lkreply');
        const inner = new pg.Pool({ connectionString: url, max: 4, statement_timeout: 500, lock_timeout: 500 });
        inner.on('error', () => {});
        cleanups.push(() => inner.end().catch(() => {}));
        let swallow = false;
        // Runs the consume statement for real, then never answers (a reply lost on a stalled connection).
        const pool: PgPoolLike = {
          query: (config) => inner.query(config),
          async connect() {
            const client = await inner.connect();
            return {
              async query(config: PgQueryConfigLike) {
                const result = await client.query(config);
                if (swallow && config.text.includes(') AS u(id, expires_at, owner')) {
                  swallow = false;
                  return new Promise<never>(() => {});
                }
                return result;
              },
              release: (error?: Error | boolean) => client.release(error),
            };
          },
          end: () => inner.end(),
        };
        const store = track(createPostgresStore({ pool, table, statementTimeoutMs: 500, connectTimeoutMs: 500, purgeIntervalMs: 0 }));
        expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
        const ids = shape === 'a lone consume' ? ['mine'] : ['m1', 'm2', 'm3'];
        swallow = true;
        const results = await within(Promise.all(ids.map((id) => settle(store.consume(id, Date.now() + 60_000)))), 'the consume');
        expect(results).toEqual(ids.map(() => true));
        expect(swallow).toBe(false); // the reply was indeed swallowed
        for (const id of ids) expect(await store.consume(id, Date.now() + 60_000)).toBe(false);
      });
    }

    it('injected pool without server-side timeouts: a consume whose reply is lost mid-transaction never commits; it fails closed and a retry is true exactly once', async () => {
      const table = newTable('lktx');
      const inner = barePool();
      let cut = false;
      const pool: PgPoolLike = {
        query: (config) => inner.query(config),
        async connect() {
          const client = await inner.connect();
          return {
            async query(config: PgQueryConfigLike) {
              const result = await client.query(config);
              if (cut && config.text.includes(') AS u(id, expires_at, owner')) {
                cut = false;
                throw new Error('Connection terminated unexpectedly');
              }
              return result;
            },
            release: (error?: Error | boolean) => client.release(error),
          };
        },
        end: () => inner.end(),
      };
      const store = track(createPostgresStore({ pool, table, statementTimeoutMs: 1000, connectTimeoutMs: 1000, purgeIntervalMs: 0 }));
      expect(await store.consume('warm', Date.now() + 60_000)).toBe(true);
      for (const ids of [['lone'], ['b1', 'b2']]) {
        cut = true;
        const results = await within(Promise.all(ids.map((id) => settle(store.consume(id, Date.now() + 60_000)))), 'the consume');
        for (const result of results) expect(unavailable(result)).toBe(true);
        expect(cut).toBe(false);
        for (const id of ids) {
          expect(await within(store.consume(id, Date.now() + 60_000), `a retry of ${id}`)).toBe(true);
          expect(await store.consume(id, Date.now() + 60_000)).toBe(false);
        }
      }
    });
  });

  describe('outcome budget shards (issue 43)', () => {
    const BUDGET_LOCK_CLASS = 0x6d727462;
    const status = (result: { status: string }): string => result.status;
    /** An id of budget shard `k` (of `shards`) with `prefix`. */
    const idOfShard = (prefix: string, k: number, shards: number): string => {
      for (let i = 0; ; i++) if (budgetShardOf(`${prefix}${i}`, shards) === k) return `${prefix}${i}`;
    };

    it('a record batch waits only for its own shard: while another session holds shard 0, a record of shard 1 is kept, and the held shard goes on when freed', async () => {
      const table = newTable('shard');
      const size = 1000;
      const budget = 8 * size;
      // Eight shards: the budget holds eight largest outcomes. A long lock_timeout: a wait for shard 0 would hang, not fail.
      const store = track(
        createPostgresStore({
          connectionString: url,
          table,
          maxOutcomeBytes: size,
          outcomeBudgetBytes: budget,
          lockTimeoutMs: 60_000,
          statementTimeoutMs: 60_000,
          purgeIntervalMs: 0,
        }),
      );
      await store.ensureSchema();
      const shards = budgetShards(budget, size);
      expect(shards).toBe(8);
      const held = idOfShard('held', 0, shards);
      const free = idOfShard('free', 1, shards);
      const exp = Date.now() + 60_000;
      for (const id of [held, free]) expect(status(await store.claim(id, exp, 'fp'))).toBe('first');
      const locker = await holder();
      await locker.query('SELECT pg_advisory_lock($1, $2)', [BUDGET_LOCK_CLASS, lockKey(`"${table}"\u0000\u0000${0}`)]);
      const waiting = store.record(held, 'fp', 'h');
      await waitFor(waitingOnLock(table), 'the record of shard 0 waiting for its lock');
      // Before shards every record batch of the namespace took one lock: this one waited behind shard 0's holder.
      expect(await within(store.record(free, 'fp', 'f'), 'a record of another shard')).toBe(true);
      await locker.query('SELECT pg_advisory_unlock($1, $2)', [BUDGET_LOCK_CLASS, lockKey(`"${table}"\u0000\u0000${0}`)]);
      expect(await within(waiting, 'the record of the freed shard')).toBe(true);
    });

    it('the total never passes outcomeBudgetBytes; a record is refused when its shard is full, even while another shard has room', async () => {
      const table = newTable('shardsum');
      const size = 1000;
      const budget = 4 * size + 500;
      const store = track(
        createPostgresStore({ connectionString: url, table, maxOutcomeBytes: size, outcomeBudgetBytes: budget, purgeIntervalMs: 0 }),
      );
      await store.ensureSchema();
      const shards = budgetShards(budget, size);
      expect(shards).toBe(4);
      // Each shard holds 1125 bytes: one outcome of 1000, never two.
      const exp = Date.now() + 60_000;
      const ids = Array.from({ length: 40 }, (_, i) => `sum${i}`);
      for (const id of ids) expect(status(await store.claim(id, exp, 'fp'))).toBe('first');
      const results = await Promise.all(ids.map((id) => store.record(id, 'fp', 'z'.repeat(size))));
      const kept = ids.filter((_, i) => results[i] === true);
      expect(kept.length * size).toBeLessThanOrEqual(budget);
      const byShard = new Map<number, number>();
      for (const id of kept) byShard.set(budgetShardOf(id, shards), (byShard.get(budgetShardOf(id, shards)) ?? 0) + 1);
      // Every shard that got a record kept exactly one (the first in; the rest found it full).
      expect([...byShard.values()].every((n) => n === 1)).toBe(true);
      expect(byShard.size).toBe(new Set(ids.map((id) => budgetShardOf(id, shards))).size);
      const held = Number((await admin.query(`SELECT coalesce(sum(bytes), 0)::int AS n FROM "${table}_budget"`)).rows[0].n);
      expect(held).toBe(kept.length * size);
      expect(held).toBeLessThanOrEqual(budget);
      // A shard with room keeps a smaller outcome while the full ones refuse: 125 bytes fit beside 1000 in 1125.
      const small = idOfShard('small', budgetShardOf(kept[0] as string, shards), shards);
      expect(status(await store.claim(small, exp, 'fp'))).toBe('first');
      expect(await store.record(small, 'fp', 's'.repeat(125))).toBe(true);
      const over = idOfShard('over', budgetShardOf(kept[0] as string, shards), shards);
      expect(status(await store.claim(over, exp, 'fp'))).toBe('first');
      expect(await store.record(over, 'fp', 'o')).toBe(false);
    });

    it('bytes a store kept before shards (under the namespace itself) count against every shard', async () => {
      const table = newTable('shardold');
      const size = 1000;
      const budget = 4 * size;
      const store = track(
        createPostgresStore({ connectionString: url, table, maxOutcomeBytes: size, outcomeBudgetBytes: budget, purgeIntervalMs: 0 }),
      );
      await store.ensureSchema();
      const bucket = Math.floor((Date.now() + 120_000) / 60_000);
      await admin.query(`INSERT INTO "${table}_budget" (ns, bucket, bytes) VALUES ('', $1, 1)`, [bucket]);
      const exp = Date.now() + 60_000;
      expect(status(await store.claim('legacy', exp, 'fp'))).toBe('first');
      // The shard's part is 1000 bytes; one of them is taken by the old row.
      expect(await store.record('legacy', 'fp', 'z'.repeat(size))).toBe(false);
    });
  });
});

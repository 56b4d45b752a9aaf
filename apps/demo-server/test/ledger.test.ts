import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  type ConnectLedger,
  ConnectLedgerError,
  createMemoryLedger,
  createPostgresLedger,
  createRedisLedger,
  createSqliteLedger,
  DEFAULT_LEDGER_LIMITS,
  LEDGER_ERROR_MESSAGE,
  type LedgerOptions,
  type PgLike,
  type RedisLike,
  type SqliteLike,
  SWEEP_INTERVAL_MS,
  withGenericErrors,
} from '../src/ledger.js';
import { serviceUrl } from './helpers.js';

/**
 * The connect ledger is written at a caller's request (every first round of connect_account), so it must be
 * bounded per principal on every backend: one principal flooding it cannot block another (finding 1).
 */

const MIN = 60_000;
const FLOW_MS = 30 * MIN;
const nonce = () => randomBytes(16).toString('base64url');
const unique = (name: string) => `${name}-${randomBytes(6).toString('hex')}`;

/** A clock tests move by hand (starts at the real time so Redis PEXPIREAT values lie in the future). */
function manualClock() {
  let t = Date.now();
  return { now: () => t, advance: (ms: number) => void (t += ms) };
}

interface Harness {
  make(options: LedgerOptions): Promise<ConnectLedger>;
  cleanup(): Promise<void>;
  /** Rows/keys the backend holds for one principal (to prove the storage itself is bounded). */
  stored?(principal: string): Promise<number>;
}

type HarnessFactory = () => Promise<Harness>;

const harnesses: { name: string; env?: string; factory: (url: string) => HarnessFactory }[] = [
  {
    name: 'memory',
    factory: () => async () => ({ make: async (o) => createMemoryLedger(o), cleanup: async () => {} }),
  },
  {
    name: 'sqlite',
    factory: () => async () => {
      const db = new Database(':memory:');
      const table = 'ledger_test';
      return {
        make: async (o) => createSqliteLedger(db as unknown as SqliteLike, { ...o, table: unique(table).replace(/-/g, '_') }),
        cleanup: async () => void db.close(),
      };
    },
  },
  {
    name: 'redis',
    env: 'REDIS_URL',
    factory: (url) => async () => {
      const client = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 1 });
      const prefixes: string[] = [];
      return {
        make: async (o) => {
          const prefix = `mrtr-demo-test:${randomBytes(6).toString('hex')}:`;
          prefixes.push(prefix);
          return createRedisLedger(client as unknown as RedisLike, prefix, o);
        },
        stored: async (principal) => {
          let count = 0;
          for (const prefix of prefixes) {
            const members = await client.zrange(`${prefix}p:${principal}`, '0', '-1');
            for (const m of members) count += await client.exists(`${prefix}l:${m}`);
          }
          return count;
        },
        cleanup: async () => {
          for (const prefix of prefixes) {
            const keys = await client.keys(`${prefix}*`);
            if (keys.length > 0) await client.del(...keys);
          }
          client.disconnect();
        },
      };
    },
  },
  {
    name: 'postgres',
    env: 'DATABASE_URL',
    factory: (url) => async () => {
      const pool = new pg.Pool({ connectionString: url, max: 8 });
      const tables: string[] = [];
      return {
        make: async (o) => {
          const table = `mrtr_demo_connect_t_${randomBytes(6).toString('hex')}`;
          tables.push(table);
          return createPostgresLedger(pool as unknown as PgLike, { ...o, table });
        },
        stored: async (principal) => {
          let count = 0;
          for (const table of tables) {
            const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${table} WHERE principal = $1`, [principal]);
            count += Number(rows[0]!.n);
          }
          return count;
        },
        cleanup: async () => {
          for (const table of tables) await pool.query(`DROP TABLE IF EXISTS ${table}`);
          await pool.end();
        },
      };
    },
  },
];

async function expectRefused(promise: Promise<unknown>): Promise<ConnectLedgerError> {
  const error = await promise.then(
    () => {
      throw new Error('expected the ledger to refuse');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectLedgerError);
  expect((error as Error).message).toBe(LEDGER_ERROR_MESSAGE);
  expect((error as Error).message).not.toMatch(/full|cap|pending|ledger/i);
  return error as ConnectLedgerError;
}

for (const { name, env, factory } of harnesses) {
  let open: HarnessFactory | undefined;
  if (env !== undefined) {
    const service = serviceUrl(env);
    if (service.error !== undefined) {
      it(`connect ledger on ${name}`, () => {
        throw new Error(service.error);
      });
      continue;
    }
    if (service.url !== undefined) open = factory(service.url);
  } else {
    open = factory('');
  }

  describe.skipIf(open === undefined)(`connect ledger on ${name}`, () => {
    let harness: Harness;
    const ready = (async () => {
      if (open !== undefined) harness = await open();
    })();
    afterAll(async () => {
      await ready;
      await harness?.cleanup();
    });

    const ledger = async (options: LedgerOptions = {}) => {
      await ready;
      return harness.make(options);
    };

    it('one principal flooding creates cannot block another principal (and stays within its cap)', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now });
      const mallory = unique('mallory');
      const alice = unique('alice');
      let created = 0;
      let refused = 0;
      // Bounded flood: 200 creates, each for a new provider (no reuse possible).
      for (let i = 0; i < 200; i++) {
        try {
          await l.create(nonce(), { principal: mallory, provider: `p${i}`, expiresAtMs: clock.now() + FLOW_MS });
          created++;
        } catch (error) {
          expect(error).toBeInstanceOf(ConnectLedgerError);
          refused++;
        }
      }
      expect(created).toBe(DEFAULT_LEDGER_LIMITS.maxPendingPerPrincipal);
      expect(refused).toBe(200 - DEFAULT_LEDGER_LIMITS.maxPendingPerPrincipal);
      if (harness.stored !== undefined)
        expect(await harness.stored(mallory)).toBeLessThanOrEqual(DEFAULT_LEDGER_LIMITS.maxPendingPerPrincipal);
      // Alice is unaffected.
      const n = nonce();
      expect(await l.create(n, { principal: alice, provider: 'github', expiresAtMs: clock.now() + FLOW_MS })).toBe(n);
      expect((await l.get(n))?.status).toBe('pending');
    });

    it('refuses a principal over the pending cap with the generic error', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now, limits: { maxPendingPerPrincipal: 2 } });
      const bob = unique('bob');
      await l.create(nonce(), { principal: bob, provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
      await l.create(nonce(), { principal: bob, provider: 'gitlab', expiresAtMs: clock.now() + FLOW_MS });
      const error = await expectRefused(l.create(nonce(), { principal: bob, provider: 'slack', expiresAtMs: clock.now() + FLOW_MS }));
      expect(error.reason).toContain('pending connect links');
    });

    it('reuses the live pending link of the same principal and provider', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now });
      const carol = unique('carol');
      const dave = unique('dave');
      const first = nonce();
      expect(await l.create(first, { principal: carol, provider: 'github', expiresAtMs: clock.now() + FLOW_MS })).toBe(first);
      clock.advance(1_000);
      expect(await l.create(nonce(), { principal: carol, provider: 'github', expiresAtMs: clock.now() + FLOW_MS })).toBe(first);
      // Another provider, or another principal, gets its own link.
      const other = nonce();
      expect(await l.create(other, { principal: carol, provider: 'slack', expiresAtMs: clock.now() + FLOW_MS })).toBe(other);
      const daves = nonce();
      expect(await l.create(daves, { principal: dave, provider: 'github', expiresAtMs: clock.now() + FLOW_MS })).toBe(daves);
      // Once settled, a link is not reused: the next flow gets a fresh one.
      expect(await l.settle(first, 'done')).toBe(true);
      const fresh = nonce();
      expect(await l.create(fresh, { principal: carol, provider: 'github', expiresAtMs: clock.now() + FLOW_MS })).toBe(fresh);
      // Repeating the same request many times never grows the principal's links.
      for (let i = 0; i < 50; i++) {
        expect(await l.create(nonce(), { principal: carol, provider: 'github', expiresAtMs: clock.now() + FLOW_MS })).toBe(fresh);
      }
      if (harness.stored !== undefined) expect(await harness.stored(carol)).toBe(3);
    });

    it('an unconfirmed link lives pendingTtlMs; a settled one lives as long as the flow', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now, limits: { pendingTtlMs: 10 * MIN } });
      const erin = unique('erin');
      const idle = nonce();
      const answered = nonce();
      await l.create(idle, { principal: erin, provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
      await l.create(answered, { principal: erin, provider: 'gitlab', expiresAtMs: clock.now() + FLOW_MS });
      expect((await l.get(idle))!.expiresAtMs).toBe(clock.now() + 10 * MIN);
      clock.advance(5 * MIN);
      expect(await l.settle(answered, 'done')).toBe(true);
      clock.advance(5 * MIN);
      expect(await l.get(idle)).toBeUndefined();
      expect(await l.settle(idle, 'done')).toBe(false);
      expect((await l.get(answered))?.status).toBe('done');
      clock.advance(FLOW_MS - 10 * MIN - 1);
      expect((await l.get(answered))?.status).toBe('done');
      clock.advance(1);
      expect(await l.get(answered)).toBeUndefined();
    });

    it('a reused link is renewed for the newest flow: settled late, it still outlives that flow', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now, limits: { pendingTtlMs: 10 * MIN } });
      const jill = unique('jill');
      const n = await l.create(nonce(), { principal: jill, provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
      const newestFlowEnds = () => clock.now() + FLOW_MS;
      for (let i = 0; i < 3; i++) {
        clock.advance(9 * MIN);
        const flowEnd = newestFlowEnds();
        expect(await l.create(nonce(), { principal: jill, provider: 'github', expiresAtMs: flowEnd })).toBe(n);
        if (i === 2) {
          // 27 min after the first flow began: settled 9 min later, past the first flow's 30 min.
          clock.advance(9 * MIN);
          expect(await l.settle(n, 'done')).toBe(true);
          expect((await l.get(n))?.status).toBe('done');
          expect((await l.get(n))?.expiresAtMs).toBe(flowEnd);
        }
      }
    });

    it('expired pending links stop counting against the cap', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now, limits: { maxPendingPerPrincipal: 1, pendingTtlMs: MIN } });
      const frank = unique('frank');
      await l.create(nonce(), { principal: frank, provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
      await expectRefused(l.create(nonce(), { principal: frank, provider: 'gitlab', expiresAtMs: clock.now() + FLOW_MS }));
      clock.advance(MIN);
      const n = nonce();
      expect(await l.create(n, { principal: frank, provider: 'gitlab', expiresAtMs: clock.now() + FLOW_MS })).toBe(n);
    });

    it('settled links give way to new ones: a principal never holds more than maxLinksPerPrincipal', async () => {
      const clock = manualClock();
      const limits = { maxPendingPerPrincipal: 2, maxLinksPerPrincipal: 4 };
      const l = await ledger({ now: clock.now, limits });
      const gina = unique('gina');
      const nonces: string[] = [];
      // create + decline, over and over (what a client can do with connect_account rounds 1 and 2).
      for (let i = 0; i < 30; i++) {
        const n = await l.create(nonce(), { principal: gina, provider: `p${i}`, expiresAtMs: clock.now() + FLOW_MS });
        expect(await l.settle(n, 'denied')).toBe(true);
        nonces.push(n);
        clock.advance(1);
      }
      let live = 0;
      for (const n of nonces) if ((await l.get(n)) !== undefined) live++;
      expect(live).toBe(4);
      // The newest ones are kept.
      for (const n of nonces.slice(-4)) expect((await l.get(n))?.status).toBe('denied');
      if (harness.stored !== undefined) expect(await harness.stored(gina)).toBeLessThanOrEqual(4);
      // Pending links still get their own quota.
      await l.create(nonce(), { principal: gina, provider: 'a', expiresAtMs: clock.now() + FLOW_MS });
      await l.create(nonce(), { principal: gina, provider: 'b', expiresAtMs: clock.now() + FLOW_MS });
      await expectRefused(l.create(nonce(), { principal: gina, provider: 'c', expiresAtMs: clock.now() + FLOW_MS }));
    });

    it('concurrent creates for one principal cannot overshoot the pending cap', async () => {
      const clock = manualClock();
      const l = await ledger({ now: clock.now });
      const hank = unique('hank');
      const results = await Promise.allSettled(
        Array.from({ length: 40 }, (_, i) =>
          l.create(nonce(), { principal: hank, provider: `p${i % 20}`, expiresAtMs: clock.now() + FLOW_MS }),
        ),
      );
      const nonces = new Set(results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : [])));
      expect(nonces.size).toBe(DEFAULT_LEDGER_LIMITS.maxPendingPerPrincipal);
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(ConnectLedgerError);
      if (harness.stored !== undefined) expect(await harness.stored(hank)).toBe(DEFAULT_LEDGER_LIMITS.maxPendingPerPrincipal);
    });
  });
}

describe('generic errors', () => {
  it('a backend failure reaches the caller as the generic message; the real reason is reported', async () => {
    const failing: RedisLike = {
      hgetall: async () => {
        throw new Error('connect ECONNREFUSED 10.0.0.7:6379');
      },
      eval: async () => {
        throw new Error('OOM command not allowed when used memory > maxmemory');
      },
    };
    const reports: string[] = [];
    const l = withGenericErrors(createRedisLedger(failing), (line) => reports.push(line));
    const e1 = await expectRefused(l.create(nonce(), { principal: 'a', provider: 'github', expiresAtMs: Date.now() + FLOW_MS }));
    expect(e1.message).not.toContain('OOM');
    await expectRefused(l.get(nonce()));
    await expectRefused(l.settle(nonce(), 'done'));
    expect(reports).toHaveLength(3);
    expect(reports[0]).toContain('OOM command not allowed');
    expect(reports[1]).toContain('ECONNREFUSED');
  });

  it('a cap refusal is reported with its reason and answered generically', async () => {
    const reports: string[] = [];
    const l = withGenericErrors(createMemoryLedger({ limits: { maxPendingPerPrincipal: 1 } }), (line) => reports.push(line));
    await l.create(nonce(), { principal: 'ivy', provider: 'github', expiresAtMs: Date.now() + FLOW_MS });
    await expectRefused(l.create(nonce(), { principal: 'ivy', provider: 'slack', expiresAtMs: Date.now() + FLOW_MS }));
    expect(reports).toEqual([expect.stringContaining('principal "ivy" already has 1 pending connect links')]);
  });
});

describe('SQL housekeeping', () => {
  it('SQLite: indexes on expires_at and (principal, expires_at); the global sweep is rate-limited and bounded', async () => {
    const db = new Database(':memory:');
    try {
      const statements: string[] = [];
      const spy: SqliteLike = {
        exec: (s) => db.exec(s),
        prepare: (s) => {
          const stmt = db.prepare(s);
          return {
            run: (...p: unknown[]) => {
              statements.push(s);
              return stmt.run(...(p as never[]));
            },
            get: (...p: unknown[]) => stmt.get(...(p as never[])),
            all: (...p: unknown[]) => stmt.all(...(p as never[])),
          };
        },
        transaction: (fn) => db.transaction(fn as never) as never,
      };
      const clock = manualClock();
      const l = createSqliteLedger(spy, { now: clock.now, table: 'sweep_test' });
      const indexes = db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sweep_test'`).all() as {
        sql: string;
      }[];
      expect(indexes.map((i) => i.sql).join('\n')).toMatch(/\(expires_at\)/);
      expect(indexes.map((i) => i.sql).join('\n')).toMatch(/\(principal, expires_at\)/);
      for (let i = 0; i < 50; i++) {
        await l.create(nonce(), { principal: `u${i}`, provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
        clock.advance(100);
      }
      const sweeps = () => statements.filter((s) => /DELETE FROM sweep_test WHERE nonce IN/.test(s));
      expect(sweeps()).toHaveLength(1);
      expect(sweeps()[0]).toMatch(/LIMIT \d+/);
      clock.advance(SWEEP_INTERVAL_MS);
      await l.create(nonce(), { principal: 'later', provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
      expect(sweeps()).toHaveLength(2);
    } finally {
      db.close();
    }
  });

  const pgService = serviceUrl('DATABASE_URL');
  it.skipIf(pgService.url === undefined && pgService.error === undefined)(
    'PostgreSQL: indexes exist and the global sweep does not run on every create',
    async () => {
      if (pgService.error !== undefined) throw new Error(pgService.error);
      const pool = new pg.Pool({ connectionString: pgService.url, max: 4 });
      const table = `mrtr_demo_connect_t_${randomBytes(6).toString('hex')}`;
      try {
        const queries: string[] = [];
        const spy: PgLike = {
          query: (text, values) => {
            queries.push(text);
            return pool.query(text, values as unknown[]) as never;
          },
          connect: () => pool.connect() as never,
        };
        const clock = manualClock();
        const l = await createPostgresLedger(spy, { now: clock.now, table });
        const { rows } = await pool.query('SELECT indexdef FROM pg_indexes WHERE tablename = $1', [table]);
        const defs = rows.map((r) => String(r.indexdef)).join('\n');
        expect(defs).toMatch(/\(expires_at\)/);
        expect(defs).toMatch(/\(principal, expires_at\)/);
        for (let i = 0; i < 20; i++) {
          await l.create(nonce(), { principal: `u${i}`, provider: 'github', expiresAtMs: clock.now() + FLOW_MS });
          clock.advance(100);
        }
        const sweeps = queries.filter((q) => /DELETE FROM \S+ WHERE nonce IN/.test(q));
        expect(sweeps).toHaveLength(1);
        expect(sweeps[0]).toMatch(/LIMIT \d+/);
      } finally {
        await pool.query(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
        await pool.end();
      }
    },
  );
});

// The store's clock, leases and the ledger epoch (capabilities clock, leases, epoch) on both dialects: a consume or
// claim whose expiry the store's clock has passed is refused and writes nothing (PostgreSQL: by the server's clock,
// whatever the process's `now` option says; SQLite: by that option), the purge by the store's clock, leases (pending
// with the time left, unknown once lapsed, reclaim with the next fence, renew, release, record only by the owner and
// idempotent by owner), lost replies of the lease operations (PostgreSQL), and the epoch (a truncated table or a
// deleted epoch row starts a new one: an older mintedAtMs is refused, a newer one accepted).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { MrtrError } from '@mrtr/core';
import { type ClaimResult, storeCapabilities } from '@mrtr/core/store';
import { lossyStoreThroughProxy } from '@mrtr/test-suite';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkPostgresSchema, checkSqliteSchema, createPostgresStore, createSqliteStore, type SqlReplayStore } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  type FakeServerClock,
  fakeServerClock,
  onServerClock,
  postgresSkipReason,
  skipPostgres,
  sleep,
  tempDir,
  uniqueTable,
} from './helpers.js';

postgresSkipReason('clock-leases-epoch.test.ts');

const show = (r: ClaimResult): string => {
  if (r.status === 'recorded') return `recorded:${r.outcome}`;
  if (r.status === 'first') return `first:${String(r.fence)}`;
  if (r.status === 'pending') return r.leaseLeftMs === undefined ? 'pending' : `pending:${r.leaseLeftMs}`;
  return r.status;
};
const codeOf = (promise: Promise<unknown>): Promise<string | undefined> =>
  promise.then(
    () => undefined,
    (error: unknown) => (MrtrError.is(error) ? error.code : String(error)),
  );
const A = 'ownerA-aaaaaaaaaaaaaaaa';
const B = 'ownerB-bbbbbbbbbbbbbbbb';
const C = 'ownerC-cccccccccccccccc';

/** What the shared tests need of a dialect: stores on a clock the test moves, and a way to empty the ledger. */
interface Backend {
  /** A store on `table` judged by the test's clock (`now`); closed by the backend afterwards. */
  store(table: string, now: () => number, options?: { namespace?: string; outcomeBudgetBytes?: number }): SqlReplayStore;
  table(tag: string): string;
  row(table: string, id: string): Promise<Record<string, unknown> | undefined>;
  /** Empties the ledger: `tables` truncates the replay and epoch tables, `epoch` deletes the epoch rows only. */
  wipe(table: string, what: 'tables' | 'epoch'): Promise<void>;
}

function sharedTests(backend: Backend): void {
  let t = 1_800_000_000_000;
  const now = () => t;

  it('declares clock, leases and epoch, and time() is the store clock', async () => {
    const store = backend.store(backend.table('caps'), now);
    const caps = storeCapabilities(store);
    expect([caps.clock, caps.leases, caps.epoch]).toEqual([true, true, true]);
    expect(await store.time()).toBe(t);
    t += 1234;
    expect(await store.time()).toBe(t);
  });

  it("a consume or claim whose expiry is at or before the store's clock is refused with ERR_STATE_EXPIRED and writes nothing", async () => {
    const table = backend.table('refuse');
    const store = backend.store(table, now);
    expect(await codeOf(store.consume('c', t))).toBe('ERR_STATE_EXPIRED');
    expect(await codeOf(store.consume('c', t - 1))).toBe('ERR_STATE_EXPIRED');
    expect(await codeOf(store.claim('k', t, 'fp', { owner: A, leaseMs: 1000 }))).toBe('ERR_STATE_EXPIRED');
    // Batched with admitted calls: each is answered for itself.
    const mixed = await Promise.all([
      codeOf(store.consume('b1', t)),
      store.consume('b2', t + 1),
      codeOf(store.claim('b3', t - 5, 'fp')),
      store.claim('b4', t + 1, 'fp'),
    ]);
    expect(mixed.map((m) => (typeof m === 'object' && m !== null ? show(m as ClaimResult) : m))).toEqual([
      'ERR_STATE_EXPIRED',
      true,
      'ERR_STATE_EXPIRED',
      'first:0',
    ]);
    for (const id of ['c', 'k', 'b1', 'b3']) expect(await backend.row(table, id)).toBeUndefined();
    // A live row is not shown to a refused call either, and stays as it was.
    expect(await store.consume('live', t + 60_000)).toBe(true);
    expect(await codeOf(store.consume('live', t))).toBe('ERR_STATE_EXPIRED');
    expect(Number((await backend.row(table, 'live'))?.expires_at)).toBe(t + 60_000);
  });

  it('leases: pending with the time left, renew, unknown once lapsed, reclaim with the next fence, record only by the owner', async () => {
    const store = backend.store(backend.table('lease'), now);
    const exp = t + 600_000;
    expect(show(await store.claim('x', exp, 'fp', { owner: A, leaseMs: 1000 }))).toBe('first:0');
    expect(show(await store.claim('x', exp, 'fp', { owner: B, leaseMs: 1000 }))).toBe('pending:1000');
    t += 400;
    expect(show(await store.claim('x', exp, 'fp', { owner: B, leaseMs: 1000 }))).toBe('pending:600');
    expect(await store.renew('x', A, 1000)).toBe(true);
    expect(await store.renew('x', B, 1000)).toBe(false);
    expect(show(await store.claim('x', exp, 'fp'))).toBe('pending:1000');
    t += 1000;
    expect(show(await store.claim('x', exp, 'fp'))).toBe('pending:0'); // up to and including its end
    t += 1;
    expect(show(await store.claim('x', exp, 'fp', { owner: B, leaseMs: 1000 }))).toBe('unknown');
    expect(show(await store.claim('x', exp, 'other'))).toBe('replayed');
    expect(show(await store.claim('x', exp, 'fp', { owner: B, leaseMs: 1000, reclaim: true }))).toBe('first:1');
    expect(show(await store.claim('x', exp, 'fp', { owner: C, leaseMs: 1000, reclaim: true }))).toBe('pending:1000');
    // The first owner lost the id: renew, release and record by it change nothing.
    expect(await store.renew('x', A, 1000)).toBe(false);
    expect(await store.release('x', A)).toBe(false);
    expect(await store.record('x', 'fp', 'by A', { owner: A })).toBe(false);
    t += 1001;
    expect(show(await store.claim('x', exp, 'fp', { owner: C, leaseMs: 1000, reclaim: true }))).toBe('first:2');
    // A lapsed lease that nobody reclaimed still records (its owner was only slow); twice by the owner answers as once.
    t += 5000;
    expect(await store.record('x', 'fp', 'by C', { owner: C })).toBe(true);
    expect(await store.record('x', 'fp', 'by C', { owner: C })).toBe(true);
    expect(await store.record('x', 'fp', 'by C', { owner: B })).toBe(false);
    expect(await store.record('x', 'fp', 'by C')).toBe(false);
    expect(show(await store.claim('x', exp, 'fp', { owner: B, leaseMs: 1000, reclaim: true }))).toBe('recorded:by C');
    expect(await store.renew('x', C, 1000)).toBe(false);
    expect(await store.release('x', C)).toBe(false);
  });

  it('no owner or no leaseMs: no lease, the claim never lapses', async () => {
    const store = backend.store(backend.table('nolease'), now);
    const exp = t + 600_000;
    expect(show(await store.claim('a', exp, 'fp', { owner: A }))).toBe('first:0');
    expect(show(await store.claim('b', exp, 'fp', { leaseMs: 1000 }))).toBe('first:0');
    t += 500_000;
    expect(show(await store.claim('a', exp, 'fp', { owner: B, leaseMs: 1000, reclaim: true }))).toBe('pending');
    expect(show(await store.claim('b', exp, 'fp', { owner: B, leaseMs: 1000, reclaim: true }))).toBe('pending');
    // renew gives the owner's claim a lease.
    expect(await store.renew('a', A, 1000)).toBe(true);
    expect(show(await store.claim('a', exp, 'fp'))).toBe('pending:1000');
  });

  it('release: compare-and-delete of an unrecorded claim, true when the owner holds none afterwards, twice as once', async () => {
    const store = backend.store(backend.table('release'), now);
    const exp = t + 600_000;
    expect(await store.release('never', A)).toBe(true);
    expect(show(await store.claim('r', exp, 'fp', { owner: A, leaseMs: 1000 }))).toBe('first:0');
    expect(await store.release('r', B)).toBe(false);
    expect(await store.release('r', A)).toBe(true);
    expect(await store.release('r', A)).toBe(true);
    expect(show(await store.claim('r', exp, 'fp', { owner: B, leaseMs: 1000 }))).toBe('first:0');
    expect(await store.release('r', A)).toBe(false);
    expect(await store.record('r', 'fp', 'done', { owner: B })).toBe(true);
    expect(await store.release('r', B)).toBe(false);
    expect(show(await store.claim('r', exp, 'fp'))).toBe('recorded:done');
    expect(await store.consume('c', exp)).toBe(true);
    expect(await store.release('c', A)).toBe(false);
  });

  it('record by owner twice answers as once, also for an outcome not kept', async () => {
    const store = backend.store(backend.table('rec2'), now, { outcomeBudgetBytes: 0 });
    const exp = t + 600_000;
    expect(show(await store.claim('n', exp, 'fp', { owner: A, leaseMs: 1000 }))).toBe('first:0');
    expect(await store.record('n', 'fp', 'over budget', { owner: A })).toBe(false);
    expect(await store.record('n', 'fp', 'over budget', { owner: A })).toBe(false);
    // In one batch as well.
    const kept = backend.store(backend.table('rec3'), now);
    expect(show(await kept.claim('m', exp, 'fp', { owner: A, leaseMs: 1000 }))).toBe('first:0');
    const both = await Promise.all([
      kept.record('m', 'fp', 'out', { owner: A }),
      kept.record('m', 'fp', 'out', { owner: A }),
      kept.record('m', 'fp', 'out', { owner: B }),
    ]);
    expect(both).toEqual([true, true, false]);
  });

  it('misuse of the lease options is a labelled TypeError/RangeError', async () => {
    const store = backend.store(backend.table('misuse'), now);
    const exp = t + 60_000;
    await expect(store.claim('i', exp, 'fp', { owner: 'short' })).rejects.toThrow(RangeError);
    await expect(store.claim('i', exp, 'fp', { owner: A, leaseMs: 0 })).rejects.toThrow(RangeError);
    await expect(store.claim('i', exp, 'fp', { owner: A, leaseMs: 1.5 })).rejects.toThrow(RangeError);
    await expect(store.claim('i', exp, 'fp', { owner: A, reclaim: 'yes' as unknown as boolean })).rejects.toThrow(TypeError);
    await expect(store.consume('i', exp, { mintedAtMs: 'x' as unknown as number })).rejects.toThrow(TypeError);
    await expect(store.renew('i', A, -1)).rejects.toThrow(/^renew: leaseMs/);
    await expect(store.release('', A)).rejects.toThrow(RangeError);
    await expect(store.record('i', 'fp', 'o', { owner: 7 as unknown as string })).rejects.toThrow(/^record: owner/);
  });

  for (const what of ['tables', 'epoch'] as const) {
    it(`epoch: after ${what === 'tables' ? 'the tables are truncated' : 'the epoch row is deleted'}, an older mintedAtMs is refused (ERR_LEDGER_LOST), a newer one accepted`, async () => {
      const table = backend.table(`ep${what.slice(0, 3)}`);
      const store = backend.store(table, now);
      const began = t;
      expect(await store.consume('first', t + 60_000)).toBe(true); // the ledger begins: its epoch is now
      t += 100;
      expect(await store.consume('a', t + 60_000, { mintedAtMs: began })).toBe(true);
      expect(await codeOf(store.consume('b', t + 60_000, { mintedAtMs: began - 1 }))).toBe('ERR_LEDGER_LOST');
      await backend.wipe(table, what);
      t += 100;
      expect(await codeOf(store.consume('c', t + 60_000, { mintedAtMs: began }))).toBe('ERR_LEDGER_LOST');
      expect(await codeOf(store.claim('d', t + 60_000, 'fp', { mintedAtMs: t - 1, owner: A, leaseMs: 10 }))).toBe('ERR_LEDGER_LOST');
      expect(await backend.row(table, 'c')).toBeUndefined();
      expect(await backend.row(table, 'd')).toBeUndefined();
      expect(await store.consume('e', t + 60_000, { mintedAtMs: t })).toBe(true);
      expect(show(await store.claim('f', t + 60_000, 'fp', { mintedAtMs: t + 5 }))).toBe('first:0');
      // Without mintedAtMs: no epoch check.
      expect(await store.consume('g', t + 60_000)).toBe(true);
      // Namespaces keep their own epochs.
      const other = backend.store(table, now, { namespace: 'other' });
      t += 1;
      expect(await codeOf(other.consume('h', t + 60_000, { mintedAtMs: t - 1 }))).toBe('ERR_LEDGER_LOST');
    });
  }
}

// ---------------------------------------------------------------------------------------------

describe('SQLite: clock, leases, epoch', () => {
  const dir = tempDir();
  const filename = join(dir, 'leases.db');
  const admin = new Database(filename);
  const stores: SqlReplayStore[] = [];
  afterAll(async () => {
    for (const store of stores) await store.close();
    admin.close();
    rmSync(dir, { recursive: true, force: true });
  });

  sharedTests({
    store(table, now, options = {}) {
      const store = createSqliteStore({ filename, table, now, purgeIntervalMs: 0, ...options });
      stores.push(store);
      return store;
    },
    table: (tag) => uniqueTable(tag),
    async row(table, id) {
      return admin.prepare(`SELECT * FROM "${table}" WHERE id = ?`).get(id) as Record<string, unknown> | undefined;
    },
    async wipe(table, what) {
      if (what === 'tables') admin.exec(`DELETE FROM "${table}"; DELETE FROM "${table}_epoch"`);
      else admin.exec(`DELETE FROM "${table}_epoch"`);
    },
  });

  it('the schema check names the lease columns and the epoch table when missing; ensureSchema adds them', async () => {
    const table = uniqueTable('chk');
    admin.exec(
      `CREATE TABLE "${table}" (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, owner TEXT, fp TEXT, outcome TEXT, PRIMARY KEY (ns, id))`,
    );
    const before = checkSqliteSchema(admin, { table });
    expect(before?.problems).toEqual([]);
    expect(before?.warnings.join('\n')).toMatch(/no lease_until, fence columns .*ADD COLUMN lease_until INTEGER, ADD COLUMN fence INTEGER/);
    expect(before?.warnings.join('\n')).toMatch(new RegExp(`no table ${table}_epoch .*CREATE TABLE IF NOT EXISTS "${table}_epoch"`));
    const store = createSqliteStore({ filename, table, purgeIntervalMs: 0 });
    stores.push(store);
    await store.ensureSchema();
    const after = checkSqliteSchema(admin, { table });
    expect(after?.problems).toEqual([]);
    expect(after?.warnings.filter((w) => !w.includes('expires_at'))).toEqual([]);
    expect(after?.summary).toMatch(/lease_until, fence\).*epoch table/);
  });

  it("the purge deletes by the store's clock", async () => {
    let t = 1_000_000;
    const table = uniqueTable('purge');
    const store = createSqliteStore({ filename, table, now: () => t, purgeIntervalMs: 0 });
    stores.push(store);
    expect(await store.consume('soon', t + 100)).toBe(true);
    expect(await store.consume('later', t + 10_000)).toBe(true);
    t += 100;
    expect(await store.purge()).toBe(0);
    t += 1;
    expect(await store.purge()).toBe(1);
    expect(await store.consume('later', t + 10_000)).toBe(false);
  });
});

describe.skipIf(skipPostgres)('PostgreSQL: clock, leases, epoch', () => {
  const url = DATABASE_URL as string;
  const tables: string[] = [];
  const stores: SqlReplayStore[] = [];
  let admin: pg.Pool;
  let server: FakeServerClock;
  const newTable = (tag: string) => {
    const table = uniqueTable(tag);
    tables.push(table);
    return table;
  };
  /** The server's time, read by another session. */
  const serverNow = async () =>
    Number((await admin.query('SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint AS t')).rows[0].t);

  beforeAll(async () => {
    await assertPostgresReachable(url);
    admin = new pg.Pool({ connectionString: url, max: 2 });
    admin.on('error', () => {});
    server = await fakeServerClock(url, 0);
  });
  afterAll(async () => {
    for (const store of stores) await store.close();
    await admin?.end();
    await dropTables(url, tables);
    await server?.close();
  });

  // The shared tests on a fake server clock that follows the test's clock; the process's clock the store is given
  // is a day off, to show it is never used.
  sharedTests({
    store(table, now, options = {}) {
      const store = createPostgresStore({
        connectionString: server.url,
        table,
        now: () => now() - 86_400_000,
        purgeIntervalMs: 0,
        ...options,
      });
      stores.push(store);
      return onServerClock(store, server, now);
    },
    table: newTable,
    async row(table, id) {
      return (await admin.query(`SELECT * FROM "${table}" WHERE id = $1`, [id])).rows[0];
    },
    async wipe(table, what) {
      if (what === 'tables') await admin.query(`TRUNCATE "${table}", "${table}_epoch"`);
      else await admin.query(`DELETE FROM "${table}_epoch"`);
    },
  });

  for (const [skew, label] of [
    [-3_600_000, 'an hour behind'],
    [3_600_000, 'an hour ahead'],
  ] as const) {
    it(`the real server's clock decides, not the process's now option (${label})`, async () => {
      const table = newTable('srv');
      const store = createPostgresStore({ connectionString: url, table, now: () => Date.now() + skew, purgeIntervalMs: 0 });
      stores.push(store);
      const before = await serverNow();
      const time = await store.time();
      expect(time).toBeGreaterThanOrEqual(before);
      expect(time).toBeLessThanOrEqual(await serverNow());
      // In the server's past (the option, an hour behind, would call it the future): refused, nothing written.
      expect(await codeOf(store.consume('past', before - 1000))).toBe('ERR_STATE_EXPIRED');
      expect(await codeOf(store.claim('past', before - 1000, 'fp', { owner: A, leaseMs: 1000 }))).toBe('ERR_STATE_EXPIRED');
      expect((await admin.query(`SELECT count(*)::int AS n FROM "${table}"`)).rows[0].n).toBe(0);
      // In the server's future (the option, an hour ahead, would call it the past): taken.
      expect(await store.consume('future', before + 600_000)).toBe(true);
      expect(await store.consume('future', before + 600_000)).toBe(false);
      // The purge by the server's time: rows the server calls expired go, live ones stay.
      await admin.query(`INSERT INTO "${table}" (ns, id, expires_at) VALUES ('', 'gone', $1), ('', 'kept', $2)`, [
        before - 1000,
        before + 600_000,
      ]);
      expect(await store.purge()).toBe(1);
      const ids = (await admin.query(`SELECT id FROM "${table}" ORDER BY id`)).rows.map((r) => r.id);
      expect(ids).toEqual(['future', 'kept']);
    });
  }

  it('the schema check names the lease columns and the epoch table when missing; ensureSchema adds them', async () => {
    const table = newTable('chk');
    await admin.query(
      `CREATE TABLE "${table}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, fp text, outcome text, PRIMARY KEY (ns, id))`,
    );
    await admin.query(`CREATE INDEX "${table}_expires_at_idx" ON "${table}" (expires_at)`);
    const before = await checkPostgresSchema(admin, { table });
    expect(before?.problems).toEqual([]);
    expect(before?.warnings.join('\n')).toMatch(/no lease_until, fence columns .*ADD COLUMN lease_until bigint, ADD COLUMN fence integer/);
    expect(before?.warnings.join('\n')).toMatch(new RegExp(`no table ${table}_epoch `));
    const store = createPostgresStore({ connectionString: url, table, purgeIntervalMs: 0 });
    stores.push(store);
    await store.ensureSchema();
    const after = await checkPostgresSchema(admin, { table });
    expect(after).toMatchObject({ problems: [], warnings: [] });
    expect(after?.summary).toMatch(/lease_until, fence\).*epoch table/);
    await admin.query(`ALTER TABLE "${table}_epoch" DROP CONSTRAINT "${table}_epoch_pkey"`);
    expect((await checkPostgresSchema(admin, { table }))?.problems).toEqual([
      `${table}_epoch: no PRIMARY KEY (ns): the ledger epoch is not one per namespace`,
    ]);
  });

  it('a lost reply of claim, renew, record and release is resolved by its owner (startReplyLosingProxy)', async () => {
    const table = newTable('lost');
    const lossy = await lossyStoreThroughProxy(url, 5432, (proxied) => {
      const store = createPostgresStore({
        connectionString: proxied,
        table,
        statementTimeoutMs: 1000,
        connectTimeoutMs: 1000,
        purgeIntervalMs: 0,
      });
      return { store, close: () => store.close() };
    });
    const peer = createPostgresStore({ connectionString: url, table, purgeIntervalMs: 0 });
    stores.push(peer);
    const store = lossy.store as SqlReplayStore;
    try {
      const exp = (await serverNow()) + 600_000;
      expect(await store.consume('warm', exp)).toBe(true);
      lossy.loseNextReply('late');
      expect(show(await store.claim('x', exp, 'fp', { owner: A, leaseMs: 60_000 }))).toBe('first:0');
      lossy.restore();
      expect(show(await peer.claim('x', exp, 'fp', { owner: B, leaseMs: 60_000 }))).toMatch(/^pending:/);
      lossy.loseNextReply('late');
      expect(await store.renew('x', A, 60_000)).toBe(true);
      lossy.restore();
      lossy.loseNextReply('late');
      expect(await store.record('x', 'fp', 'done', { owner: A })).toBe(true);
      lossy.restore();
      expect(show(await peer.claim('x', exp, 'fp'))).toBe('recorded:done');

      expect(show(await store.claim('y', exp, 'fp', { owner: A, leaseMs: 60_000 }))).toBe('first:0');
      lossy.loseNextReply('late');
      expect(await store.release('y', A)).toBe(true);
      lossy.restore();
      expect(show(await peer.claim('y', exp, 'fp', { owner: B, leaseMs: 60_000 }))).toBe('first:0');

      // Reply and lookup both lost: unavailable; the record landed, and a retry by the owner answers as the first did.
      expect(show(await store.claim('z', exp, 'fp', { owner: A, leaseMs: 60_000 }))).toBe('first:0');
      lossy.loseNextReply('lost');
      expect(await codeOf(store.record('z', 'fp', 'kept', { owner: A }))).toBe('ERR_STORE_UNAVAILABLE');
      lossy.restore();
      expect(show(await peer.claim('z', exp, 'fp'))).toBe('recorded:kept');
      let retried: boolean | string = 'none';
      for (let i = 0; i < 100 && retried === 'none'; i++) {
        retried = await store.record('z', 'fp', 'kept', { owner: A }).catch(() => 'none' as const);
        if (retried === 'none') await sleep(50);
      }
      expect(retried).toBe(true);
    } finally {
      lossy.restore();
      await lossy.close();
    }
  });
});

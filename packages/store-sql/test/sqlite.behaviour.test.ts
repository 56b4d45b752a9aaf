// SQLite specifics on real files: ownership, an unopenable file that later becomes openable, a
// locked database, two processes creating the schema at once, a database shared with other tables, quoting, purge, lazy driver loading.
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { MrtrError } from '@mrtr/core';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { configureSqliteDatabase, createSqliteStore } from '../src/index.js';
import { removeBundles, sleep, spawnWorker, tempDir, uniqueTable } from './helpers.js';

const dir = tempDir();
afterAll(() => {
  removeBundles();
  rmSync(dir, { recursive: true, force: true });
});
let fileSequence = 0;
const newFile = () => join(dir, `db-${fileSequence++}.sqlite`);

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

describe('SQLite store behaviour', () => {
  it('keeps an id live up to and including expiresAtMs, like the guard and the other stores', async () => {
    let t = 1_000;
    const store = createSqliteStore({ filename: newFile(), now: () => t, purgeIntervalMs: 0 });
    try {
      expect(await store.consume('edge', 2_000)).toBe(true);
      t = 2_000;
      expect(await store.consume('edge', 3_000)).toBe(false);
      t = 2_001;
      expect(await store.consume('edge', 3_000)).toBe(true);
      // An expiry the store's clock has reached is refused (clock: true) and writes nothing.
      const refused = await store.consume('past', 2_001).catch((error: unknown) => (error as { code?: unknown }).code);
      expect(refused).toBe('ERR_STATE_EXPIRED');
      expect(await store.consume('past', 2_002)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('an owned database is opened in WAL mode and closed by close(); an injected one is left open', async () => {
    const filename = newFile();
    const store = createSqliteStore({ filename });
    expect(await store.consume('a', Date.now() + 60_000)).toBe(true);
    const probe = new Database(filename, { readonly: true });
    expect(probe.pragma('journal_mode', { simple: true })).toBe('wal');
    probe.close();
    expect(existsSync(`${filename}-wal`)).toBe(true);
    await store.close();
    await store.close();
    // The last connection to close checkpoints and removes the WAL file.
    expect(existsSync(`${filename}-wal`)).toBe(false);
    await expectUnavailable(store.consume('b', Date.now() + 60_000));

    const database = new Database(filename);
    const injected = createSqliteStore({ database });
    expect(await injected.consume('a', Date.now() + 60_000)).toBe(false);
    await injected.close();
    expect(database.open).toBe(true);
    expect(database.prepare('SELECT count(*) AS n FROM mrtr_replay').get()).toEqual({ n: 1 });
    await expectUnavailable(injected.consume('c', Date.now() + 60_000));
    database.close();
  });

  it('a database closed under the store gives ERR_STORE_UNAVAILABLE, never true', async () => {
    const database = new Database(newFile());
    const store = createSqliteStore({ database });
    expect(await store.consume('x', Date.now() + 60_000)).toBe(true);
    database.close();
    for (let i = 0; i < 3; i++) await expectUnavailable(store.consume(`y${i}`, Date.now() + 60_000));
    await store.close();
  });

  it('an unopenable file gives ERR_STORE_UNAVAILABLE and the store recovers once it can open it', async () => {
    const nested = join(dir, `later-${Date.now()}`);
    const store = createSqliteStore({ filename: join(nested, 'replay.db') });
    try {
      const error = await expectUnavailable(store.consume('early', Date.now() + 60_000));
      expect(error.cause).toBeInstanceOf(Error);
      mkdirSync(nested);
      expect(await store.consume('early', Date.now() + 60_000)).toBe(true);
      expect(await store.consume('early', Date.now() + 60_000)).toBe(false);
    } finally {
      await store.close();
    }
  });

  it('a write lock held longer than busyTimeoutMs gives ERR_STORE_UNAVAILABLE; it works once released', async () => {
    const filename = newFile();
    const store = createSqliteStore({ filename, busyTimeoutMs: 200 });
    const other = new Database(filename);
    try {
      await store.ensureSchema();
      other.exec('BEGIN IMMEDIATE');
      const t0 = performance.now();
      const error = await expectUnavailable(store.consume('locked', Date.now() + 60_000));
      // It was the busy timeout that ended the wait (SQLITE_BUSY after busy_timeout), not anything else;
      // the wait can only be longer than busyTimeoutMs on a loaded machine, never shorter.
      expect((error.cause as { code?: string }).code).toBe('SQLITE_BUSY');
      expect(performance.now() - t0).toBeGreaterThanOrEqual(190);
      other.exec('COMMIT');
      expect(await store.consume('locked', Date.now() + 60_000)).toBe(true);
    } finally {
      other.close();
      await store.close();
    }
  });

  it('two processes creating the schema on a new file at once both succeed (5 rounds)', async () => {
    for (let round = 0; round < 5; round++) {
      const filename = newFile();
      const table = uniqueTable('mig');
      const workers = await Promise.all(
        [0, 1].map(() => spawnWorker({ kind: 'schema', dialect: 'sqlite', target: filename, table }, 30_000)),
      );
      await Promise.all(workers.map((w) => w.ready));
      for (const worker of workers) worker.go();
      const results = await Promise.all(workers.map((w) => w.result));
      expect(results.map((r) => r.errors)).toEqual([[], []]);
      const db = new Database(filename, { readonly: true });
      const index = db.prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?").all(table) as { sql: string }[];
      db.close();
      expect(index.some((row) => row.sql?.includes('(expires_at)'))).toBe(true);
    }
  });

  it('quotes reserved and mixed-case table names; rejects unsafe identifiers and bad options', async () => {
    const filename = newFile();
    for (const table of ['select', 'MixedCase_Table', `T${'x'.repeat(47)}`]) {
      const store = createSqliteStore({ filename, table });
      expect(store.table).toBe(`"${table}"`);
      expect(await store.consume('q', Date.now() + 60_000)).toBe(true);
      expect(await store.consume('q', Date.now() + 60_000)).toBe(false);
      await store.close();
    }
    for (const table of ['', 'a-b', 'x"; DROP TABLE y; --', '1abc', 'a b', 'a'.repeat(49)]) {
      expect(() => createSqliteStore({ filename, table })).toThrow(TypeError);
    }
    expect(() => createSqliteStore({} as never)).toThrow(TypeError);
    expect(() => createSqliteStore({ filename, synchronous: 'off' as never })).toThrow(TypeError);
    expect(() => createSqliteStore({ filename, busyTimeoutMs: -1 })).toThrow(RangeError);
    expect(() => createSqliteStore({ filename, now: 5 as never })).toThrow(TypeError);
  });

  it('purge deletes expired rows in bounded batches, keeps live and renewed ones, honours extraRetentionMs', async () => {
    const filename = newFile();
    let t = 1_000_000;
    const now = () => t;
    const store = createSqliteStore({ filename, now, purgeIntervalMs: 0, purgeBatchSize: 1000, purgeMaxBatches: 2 });
    const graced = createSqliteStore({ filename, now, purgeIntervalMs: 0, extraRetentionMs: 60_000 });
    const db = new Database(filename);
    try {
      await store.ensureSchema();
      const soon = t + 150;
      const insert = db.prepare("INSERT INTO mrtr_replay (ns, id, expires_at) VALUES ('p', ?, ?)");
      db.transaction(() => {
        for (let i = 0; i < 2500; i++) insert.run(`old${i}`, soon);
      })();
      for (let i = 0; i < 10; i++) expect(await store.consume(`live${i}`, t + 60_000)).toBe(true);
      expect(await store.consume('renew', soon)).toBe(true);
      t = soon; // live up to and including expiresAtMs: nothing to purge yet
      expect(await store.purge()).toBe(0);
      t = soon + 50;
      expect(await graced.purge()).toBe(0);
      expect(await store.consume('renew', t + 60_000)).toBe(true);
      expect(await store.purge()).toBe(2000);
      expect(await store.purge()).toBe(500);
      expect(await store.purge()).toBe(0);
      expect(db.prepare('SELECT count(*) AS n FROM mrtr_replay').get()).toEqual({ n: 11 });
      expect(await store.consume('renew', t + 60_000)).toBe(false);
      t = soon + 60_050; // past the grace period
      expect(await graced.purge()).toBe(0); // the renewed and live rows are still live
    } finally {
      db.close();
      await store.close();
      await graced.close();
    }
  });

  it('the background purge runs on its own', async () => {
    const filename = newFile();
    let t = 1_000_000;
    const store = createSqliteStore({ filename, now: () => t, purgeIntervalMs: 50 });
    const db = new Database(filename);
    try {
      const exp = t + 100;
      for (let i = 0; i < 20; i++) expect(await store.consume(`bg${i}`, exp)).toBe(true);
      const count = () => (db.prepare('SELECT count(*) AS n FROM mrtr_replay').get() as { n: number }).n;
      expect(count()).toBe(20);
      t = exp + 1; // expired by the store's clock; only the timer's own run may purge them now
      // Wait for the event (rows gone), bounded generously (300 polls, 30 s): this is a liveness bound, not a window.
      const deadline = Date.now() + 30_000;
      for (let i = 0; i < 300 && count() > 0 && Date.now() < deadline; i++) await sleep(100);
      expect(count()).toBe(0);
    } finally {
      db.close();
      await store.close();
    }
  });

  it('needs only its own driver: SQLite works where pg cannot be loaded; PostgreSQL without pg fails closed', async () => {
    const run = async (task: Parameters<typeof spawnWorker>[0], block: string) => {
      const worker = await spawnWorker(task, 30_000, { block });
      const exited = new Promise<number | null>((resolve) => worker.child.on('exit', (code) => resolve(code)));
      await worker.ready;
      worker.go();
      const result = await worker.result;
      // The store was never closed; the unref'd purge timer must not keep the process alive.
      const code = await Promise.race([exited, sleep(15_000).then(() => 'still running' as const)]);
      if (code === 'still running') worker.child.kill('SIGKILL');
      expect(code).toBe(0);
      return result;
    };
    const sqlite = await run({ kind: 'smoke', dialect: 'sqlite', target: newFile(), table: 'smoke', close: false }, 'pg');
    expect(sqlite).toMatchObject({ trues: 1, falses: 1, errors: [] });
    const pgless = await run(
      { kind: 'smoke', dialect: 'postgres', target: 'postgres://127.0.0.1:1/none', table: 'smoke', close: true },
      'pg',
    );
    expect(pgless.trues).toBe(0);
    expect(pgless.errors).toHaveLength(2);
    for (const message of pgless.errors) {
      expect(message).toMatch(
        /^ERR_STORE_UNAVAILABLE: .*optional peer dependency "pg" is not installed \| ERR_MODULE_NOT_FOUND: Cannot find package 'pg'/,
      );
    }
  });

  it('a driver that is installed but fails to load is reported as failing to load, with the real error as cause', async () => {
    const run = async (blockMode: 'broken' | 'missing-dep') => {
      const worker = await spawnWorker(
        { kind: 'smoke', dialect: 'postgres', target: 'postgres://127.0.0.1:1/none', table: 'smoke', close: true },
        30_000,
        { block: 'pg', blockMode },
      );
      await worker.ready;
      worker.go();
      return worker.result;
    };
    const broken = await run('broken');
    expect(broken.trues).toBe(0);
    expect(broken.errors).toHaveLength(2);
    for (const message of broken.errors) {
      expect(message).not.toMatch(/not installed/);
      expect(message).toMatch(
        /^ERR_STORE_UNAVAILABLE: @mrtr\/store-sql: the peer dependency "pg" failed to load: the module did not initialise .* \| Error: the module did not initialise/,
      );
    }
    // The driver is there but one of its own dependencies is missing: that is not "pg is not installed".
    const missingDep = await run('missing-dep');
    expect(missingDep.trues).toBe(0);
    for (const message of missingDep.errors) {
      expect(message).not.toMatch(/not installed/);
      expect(message).toMatch(
        /failed to load: Cannot find package 'pg-protocol'.* \| ERR_MODULE_NOT_FOUND: Cannot find package 'pg-protocol'/,
      );
    }
  });

  it('an existing table without the owner column is upgraded by ensureSchema; its old rows still count', async () => {
    const filename = newFile();
    const old = new Database(filename);
    old.exec('CREATE TABLE mrtr_replay (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (ns, id))');
    old.prepare("INSERT INTO mrtr_replay (ns, id, expires_at) VALUES ('', 'before-upgrade', ?)").run(5_000);
    let t = 1_000;
    const unmanaged = createSqliteStore({ filename, now: () => t, ensureSchema: false, purgeIntervalMs: 0 });
    const store = createSqliteStore({ filename, now: () => t, purgeIntervalMs: 0 });
    try {
      // Without ensureSchema (a migration tool manages the schema) the missing column fails closed.
      const error = await expectUnavailable(unmanaged.consume('new', 5_000));
      expect(String((error.cause as Error).message)).toMatch(/owner/);
      expect(await store.consume('before-upgrade', 5_000)).toBe(false);
      expect(await store.consume('new', 5_000)).toBe(true);
      const columns = old.prepare('PRAGMA table_info(mrtr_replay)').all() as { name: string }[];
      expect(columns.map((c) => c.name)).toContain('owner');
      const row = old.prepare("SELECT owner FROM mrtr_replay WHERE id = 'new'").get() as { owner: string };
      expect(row.owner).toMatch(/^[A-Za-z0-9_-]{22}$/);
      // Upgrading twice (another store, another process) is a no-op.
      const again = createSqliteStore({ filename, now: () => t, purgeIntervalMs: 0 });
      await again.ensureSchema();
      await again.close();
      expect(await unmanaged.consume('new', 5_000)).toBe(false);
      t = 5_001;
      expect(await store.consume('before-upgrade', 9_000)).toBe(true); // an expired old row is taken over
    } finally {
      old.close();
      await store.close();
      await unmanaged.close();
    }
  });

  it('a wrapped database that throws a non-SQLite error after writing: the store asks once and answers by owner', async () => {
    const database = new Database(newFile());
    let failAfterWrite = false;
    let failRead = false;
    const wrapper = {
      prepare(source: string) {
        const statement = database.prepare(source);
        return {
          run: (...params: unknown[]) => {
            const result = statement.run(...params);
            // The replay table's upserts (not the epoch's, written first in the same transaction).
            if (failAfterWrite && source.startsWith('INSERT') && !source.includes('_epoch"')) throw new Error('worker thread timed out');
            return result;
          },
          get: (...params: unknown[]) => {
            if (failRead && !source.includes('_epoch"')) throw new Error('worker thread timed out');
            return statement.get(...params);
          },
          all: (...params: unknown[]) => statement.all(...params),
        };
      },
      exec: (source: string) => database.exec(source),
      close: () => database.close(),
      get open() {
        return database.open;
      },
    };
    let t = 1_000;
    const store = createSqliteStore({ database: wrapper, now: () => t, purgeIntervalMs: 0 });
    try {
      expect(await store.consume('warm', 9_000)).toBe(true);
      failAfterWrite = true;
      expect(await store.consume('mine', 9_000)).toBe(true); // written by this call
      expect(await store.consume('mine', 9_000)).toBe(false); // someone's live row (this time the earlier call's)
      failRead = true;
      const error = await expectUnavailable(store.consume('unknown', 9_000));
      expect((error.cause as Error).message).toBe('worker thread timed out');
      failAfterWrite = false;
      failRead = false;
      expect(await store.consume('unknown', 9_000)).toBe(false); // it had been written: single use holds
      // A SQLite error means the statement did not write: no question is asked.
      database.exec('BEGIN IMMEDIATE');
      const other = new Database(database.name, { timeout: 0 });
      other.pragma('busy_timeout = 0');
      const busy = createSqliteStore({ database: other, now: () => t, purgeIntervalMs: 0, ensureSchema: false });
      const busyError = await expectUnavailable(busy.consume('locked', 9_000));
      expect((busyError.cause as { code?: string }).code).toBe('SQLITE_BUSY');
      database.exec('ROLLBACK');
      expect(await busy.consume('locked', 9_000)).toBe(true);
      await busy.close();
      other.close();
      t = 9_001;
      expect(await store.consume('mine', 20_000)).toBe(true);
    } finally {
      await store.close();
      database.close();
    }
  });

  describe('configureSqliteDatabase (a database shared with your own tables)', () => {
    /** A database whose pragma calls are recorded; `onBusy` runs after each SQLITE_BUSY of the WAL switch. */
    function recording(filename: string, onBusy: () => void) {
      const db = new Database(filename);
      const busy: string[] = [];
      const wrapped = {
        pragma(source: string): unknown {
          try {
            return db.pragma(source);
          } catch (error) {
            if ((error as { code?: string }).code === 'SQLITE_BUSY') {
              busy.push(source);
              onBusy();
            }
            throw error;
          }
        },
      };
      return { db, busy, wrapped };
    }

    it('retries the switch to WAL that SQLite refuses at once while another connection writes', async () => {
      const filename = newFile();
      const writer = new Database(filename);
      writer.exec('CREATE TABLE other (x INTEGER)');
      // Another process creating its tables: a write transaction in the rollback journal. SQLite answers
      // journal_mode = WAL with SQLITE_BUSY at once here, without waiting for busy_timeout.
      writer.exec('BEGIN IMMEDIATE');
      writer.exec('INSERT INTO other VALUES (1)');
      // The writer commits only after the first refusal, so the retry is what makes this pass.
      const { db, busy, wrapped } = recording(filename, () => {
        if (writer.inTransaction) writer.exec('COMMIT');
      });
      try {
        expect(await configureSqliteDatabase(wrapped)).toBe(wrapped);
        expect(busy).toEqual(['journal_mode = WAL']);
        expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
        expect(db.pragma('busy_timeout', { simple: true })).toBe(5000);
        expect(db.pragma('synchronous', { simple: true })).toBe(2); // FULL
        const store = createSqliteStore({ database: db, purgeIntervalMs: 0 });
        expect(await store.consume('shared', Date.now() + 60_000)).toBe(true);
        await store.close();
      } finally {
        db.close();
        writer.close();
      }
    });

    it('gives up with the SQLite error once busyTimeoutMs has passed; checks its arguments', async () => {
      const filename = newFile();
      const writer = new Database(filename);
      writer.exec('CREATE TABLE other (x INTEGER)');
      writer.exec('BEGIN IMMEDIATE');
      writer.exec('INSERT INTO other VALUES (1)');
      const { db, busy, wrapped } = recording(filename, () => {});
      try {
        await expect(configureSqliteDatabase(wrapped, { busyTimeoutMs: 0 })).rejects.toMatchObject({ code: 'SQLITE_BUSY' });
        expect(busy).toEqual(['journal_mode = WAL']);
        await expect(configureSqliteDatabase(db, { synchronous: 'off' as 'full' })).rejects.toThrow(
          /configureSqliteDatabase: synchronous must be "full" or "normal"/,
        );
        await expect(configureSqliteDatabase(db, { busyTimeoutMs: -1 })).rejects.toThrow(RangeError);
        await expect(configureSqliteDatabase({} as typeof db)).rejects.toThrow(TypeError);
        writer.exec('COMMIT');
        await configureSqliteDatabase(db, { synchronous: 'normal', busyTimeoutMs: 250 });
        expect(db.pragma('synchronous', { simple: true })).toBe(1); // NORMAL
        expect(db.pragma('busy_timeout', { simple: true })).toBe(250);
      } finally {
        db.close();
        writer.close();
      }
    });
  });
});

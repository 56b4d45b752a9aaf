// The SQLite task store: the shared compliance suite (a file the store opens, an injected database; two
// instances on one file), then what the suite cannot see: a restart, the bounds under creates from two
// connections, a corrupt row, the schema made once, the purge of expired rows, and failures.
import { fork } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { MrtrError } from '@mrtr/core';
import type { TaskRecord } from '@mrtr/core/tasks';
import { taskStoreCompliance } from '@mrtr/test-suite';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createSqliteTaskStore, type SqliteDatabaseLike, type SqlTaskStore } from '../src/index.js';
import { bundle, removeBundles, tempDir, uniqueTable } from './helpers.js';

const dir = tempDir();
const filename = join(dir, 'tasks.db');
const table = uniqueTable('tsk');
const injected: Database.Database[] = [];

let t = Date.now();
const clock = { now: () => t, advance: (ms: number) => void (t += ms) };

afterAll(() => {
  removeBundles();
  for (const db of injected) if (db.open) db.close();
  rmSync(dir, { recursive: true, force: true });
});

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

const openDatabase = (file = filename): Database.Database => {
  const database = new Database(file, { timeout: 5000 });
  injected.push(database);
  return database;
};

describe('SQLite task store, owned database file', () => {
  taskStoreCompliance(it, (limits) => createSqliteTaskStore({ filename, table, now: clock.now, ...limits }), {
    name: 'sqlite tasks(file)',
    clock,
    sharedBackend: true,
  });
});

describe('SQLite task store, injected database', () => {
  taskStoreCompliance(
    it,
    (limits) => createSqliteTaskStore({ database: openDatabase(), table: `${table}_inj`, now: clock.now, ...limits }),
    {
      name: 'sqlite tasks(injected)',
      clock,
      sharedBackend: true,
    },
  );
});

describe('SQLite task store, beyond the suite', () => {
  const x = `${table}_x`;
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
  const open = (options: Partial<Parameters<typeof createSqliteTaskStore>[0]> = {}) => {
    const store = createSqliteTaskStore({ filename, table: x, now: clock.now, ...options } as Parameters<typeof createSqliteTaskStore>[0]);
    stores.push(store);
    return store;
  };
  const admin = openDatabase();
  const rows = (where: string, ...values: unknown[]) =>
    (admin.prepare(`SELECT count(*) AS n FROM "${x}" WHERE ${where}`).get(...values) as { n: number }).n;

  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
  });

  it('maxTasks: a full store drops its expired tasks before any final one; two connections racing creates keep the bound', async () => {
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
    expect(rows('ns = ?', namespace)).toBe(3);
    const other = createSqliteTaskStore({ database: openDatabase(), table: x, now: clock.now, namespace, maxTasks: 4 });
    stores.push(other);
    const settled = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? store : other).create(task(`racer-${i}`))),
    );
    // One slot left, then room from a final task while its holder keeps two more than a newcomer (2 of 2): two
    // more, whoever wins the races; its last final task stays.
    expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(2);
    expect(rows('ns = ?', namespace)).toBe(4);
    expect(rows('ns = ? AND live = 0', namespace)).toBe(1);
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

  it('interleaved creates of one principal from two connections on one file: exactly the bound', async () => {
    const namespace = `race-${n++}`;
    const a = open({ namespace, maxLivePerPrincipal: 7, maxPerPrincipal: 9 });
    const b = createSqliteTaskStore({
      database: openDatabase(),
      table: x,
      namespace,
      now: clock.now,
      maxLivePerPrincipal: 7,
      maxPerPrincipal: 9,
    });
    stores.push(b);
    const settled = await Promise.allSettled(Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? a : b).create(task('carol'))));
    expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(7);
    for (const s of settled) if (s.status === 'rejected') expect((s.reason as { limit?: unknown }).limit).toBe('live');
    expect(rows('ns = ? AND principal = ?', namespace, 'carol')).toBe(7);
  });

  it('four processes creating tasks of one principal on one file at once: exactly the bound', async () => {
    const namespace = `procs-${n++}`;
    const script = await bundle('test/fixtures/task-worker.ts');
    const workers = Array.from({ length: 4 }, () => fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    try {
      const results = workers.map(
        (child) =>
          new Promise<{ created: number; limited: number; errors: string[] }>((resolve, reject) => {
            child.on('message', (m: { type: string; result?: { created: number; limited: number; errors: string[] } }) => {
              if (m.type === 'result' && m.result) resolve(m.result);
            });
            child.on('exit', (code) => reject(new Error(`worker exited with ${code} before reporting`)));
          }),
      );
      for (const r of results) r.catch(() => {});
      const ready = workers.map(
        (child) => new Promise<void>((resolve) => child.on('message', (m: { type: string }) => m.type === 'ready' && resolve())),
      );
      const task = { filename, table: x, namespace, principal: 'pat', creates: 25, maxLivePerPrincipal: 11 };
      for (const child of workers) child.send({ type: 'task', task });
      await Promise.all(ready);
      for (const child of workers) child.send({ type: 'go' });
      const done = await Promise.all(results);
      expect(done.flatMap((r) => r.errors)).toEqual([]);
      expect(done.reduce((sum, r) => sum + r.created, 0)).toBe(11);
      expect(done.reduce((sum, r) => sum + r.limited, 0)).toBe(100 - 11);
      expect(rows('ns = ? AND principal = ?', namespace, 'pat')).toBe(11);
    } finally {
      for (const child of workers) if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);

  it('a create counts the tasks another connection committed (its own BEGIN IMMEDIATE reads after their commit)', async () => {
    const namespace = `lock-${n++}`;
    const store = open({ namespace, maxLivePerPrincipal: 1, maxPerPrincipal: 1 });
    await store.ensureSchema();
    const other = openDatabase();
    other.exec('BEGIN IMMEDIATE');
    other
      .prepare(`INSERT INTO "${x}" (ns, task_id, principal, live, version, expires_at, record) VALUES (?, ?, ?, 1, 1, ?, ?)`)
      .run(namespace, 'foreign', 'dave', t + 60_000, JSON.stringify(task('dave', { taskId: 'foreign' })));
    other.exec('COMMIT');
    const refused = await rejection(store.create(task('dave')));
    expect((refused as { limit?: unknown }).limit).toBe('live');
    expect((await store.get('foreign'))?.principal).toBe('dave');
  });

  it('a busy database (write lock held past busy_timeout) fails closed with ERR_STORE_UNAVAILABLE, nothing written', async () => {
    const namespace = `busy-${n++}`;
    const database = openDatabase();
    database.pragma('busy_timeout = 50');
    const store = createSqliteTaskStore({ database, table: x, namespace, now: clock.now });
    stores.push(store);
    await store.ensureSchema();
    const other = openDatabase();
    other.exec('BEGIN IMMEDIATE');
    try {
      await expectUnavailable(store.create(task('erin')));
    } finally {
      other.exec('ROLLBACK');
    }
    expect(rows('ns = ?', namespace)).toBe(0);
  });

  it('a corrupt or foreign record fails closed (ERR_STORE_UNAVAILABLE) on get and update, without calling change', async () => {
    const namespace = `corrupt-${n++}`;
    const store = open({ namespace });
    const broken = ['{not json', JSON.stringify({ taskId: 'x' }), '[]', 'null'];
    for (const text of broken) {
      const created = task('dave');
      await store.create(created);
      admin.prepare(`UPDATE "${x}" SET record = ? WHERE ns = ? AND task_id = ?`).run(text, namespace, created.taskId);
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
    const victim = task('dave');
    await store.create(victim);
    admin
      .prepare(`UPDATE "${x}" SET record = ? WHERE ns = ? AND task_id = ?`)
      .run(JSON.stringify(task('mallory')), namespace, victim.taskId);
    await expectUnavailable(store.get(victim.taskId));
  });

  it('ensureSchema: the first start creates the table, both indexes and the namespace counts table; later starts read the catalog only (no DDL, no write lock)', async () => {
    const fresh = uniqueTable('tskddl');
    const recording = (texts: string[]): SqliteDatabaseLike => {
      const database = openDatabase();
      return {
        prepare: (source: string) => {
          texts.push(source);
          return database.prepare(source);
        },
        exec: (source: string) => {
          texts.push(source);
          return database.exec(source);
        },
        close: () => database.close(),
        get open() {
          return database.open;
        },
      };
    };
    const first: string[] = [];
    const store = createSqliteTaskStore({ database: recording(first), table: fresh });
    await store.ensureSchema();
    await store.ensureSchema();
    expect(first.filter((text) => /^\s*CREATE\b/i.test(text))).toHaveLength(4);
    for (let start = 0; start < 2; start++) {
      const texts: string[] = [];
      await createSqliteTaskStore({ database: recording(texts), table: fresh }).ensureSchema();
      expect(texts.filter((text) => /^\s*(CREATE|ALTER|BEGIN)\b/i.test(text))).toEqual([]);
      expect(texts.length).toBeGreaterThan(0);
    }
  });

  it('a create deletes its principal’s expired rows and a bounded batch of other expired rows', async () => {
    const namespace = `purge-${n++}`;
    const store = open({ namespace, purgeBatchSize: 3 });
    for (let i = 0; i < 5; i++) await store.create(task('gina', { ttlMs: 1_000 }));
    for (let i = 0; i < 2; i++) await store.create(task('hank', { ttlMs: 1_000 }));
    clock.advance(1_000);
    expect(rows('ns = ?', namespace)).toBe(7);
    const before = rows('expires_at <= ?', t);
    await store.create(task('hank'));
    expect(rows('ns = ? AND principal = ?', namespace, 'hank')).toBe(1);
    expect(before - rows('expires_at <= ?', t)).toBe(5); // hank's two, then three others
  });

  it('an expired task id can be created again; a live one is refused and kept', async () => {
    const store = open({ namespace: `reuse-${n++}` });
    const first = task('judy', { ttlMs: 1_000 });
    await store.create(first);
    await expect(store.create({ ...first, principal: 'mallory' })).rejects.toThrow(/already exists/);
    expect(await store.get(first.taskId)).toEqual(first);
    clock.advance(1_000);
    const again = { ...first, principal: 'kate', createdAt: t, lastUpdatedAt: t };
    await store.create(again);
    expect(await store.get(first.taskId)).toEqual(again);
  });

  it('misuse is a TypeError/RangeError; odd ids are unknown tasks; an unopenable file and a closed database fail closed', async () => {
    expect(() => createSqliteTaskStore({ filename, table: 'bad-name' })).toThrow(TypeError);
    expect(() => createSqliteTaskStore({ filename, maxLivePerPrincipal: 5, maxPerPrincipal: 4 })).toThrow(RangeError);
    const store = open({ namespace: `misuse-${n++}`, maxRecordBytes: 2048 });
    await expect(store.create({ ...task('mia'), taskId: '' })).rejects.toThrow(TypeError);
    await expect(store.create({ ...task('mia'), taskId: 'a\u0000b' })).rejects.toThrow(TypeError);
    await expect(store.create(task('mia', { statusMessage: 'x'.repeat(4096) }))).rejects.toThrow(RangeError);
    const small = task('mia');
    await store.create(small);
    await expect(store.update(small.taskId, (r) => ({ ...r, statusMessage: 'x'.repeat(4096) }))).rejects.toThrow(RangeError);
    await expect(store.update(small.taskId, (r) => ({ ...r, principal: 'other' }))).rejects.toThrow(TypeError);
    expect(await store.get(small.taskId)).toEqual(small);
    expect(await store.get('x'.repeat(257))).toBeUndefined();

    const missing = createSqliteTaskStore({ filename: join(dir, 'missing-dir', 'nested', 'tasks.db'), table: x });
    await expectUnavailable(missing.get('a'));
    await expectUnavailable(missing.create(task('nina')));
    await missing.close();
    const closedDb = new Database(join(dir, 'closed.db'));
    closedDb.close();
    const gone = createSqliteTaskStore({ database: closedDb, table: x });
    await expectUnavailable(gone.get('a'));
    await expectUnavailable(gone.update('a', (r) => r));
  });

  it('close() closes an owned database but never an injected one', async () => {
    const database = openDatabase();
    const store = createSqliteTaskStore({ database, table: x, namespace: `close-${n++}` });
    await store.create(task('olga'));
    await store.close();
    await store.close();
    expect(database.open).toBe(true);
    const own = open({ namespace: `close-${n++}` });
    await own.create(task('olga'));
    await own.close();
    await expectUnavailable(own.get('x'));
  });
});

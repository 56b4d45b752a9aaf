// Exactly-once under contention: ≥ 64 concurrent consumers of the same 1,000 ids across two separate
// pools (PostgreSQL) and two separate processes (SQLite and PostgreSQL), for fresh ids and for ids
// whose previous row has expired (the ON CONFLICT … DO UPDATE … WHERE expired path).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresStore, createSqliteStore, type SqlReplayStore } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  postgresSkipReason,
  REQUIRE_SERVICES,
  removeBundles,
  skipPostgres,
  sleep,
  spawnWorker,
  tempDir,
  uniqueTable,
  type WorkerResult,
  type WorkerTask,
} from './helpers.js';

const IDS = 1000;
const TIME_LIMIT_MS = 90_000;

postgresSkipReason('race.test.ts');
if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

const makeIds = (tag: string) => Array.from({ length: IDS }, (_, i) => `${tag}:${process.pid}:${Date.now()}:${i}`);

function shuffled<T>(items: readonly T[]): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [copy[i], copy[j]] = [copy[j] as T, copy[i] as T];
  }
  return copy;
}

/** Every consumer walks all ids in its own random order; returns the number of trues. */
async function raceInProcess(stores: SqlReplayStore[], consumersPerStore: number, ids: string[], expiresAtMs: number) {
  const deadline = Date.now() + TIME_LIMIT_MS;
  let trues = 0;
  let falses = 0;
  await Promise.all(
    stores.flatMap((store) =>
      Array.from({ length: consumersPerStore }, async () => {
        for (const id of shuffled(ids)) {
          if (Date.now() > deadline) throw new Error('race exceeded its time limit');
          if (await store.consume(id, expiresAtMs)) trues++;
          else falses++;
        }
      }),
    ),
  );
  return { trues, falses };
}

/** Starts the workers, releases them together, and sums their results. */
async function raceInProcesses(tasks: WorkerTask[]): Promise<WorkerResult[]> {
  const workers = await Promise.all(tasks.map((task) => spawnWorker(task, TIME_LIMIT_MS)));
  try {
    await Promise.race([Promise.all(workers.map((w) => w.ready)), ...workers.map((w) => w.result)]);
    for (const worker of workers) worker.go();
    return await Promise.all(workers.map((w) => w.result));
  } finally {
    for (const worker of workers) if (worker.child.exitCode === null) worker.child.kill('SIGKILL');
  }
}

afterAll(() => removeBundles());

describe('SQLite: two processes on one file', { timeout: 120_000 }, () => {
  const dir = tempDir();
  const filename = join(dir, 'race.db');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const task = (table: string, ids: string[], expiresAtMs: number): WorkerTask => ({
    kind: 'race',
    dialect: 'sqlite',
    target: filename,
    table,
    namespace: 'race',
    ids,
    connections: 2,
    consumersPerConnection: 16,
    expiresAtMs,
  });

  it('2 processes × 2 connections × 16 consumers over the same 1,000 fresh ids → exactly 1,000 trues', async () => {
    const table = uniqueTable('race');
    const ids = makeIds('fresh');
    const results = await raceInProcesses([task(table, ids, Date.now() + 600_000), task(table, ids, Date.now() + 600_000)]);
    expect(results.flatMap((r) => r.errors)).toEqual([]);
    expect(results.reduce((sum, r) => sum + r.trues, 0)).toBe(IDS);
    expect(results.reduce((sum, r) => sum + r.trues + r.falses, 0)).toBe(2 * 2 * 16 * IDS);
    // Both processes really took part.
    for (const result of results) expect(result.trues + result.falses).toBe(2 * 16 * IDS);
  });

  it('the same race over 1,000 ids whose rows have expired → exactly 1,000 trues', async () => {
    const table = uniqueTable('racex');
    const ids = makeIds('expired');
    // The seeding store's clock stands still, so ids whose expiry passes while seeding are still recorded.
    const seed = createSqliteStore({ filename, table, namespace: 'race', purgeIntervalMs: 0, now: () => 0 });
    try {
      const expiry = Date.now() + 150;
      for (const id of ids) expect(await seed.consume(id, expiry)).toBe(true);
      await sleep(expiry - Date.now() + 100);
      const results = await raceInProcesses([task(table, ids, Date.now() + 600_000), task(table, ids, Date.now() + 600_000)]);
      expect(results.flatMap((r) => r.errors)).toEqual([]);
      expect(results.reduce((sum, r) => sum + r.trues, 0)).toBe(IDS);
      // And now they are live again for everyone, including the seeding connection.
      expect(await seed.consume(ids[0] as string, Date.now() + 600_000)).toBe(false);
    } finally {
      await seed.close();
    }
  });
});

describe.skipIf(skipPostgres)('PostgreSQL: two pools, two processes', { timeout: 120_000 }, () => {
  const url = DATABASE_URL as string;
  const tables: string[] = [];
  beforeAll(() => assertPostgresReachable(url));
  afterAll(() => dropTables(url, tables));

  const open = (table: string) => createPostgresStore({ connectionString: url, table, namespace: 'race', purgeIntervalMs: 0 });

  it('64 consumers on two separate pools over the same 1,000 fresh ids → exactly 1,000 trues', async () => {
    const table = uniqueTable('race');
    tables.push(table);
    const stores = [open(table), open(table)];
    try {
      for (const store of stores) await store.ensureSchema();
      const { trues, falses } = await raceInProcess(stores, 32, makeIds('fresh'), Date.now() + 600_000);
      expect(trues).toBe(IDS);
      expect(trues + falses).toBe(64 * IDS);
    } finally {
      for (const store of stores) await store.close();
    }
  });

  it('64 consumers on two pools over 1,000 ids whose rows have expired → exactly 1,000 trues', async () => {
    const table = uniqueTable('racex');
    tables.push(table);
    const stores = [open(table), open(table)];
    try {
      const ids = makeIds('expired');
      const seed = createPostgresStore({ connectionString: url, table, namespace: 'race', purgeIntervalMs: 0 });
      try {
        for (const id of ids) expect(await seed.consume(id, Date.now() + 600_000)).toBe(true);
      } finally {
        await seed.close();
      }
      // Expired by the server's clock (the store's), without waiting: the rows are moved into its past.
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      try {
        await admin.query(`UPDATE "${table}" SET expires_at = 1 WHERE ns = 'race'`);
      } finally {
        await admin.end();
      }
      const { trues } = await raceInProcess(stores, 32, ids, Date.now() + 600_000);
      expect(trues).toBe(IDS);
    } finally {
      for (const store of stores) await store.close();
    }
  });

  it('2 processes × 32 consumers over the same 1,000 ids → exactly 1,000 trues', async () => {
    const table = uniqueTable('racep');
    tables.push(table);
    const ids = makeIds('proc');
    const task: WorkerTask = {
      kind: 'race',
      dialect: 'postgres',
      target: url,
      table,
      namespace: 'race',
      ids,
      connections: 1,
      consumersPerConnection: 32,
      expiresAtMs: Date.now() + 600_000,
    };
    const results = await raceInProcesses([task, task]);
    expect(results.flatMap((r) => r.errors)).toEqual([]);
    expect(results.reduce((sum, r) => sum + r.trues, 0)).toBe(IDS);
    for (const result of results) expect(result.trues + result.falses).toBe(32 * IDS);
  });
});

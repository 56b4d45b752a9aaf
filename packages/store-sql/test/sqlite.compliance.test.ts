import { join } from 'node:path';
import { storeCompliance } from '@mrtr/test-suite';
import Database from 'better-sqlite3';
import { afterAll, describe, it } from 'vitest';
import { createSqliteStore } from '../src/index.js';
import { tempDir, uniqueTable } from './helpers.js';
import { rmSync } from 'node:fs';

const dir = tempDir();
const filename = join(dir, 'replay.db');
const table = uniqueTable('cmp');
const injected: Database.Database[] = [];

afterAll(() => {
  for (const db of injected) db.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('SQLite store, owned database file', () => {
  storeCompliance(it, ({ namespace }) => createSqliteStore({ filename, table, namespace }), {
    name: 'sqlite(file)',
    ttlMs: 600,
    unreachable: () => createSqliteStore({ filename: join(dir, 'missing-dir', 'nested', 'replay.db'), table }),
  });
});

describe('SQLite store, injected database', () => {
  storeCompliance(
    it,
    ({ namespace }) => {
      const database = new Database(filename, { timeout: 5000 });
      injected.push(database);
      return createSqliteStore({ database, table: `${table}_inj`, namespace });
    },
    {
      name: 'sqlite(injected)',
      ttlMs: 600,
      unreachable: () => {
        const database = new Database(join(dir, 'closed.db'));
        database.close();
        return createSqliteStore({ database, table });
      },
    },
  );
});

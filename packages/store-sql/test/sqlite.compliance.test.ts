import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { type LossyStore, storeCompliance } from '@mrtr/test-suite';
import Database from 'better-sqlite3';
import { afterAll, describe, it } from 'vitest';
import { createSqliteStore, type SqliteDatabaseLike, type SqliteStatementLike } from '../src/index.js';
import { tempDir, uniqueTable } from './helpers.js';

const dir = tempDir();
const filename = join(dir, 'replay.db');
const table = uniqueTable('cmp');
const injected: Database.Database[] = [];

// The store judges expiry by its injected clock: the expiry test runs on a fake clock.
// Behind the wall clock (as the memory store's suite): a guard mints by the wall clock, and the suite advances this one by an hour.
let t = 1_700_000_000_000;
const clock = { now: () => t, advance: (ms: number) => void (t += ms) };

/**
 * better-sqlite3 itself cannot lose an answer (the statement runs inside the call), so the lost reply is
 * made by a wrapped database, as an injected driver wrapper could do: the consume statement runs and
 * then throws a non-SQLite error; with 'lost' the store's follow-up SELECT throws too until restore().
 */
function lossySqlite(namespace: string, lossyTable: string): LossyStore {
  const database = new Database(filename, { timeout: 5000 });
  injected.push(database);
  let armed: 'late' | 'lost' | undefined;
  let answering = true;
  const lost = () => new Error('the answer was lost (test wrapper)');
  const wrapper: SqliteDatabaseLike = {
    prepare(source: string): SqliteStatementLike {
      const statement = database.prepare(source);
      if (source.startsWith('INSERT') && !source.includes('_epoch"')) {
        return {
          run: (...params: unknown[]) => {
            const result = statement.run(...params);
            if (armed !== undefined) {
              answering = armed === 'late';
              armed = undefined;
              throw lost();
            }
            return result;
          },
          get: (...params: unknown[]) => statement.get(...params),
        };
      }
      if (source.startsWith('SELECT owner')) {
        return {
          run: (...params: unknown[]) => statement.run(...params),
          get: (...params: unknown[]) => {
            if (!answering) throw lost();
            return statement.get(...params);
          },
        };
      }
      return statement;
    },
    exec: (source: string) => database.exec(source),
    close: () => database.close(),
    get open() {
      return database.open;
    },
  };
  const store = createSqliteStore({ database: wrapper, table: lossyTable, namespace, now: clock.now });
  return {
    store,
    loseNextReply(mode) {
      armed = mode;
    },
    restore() {
      armed = undefined;
      answering = true;
    },
    close: () => store.close(),
  };
}

afterAll(() => {
  for (const db of injected) db.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('SQLite store, owned database file', () => {
  storeCompliance(it, (o) => createSqliteStore({ ...o, filename, table, now: clock.now }), {
    name: 'sqlite(file)',
    outcomes: true,
    keyFingerprints: true,
    clock,
    lostReply: ({ namespace }) => lossySqlite(namespace, table),
    unreachable: () => createSqliteStore({ filename: join(dir, 'missing-dir', 'nested', 'replay.db'), table }),
  });
});

describe('SQLite store, injected database', () => {
  storeCompliance(
    it,
    (o) => {
      const database = new Database(filename, { timeout: 5000 });
      injected.push(database);
      return createSqliteStore({ ...o, database, table: `${table}_inj`, now: clock.now });
    },
    {
      name: 'sqlite(injected)',
      outcomes: true,
      keyFingerprints: true,
      clock,
      lostReply: ({ namespace }) => lossySqlite(namespace, `${table}_inj`),
      unreachable: () => {
        const database = new Database(join(dir, 'closed.db'));
        database.close();
        return createSqliteStore({ database, table });
      },
    },
  );
});

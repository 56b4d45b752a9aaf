import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BackgroundError } from '@mrtr/core/store';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  configureSqliteDatabase,
  createPostgresStore,
  createPostgresTaskStore,
  createSqliteStore,
  createSqliteTaskStore,
  type PgPoolLike,
} from '../src/index.js';

// One vocabulary across the stores: the SQL stores take the names @mrtr/store-redis uses (`batch`,
// `connectTimeoutMs`, `extraRetentionMs`).

const pool = (): PgPoolLike =>
  ({ query: () => Promise.reject(new Error('not used')), connect: () => Promise.reject(new Error('not used')) }) as unknown as PgPoolLike;
const dir = mkdtempSync(join(tmpdir(), 'mrtr-option-names-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('option names of the SQL stores', () => {
  it('an unknown option is refused, naming it and the closest known name (before anything is opened)', async () => {
    const filename = join(dir, 'never.db');
    const refused = (make: () => unknown, message: string) => expect(make).toThrow(new TypeError(message));
    refused(
      () => createPostgresStore({ pool: pool(), purgeIntervalMS: 0 } as never),
      'createPostgresStore: unknown option "purgeIntervalMS"; did you mean "purgeIntervalMs"?',
    );
    refused(
      () => createPostgresStore({ pool: pool(), preparedStatement: false } as never),
      'createPostgresStore: unknown option "preparedStatement"; did you mean "preparedStatements"?',
    );
    refused(
      () => createPostgresTaskStore({ pool: pool(), maxRecordByte: 1 } as never),
      'createPostgresTaskStore: unknown option "maxRecordByte"; did you mean "maxRecordBytes"?',
    );
    refused(
      () => createSqliteStore({ filename, busyTimeout: 1 } as never),
      'createSqliteStore: unknown option "busyTimeout"; did you mean "busyTimeoutMs"?',
    );
    refused(
      () => createSqliteTaskStore({ filename, tabel: 'x' } as never),
      'createSqliteTaskStore: unknown option "tabel"; did you mean "table"?',
    );
    const db = new Database(':memory:');
    try {
      await expect(configureSqliteDatabase(db, { synchronus: 'FULL' } as never)).rejects.toThrow(
        new TypeError('configureSqliteDatabase: unknown option "synchronus"; did you mean "synchronous"?'),
      );
    } finally {
      db.close();
    }
  });

  it('extraRetentionMs keeps expired rows from the purge', async () => {
    for (const [i, grace] of [{ extraRetentionMs: 60_000 }].entries()) {
      let t = 1_000_000;
      const filename = join(dir, `grace-${i}.db`);
      const store = createSqliteStore({ filename, now: () => t, purgeIntervalMs: 0, ...grace });
      const plain = createSqliteStore({ filename, now: () => t, purgeIntervalMs: 0 });
      try {
        expect(await store.consume('g1', t + 100)).toBe(true);
        t += 150;
        expect(await store.purge()).toBe(0); // within the retention margin
        expect(await plain.purge()).toBe(1);
      } finally {
        await store.close();
        await plain.close();
      }
    }
  });

  it('the options are validated', () => {
    expect(() => createPostgresStore({ pool: pool(), extraRetentionMs: -1 })).toThrow(RangeError);
    expect(() => createPostgresStore({ pool: pool(), connectTimeoutMs: 0 })).toThrow(RangeError);
    expect(() => createPostgresTaskStore({ pool: pool(), connectTimeoutMs: 0 })).toThrow(RangeError);
  });
});

describe('onError of the SQL stores (one name and shape across the stores)', () => {
  it('a failed background purge reaches onError as a STORE_PURGE_FAILED BackgroundError, the error as cause', async () => {
    const filename = join(dir, 'purge-error.db');
    const errors: BackgroundError[] = [];
    let t = 1_000_000;
    const store = createSqliteStore({ filename, now: () => t, purgeIntervalMs: 20, onError: (e) => errors.push(e) });
    try {
      expect(await store.consume('p1', t + 100)).toBe(true); // the schema exists and the purge may run
      t += 1000;
      const other = new Database(filename);
      other.exec('DROP TABLE mrtr_replay');
      other.close();
      while (errors.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(errors[0]).toBeInstanceOf(BackgroundError);
      expect(errors[0]?.code).toBe('STORE_PURGE_FAILED');
      expect(errors[0]?.message).toMatch(
        /^createSqliteStore: the background purge failed \(.*mrtr_replay.*\); expired rows stay until a later run succeeds$/,
      );
      expect(errors[0]?.cause).toBeInstanceOf(Error);
    } finally {
      await store.close();
    }
  });

  it('onError must be a function', () => {
    expect(() => createPostgresStore({ pool: pool(), onError: 'log' as never })).toThrow(
      new TypeError('createPostgresStore: onError must be a function'),
    );
  });
});

import { storeCompliance } from '@mrtr/test-suite';
import pg from 'pg';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { createPostgresStore } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  postgresSkipReason,
  REQUIRE_SERVICES,
  skipPostgres,
  uniqueTable,
  withHostPort,
} from './helpers.js';

postgresSkipReason('postgres.compliance.test.ts');

if (skipPostgres && REQUIRE_SERVICES) {
  it('PostgreSQL is required (MRTR_REQUIRE_SERVICES=1) but DATABASE_URL is not set', () => {
    throw new Error('DATABASE_URL must be set when MRTR_REQUIRE_SERVICES=1');
  });
}

describe.skipIf(skipPostgres)('PostgreSQL store', () => {
  const url = DATABASE_URL as string;
  const table = uniqueTable('cmp');
  let shared: pg.Pool;

  beforeAll(async () => {
    await assertPostgresReachable(url);
    shared = new pg.Pool({ connectionString: url, max: 10 });
    shared.on('error', () => {});
  });

  afterAll(async () => {
    await shared?.end();
    await dropTables(url, [table, `${table}_inj`]);
  });

  const deadPort = (kind: 'owned' | 'injected') => {
    const deadUrl = withHostPort(url, '127.0.0.1', 1);
    if (kind === 'owned') {
      return createPostgresStore({ connectionString: deadUrl, table, connectionTimeoutMs: 1000, statementTimeoutMs: 1000 });
    }
    const pool = new pg.Pool({ connectionString: deadUrl, connectionTimeoutMillis: 1000 });
    pool.on('error', () => {});
    const store = createPostgresStore({ pool, table, connectionTimeoutMs: 1000, statementTimeoutMs: 1000 });
    return {
      consume: store.consume,
      async close() {
        await store.close();
        await pool.end();
      },
    };
  };

  describe('owned pool (connectionString)', () => {
    storeCompliance(it, ({ namespace }) => createPostgresStore({ connectionString: url, table, namespace }), {
      name: 'postgres(url)',
      ttlMs: 600,
      unreachable: () => deadPort('owned'),
    });
  });

  describe('injected pool', () => {
    storeCompliance(it, ({ namespace }) => createPostgresStore({ pool: shared, table: `${table}_inj`, namespace }), {
      name: 'postgres(pool)',
      ttlMs: 600,
      unreachable: () => deadPort('injected'),
    });
  });
});

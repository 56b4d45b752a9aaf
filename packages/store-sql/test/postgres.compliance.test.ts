import { type LossyStore, lossyStoreThroughProxy, storeCompliance } from '@mrtr/test-suite';
import pg from 'pg';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { createPostgresStore } from '../src/index.js';
import {
  assertPostgresReachable,
  DATABASE_URL,
  dropTables,
  type FakeServerClock,
  fakeServerClock,
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
  const real = DATABASE_URL as string;
  const table = uniqueTable('cmp');
  let shared: pg.Pool;
  let bare: pg.Pool;
  // The store judges expiry by the server's clock, never the process's: the suite's clock is a fake server clock
  // (see fakeServerClock), so the expiry tests need no real-time window. Behind the wall clock (as the memory store's
  // suite): a guard mints by the wall clock, and the suite advances this one by an hour.
  let server: FakeServerClock;
  let url = real;
  const clock = { now: () => server.now(), advance: (ms: number) => server.advance(ms) };
  // The process's clock the store is given: far off, to show it is never used.
  const skewed = () => Date.now() + 86_400_000;

  beforeAll(async () => {
    await assertPostgresReachable(real);
    server = await fakeServerClock(real, 1_700_000_000_000);
    url = server.url;
    shared = new pg.Pool({ connectionString: real, options: server.options, max: 10, statement_timeout: 5000, lock_timeout: 2000 });
    shared.on('error', () => {});
    bare = new pg.Pool({ connectionString: real, options: server.options, max: 10 });
    bare.on('error', () => {});
  });

  afterAll(async () => {
    await shared?.end();
    await bare?.end();
    await dropTables(real, [table, `${table}_inj`, `${table}_bare`]);
    await server?.close();
  });

  /** A store through a proxy that can lose the reply to one INSERT (storeCompliance's lostReply). */
  const lossy = (kind: 'owned' | 'injected', namespace: string, lossyTable: string): Promise<LossyStore> =>
    lossyStoreThroughProxy(url, 5432, (proxied) => {
      const timeouts = { statementTimeoutMs: 1500, connectTimeoutMs: 1500 };
      if (kind === 'owned') {
        const store = createPostgresStore({ connectionString: proxied, table: lossyTable, namespace, now: skewed, ...timeouts });
        return { store, close: () => store.close() };
      }
      // Server-side bounds, as the README asks of an injected pool: each consume is then one statement, whose
      // reply this proxy can lose after it committed. (Without them each consume is its own transaction: a
      // lost reply never commits — tested in group-commit.test.ts.)
      const pool = new pg.Pool({
        connectionString: proxied,
        options: server.options,
        connectionTimeoutMillis: 1500,
        max: 4,
        statement_timeout: 1500,
        lock_timeout: 1500,
      });
      pool.on('error', () => {});
      const store = createPostgresStore({ pool, table: lossyTable, namespace, now: skewed, ...timeouts });
      return {
        store,
        async close() {
          await store.close();
          await pool.end();
        },
      };
    });

  const deadPort = (kind: 'owned' | 'injected') => {
    const deadUrl = withHostPort(real, '127.0.0.1', 1);
    if (kind === 'owned') {
      return createPostgresStore({ connectionString: deadUrl, table, connectTimeoutMs: 1000, statementTimeoutMs: 1000 });
    }
    const pool = new pg.Pool({ connectionString: deadUrl, connectionTimeoutMillis: 1000 });
    pool.on('error', () => {});
    const store = createPostgresStore({ pool, table, connectTimeoutMs: 1000, statementTimeoutMs: 1000 });
    return {
      ...store,
      async close() {
        await store.close();
        await pool.end();
      },
    };
  };

  describe('owned pool (connectionString)', () => {
    storeCompliance(it, (o) => createPostgresStore({ ...o, connectionString: url, table, now: skewed }), {
      name: 'postgres(url)',
      outcomes: true,
      keyFingerprints: true,
      clock,
      unreachable: () => deadPort('owned'),
      lostReply: ({ namespace }) => lossy('owned', namespace, table),
    });
  });

  describe('injected pool', () => {
    storeCompliance(it, (o) => createPostgresStore({ ...o, pool: shared, table: `${table}_inj`, now: skewed }), {
      name: 'postgres(pool)',
      outcomes: true,
      keyFingerprints: true,
      clock,
      unreachable: () => deadPort('injected'),
      lostReply: ({ namespace }) => lossy('injected', namespace, `${table}_inj`),
    });
  });

  // An injected pool without statement_timeout / lock_timeout: each consume runs in a transaction with
  // SET LOCAL bounds. (Its lost replies never commit, a stricter answer than the suite's lostReply asks
  // for; tested in group-commit.test.ts.)
  describe('injected pool without server-side timeouts', () => {
    storeCompliance(it, (o) => createPostgresStore({ ...o, pool: bare, table: `${table}_bare`, now: skewed }), {
      name: 'postgres(bare pool)',
      outcomes: true,
      keyFingerprints: true,
      clock,
      unreachable: () => deadPort('injected'),
    });
  });
});

import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createStateGuard, KeyRing, type ReplayStore, type TaskRecord, type TaskStore } from '@mrtr/core';
import { redactUrl, storeCapabilities, withDeadline } from '@mrtr/core/authoring';
import { CODECS, type CodecName, codecFactory } from './codecs.js';
import {
  colourEnabled,
  EXIT_BAD,
  EXIT_OK,
  intValue,
  type Io,
  parseCommand,
  type Status,
  statusLine,
  style,
  UsageError,
  writeJson,
  writeLines,
} from './io.js';
import { checkRing, DEFAULT_SKEW_MS, splitEntries } from './keys.js';
import { loadOptional, STORE_PACKAGES } from './optional.js';
import { duration } from './time.js';

const STORES = ['memory', 'redis', 'postgres', 'sqlite'] as const;
type StoreName = (typeof STORES)[number];

export const DOCTOR_HELP = `Usage: mrtr doctor [--codec NAME] [--store NAME] [options]

Checks a deployment before it takes traffic, with the environment its server uses, and prints one
line per check with ok, warn or fail:
  keys          MRTR_KEYS parses; how many keys, which one seals
  codec NAME    a real seal/open round trip through the state guard; a token sealed by every other key
                of the ring opens too
  STORE         a real consume of a throwaway id (first accepted, the replay refused), its expiry on the store's
                clock; then removed
  redis policy  maxmemory-policy (CONFIG, else INFO memory): anything but noeviction fails (Redis may evict consumed
                ids, and the store refuses it by default), and so does a policy neither command shows (the store
                refuses to consume until it can tell, unless evictionPolicyCheck is 'accept-unknown')
  redis persistence
                AOF or RDB snapshots (INFO persistence, CONFIG GET save): ok with either; warns when both are off (a
                restart empties the ledger) or it cannot tell
  redis clock   Redis TIME against this host (Redis expires ids by its own clock)
  sql schema    the table's columns (lease_until and fence too), primary key (ns, id), expiry index, its epoch
                table TABLE_epoch and its key fingerprint table TABLE_keys (PostgreSQL and SQLite)
  sql clock     the database clock against this host (PostgreSQL)
  STORE tasks   the task store on the same backend: a probe task (its own namespace, a random principal, a
                10 s ttl) created, read back, completed and read back, then removed
  task schema   the task table's columns, primary key (ns, task_id) and indexes (PostgreSQL and SQLite)

Environment: MRTR_KEYS (required), REDIS_URL, DATABASE_URL, MRTR_SQLITE_FILE, MRTR_CODEC, MRTR_STORE.
The stores' packages are optional: redis needs @mrtr/store-redis and ioredis, postgres @mrtr/store-sql
and pg, sqlite @mrtr/store-sql and better-sqlite3, installed next to @mrtr/cli.

Options:
  --codec NAME    hmac, jwe, aead or all (default: MRTR_CODEC, else all)
  --store NAME    memory, redis, postgres, sqlite or none; repeatable as a comma list (default: MRTR_STORE,
                  else redis when REDIS_URL is set, postgres when DATABASE_URL is set and sqlite when
                  MRTR_SQLITE_FILE is set, else memory)
  --table NAME    the SQL store's table (default mrtr_replay)
  --tasks-table NAME  the SQL task store's table (default mrtr_tasks)
  --sqlite-file PATH  the SQLite store's database file (default: MRTR_SQLITE_FILE)
  --skew-ms MS    the guard's clockSkewMs: a store clock further off fails, half of it warns (default ${DEFAULT_SKEW_MS})
  --timeout-ms MS longest wait for a store to connect or answer (default 5000)
  --strict        exit 1 on a warning too
  --json          print the checks as JSON
  -h, --help      this help

Exit codes: 0 no check failed, 1 a check failed (or warned, with --strict), 2 usage error.
`;

interface Check {
  name: string;
  status: Status;
  detail: string;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return withDeadline(promise, ms, () => new Error(`${what} did not answer within ${ms} ms`));
}

const errorText = (error: unknown): string => {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  const code = (error as { code?: unknown }).code;
  return `${typeof code === 'string' && code.startsWith('ERR_') ? `${code} ` : ''}${error.message}${cause}`;
};

function skewCheck(name: string, skew: number, rtt: number, skewMs: number, note: string): Check {
  const abs = Math.abs(skew);
  const status: Status = abs > skewMs ? 'fail' : abs > skewMs / 2 ? 'warn' : 'ok';
  const where = skew === 0 ? 'in step with this host' : `${duration(abs)} ${skew > 0 ? 'ahead of' : 'behind'} this host`;
  return {
    name,
    status,
    detail: `${where} (round trip ${duration(rtt)}; tolerated ${duration(skewMs)})${status === 'ok' ? '' : `; ${note}`}`,
  };
}

/**
 * This host's clock. `MRTR_CLOCK_OFFSET_MS` (a testing aid, documented as such) shifts it, to see the
 * clock checks warn and fail without a skewed machine.
 */
let clockOffsetMs = 0;
const hostNow = (): number => Date.now() + clockOffsetMs;

/**
 * Now by the store's clock when it declares one (it refuses an expiry at or before it, `ERR_STATE_EXPIRED`), else by
 * this host's. A store clock that does not answer, or a store package from before capabilities: this host's clock
 * (the consume then reports the store; the clock line reports the clock).
 */
async function storeNow(store: ReplayStore, timeoutMs: number, label: string): Promise<number> {
  let clock = false;
  try {
    clock = storeCapabilities(store).clock;
  } catch {
    // An older store package declares no capabilities: it judges expiry by the time it is given.
  }
  if (!clock || store.time === undefined) return hostNow();
  try {
    return await withTimeout(store.time(), timeoutMs, label);
  } catch {
    return hostNow();
  }
}

/** How long the throwaway id is to live: past both consumes on a slow store, and deleted after anyway. */
const PROBE_ID_TTL_MS = 60_000;

async function consumeTwice(store: ReplayStore, timeoutMs: number, label: string): Promise<{ id: string; check: Check }> {
  const id = `doctor-${randomBytes(16).toString('base64url')}`;
  const expiresAtMs = (await storeNow(store, timeoutMs, label)) + PROBE_ID_TTL_MS;
  const started = performance.now();
  const first = await withTimeout(store.consume(id, expiresAtMs), timeoutMs, label);
  const second = await withTimeout(store.consume(id, expiresAtMs), timeoutMs, label);
  const ms = performance.now() - started;
  if (first === true && second === false) {
    return {
      id,
      check: { name: label, status: 'ok', detail: `consume of a throwaway id: first accepted, replay refused (${duration(ms)} for both)` },
    };
  }
  return {
    id,
    check: {
      name: label,
      status: 'fail',
      detail: `single use is broken: first consume ${String(first)}, second ${String(second)} (expected true, then false)`,
    },
  };
}

export async function doctor(io: Io, args: string[]): Promise<number> {
  const parsed = parseCommand(io, args, DOCTOR_HELP, {
    strings: ['codec', 'store', 'table', 'tasks-table', 'sqlite-file', 'skew-ms', 'timeout-ms'],
    flags: ['strict'],
  });
  if (parsed === undefined) return EXIT_OK;
  const { values, positionals } = parsed;
  if (positionals.length > 0) throw new UsageError(`doctor takes no arguments (got "${positionals[0]}")`);
  const env = io.env;
  const codecText = (values.codec as string | undefined) ?? env.MRTR_CODEC ?? 'all';
  if (codecText !== 'all' && !(CODECS as readonly string[]).includes(codecText))
    throw new UsageError('--codec (or MRTR_CODEC) must be hmac, jwe, aead or all');
  const codecs: CodecName[] = codecText === 'all' ? [...CODECS] : [codecText as CodecName];
  const redisUrl = env.REDIS_URL === '' ? undefined : env.REDIS_URL;
  const databaseUrl = env.DATABASE_URL === '' ? undefined : env.DATABASE_URL;
  const sqliteText = (values['sqlite-file'] as string | undefined) ?? env.MRTR_SQLITE_FILE;
  const sqliteFile = sqliteText === '' ? undefined : sqliteText;
  const storeText = (values.store as string | undefined) ?? env.MRTR_STORE;
  let stores: StoreName[];
  if (storeText === undefined || storeText === '') {
    stores = [
      ...(redisUrl === undefined ? [] : ['redis' as const]),
      ...(databaseUrl === undefined ? [] : ['postgres' as const]),
      ...(sqliteFile === undefined ? [] : ['sqlite' as const]),
    ];
    if (stores.length === 0) stores = ['memory'];
  } else if (storeText === 'none') {
    stores = [];
  } else {
    const names = storeText.split(',').map((n) => n.trim());
    for (const n of names)
      if (!(STORES as readonly string[]).includes(n))
        throw new UsageError(`--store (or MRTR_STORE): unknown store "${n}" (memory, redis, postgres, sqlite or none)`);
    stores = [...new Set(names as StoreName[])];
  }
  const table = (values.table as string | undefined) ?? 'mrtr_replay';
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,47}$/.test(table))
    throw new UsageError('--table must be letters, digits and _, starting with a letter or _, at most 48 characters');
  const tasksTable = (values['tasks-table'] as string | undefined) ?? 'mrtr_tasks';
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,47}$/.test(tasksTable))
    throw new UsageError('--tasks-table must be letters, digits and _, starting with a letter or _, at most 48 characters');
  const skewMs = intValue('skew-ms', values['skew-ms'], DEFAULT_SKEW_MS, 0, 600_000);
  const timeoutMs = intValue('timeout-ms', values['timeout-ms'], 5000, 100, 120_000);

  const offset = env.MRTR_CLOCK_OFFSET_MS;
  if (offset !== undefined && offset !== '') {
    if (!/^-?\d{1,10}$/.test(offset)) throw new UsageError('MRTR_CLOCK_OFFSET_MS must be an integer (milliseconds)');
    clockOffsetMs = Number(offset);
  }
  const checks: Check[] = [];
  const add = (c: Check) => checks.push(c);

  // 1. The key ring.
  const keysText = env.MRTR_KEYS;
  let ring: KeyRing | undefined;
  if (keysText === undefined || keysText.trim() === '') {
    add({ name: 'keys', status: 'fail', detail: 'MRTR_KEYS is not set (make one with "mrtr keygen")' });
  } else {
    const report = checkRing(keysText.trim());
    if (!report.ok) {
      const reasons = [...report.problems, ...report.entries.flatMap((e) => e.problems.map((p) => `${e.kid ?? `entry ${e.index}`}: ${p}`))];
      add({ name: 'keys', status: 'fail', detail: `MRTR_KEYS is invalid: ${reasons.join('; ')}` });
    } else {
      ring = KeyRing.parse(keysText);
      const detail = `${ring.kids.length} key${ring.kids.length === 1 ? '' : 's'} (${ring.kids.join(', ')}); "${ring.primaryKid}" seals, all open`;
      add({
        name: 'keys',
        status: report.warnings.length > 0 ? 'warn' : 'ok',
        detail: report.warnings.length > 0 ? `${detail}; ${report.warnings.join('; ')}` : detail,
      });
    }
  }

  // 2. A seal/open round trip per codec, through the guard; and every other key's tokens open.
  if (ring !== undefined) {
    const entries = splitEntries(keysText!.trim());
    const request = { method: 'tools/call', target: 'mrtr-doctor', arguments: { check: true }, principal: 'mrtr-doctor' };
    for (const name of codecs) {
      const label = `codec ${name}`;
      try {
        const factory = await codecFactory(name);
        const guard = createStateGuard({ keys: ring, codec: factory, audience: 'mrtr-doctor' });
        const token = await guard.mint({ doctor: true }, request);
        const opened = await guard.verify(token, request);
        if (opened.kid !== ring.primaryKid) throw new Error(`sealed with "${opened.kid}", not the primary`);
        const others: string[] = [];
        for (const entry of entries.slice(1)) {
          const single = new KeyRing([entry]);
          const other = await createStateGuard({ keys: single, codec: factory, audience: 'mrtr-doctor' }).mint({ doctor: true }, request);
          const back = await guard.verify(other, request);
          if (back.kid !== entry.kid) throw new Error(`a token of "${entry.kid}" opened as "${back.kid}"`);
          others.push(entry.kid);
        }
        add({
          name: label,
          status: 'ok',
          detail: `sealed with "${ring.primaryKid}" and opened (${token.length} characters)${others.length === 0 ? '' : `; tokens sealed by ${others.map((k) => `"${k}"`).join(', ')} open too`}`,
        });
      } catch (error) {
        add({ name: label, status: 'fail', detail: `round trip failed: ${errorText(error)}` });
      }
    }
  } else {
    for (const name of codecs) add({ name: `codec ${name}`, status: 'fail', detail: 'skipped: no valid key ring' });
  }

  // 3. The stores.
  for (const store of stores) {
    if (store === 'memory') await checkMemory(add, timeoutMs);
    else if (store === 'redis') {
      if (redisUrl === undefined) add({ name: 'redis', status: 'fail', detail: 'REDIS_URL is not set' });
      else await checkRedis(add, redisUrl, timeoutMs, skewMs);
    } else if (store === 'sqlite') {
      if (sqliteFile === undefined)
        add({ name: 'sqlite', status: 'fail', detail: 'no database file: pass --sqlite-file PATH (or set MRTR_SQLITE_FILE)' });
      else await checkSqlite(add, sqliteFile, table, tasksTable, timeoutMs);
    } else if (databaseUrl === undefined) add({ name: 'postgres', status: 'fail', detail: 'DATABASE_URL is not set' });
    else await checkPostgres(add, databaseUrl, table, tasksTable, timeoutMs, skewMs);
  }
  if (stores.length === 0)
    add({ name: 'store', status: 'warn', detail: 'none: without a replay store a state can be replayed until it expires' });

  const counts = { ok: 0, warn: 0, fail: 0, info: 0 };
  for (const c of checks) counts[c.status]++;
  const failed = counts.fail > 0 || (values.strict === true && counts.warn > 0);
  if (values.json) {
    writeJson(io, { ok: !failed, codecs, stores, checks, counts: { ok: counts.ok, warn: counts.warn, fail: counts.fail } });
  } else {
    const s = style(colourEnabled(io.stdout, io.env));
    const lines = checks.map((c) => statusLine(s, c.status, c.name, c.detail));
    lines.push(`${counts.ok} ok, ${counts.warn} warn, ${counts.fail} fail`);
    writeLines(io.stdout, lines);
  }
  return failed ? EXIT_BAD : EXIT_OK;
}

async function checkMemory(add: (c: Check) => void, timeoutMs: number): Promise<void> {
  const { createMemoryStore } = await import('@mrtr/store-memory');
  const store = createMemoryStore({ maxEntries: 1000 });
  try {
    const { check } = await consumeTwice(store, timeoutMs, 'memory');
    if (check.status === 'ok') check.detail += '; one process only: a fleet of instances needs redis or postgres';
    check.status = check.status === 'ok' ? 'warn' : check.status;
    add(check);
  } finally {
    await store.close();
  }
}

type EvictionCheck = import('@mrtr/store-redis').EvictionCheck;
type PersistenceCheck = import('@mrtr/store-redis').PersistenceCheck;

/** The `redis policy` line: what the store itself does with the policy it reads (by default it refuses all but noeviction). */
function policyLine(policy: EvictionCheck): Check {
  const name = 'redis policy';
  if (policy.status === 'safe') return { name, status: 'ok', detail: `maxmemory-policy ${policy.policy}: consumed ids are never evicted` };
  if (policy.status === 'evicting') {
    return {
      name,
      status: 'fail',
      detail: `maxmemory-policy ${policy.policy}: under memory pressure Redis may evict consumed ids (they carry a TTL), and a used state would be accepted again, so the store refuses to consume on it by default; use noeviction`,
    };
  }
  const why = policy.error === undefined ? '' : ` (${errorText(policy.error)})`;
  return {
    name,
    status: 'fail',
    detail: `cannot read maxmemory-policy from CONFIG or INFO${why}: the store refuses to consume until it can tell (evictionPolicyCheck: 'accept-unknown' accepts it once you know it is noeviction)`,
  };
}

const onOff = (value: boolean | undefined): string => (value === undefined ? 'unknown' : value ? 'on' : 'off');

/** The `redis persistence` line: ok with AOF or RDB snapshots, warn when both are off or it cannot tell. */
function persistenceLine(found: PersistenceCheck): Check {
  const name = 'redis persistence';
  if ('error' in found) {
    return {
      name,
      status: 'warn',
      detail: `cannot read INFO persistence (${errorText(found.error)}): check that Redis persists its data (RDB or AOF); a restart without either empties the ledger`,
    };
  }
  if (found.status === 'persistent') {
    return {
      name,
      status: 'ok',
      detail:
        found.aof === true
          ? `AOF on${found.rdb === true ? ', RDB snapshots on' : ''}: a restart keeps the ledger`
          : 'RDB snapshots on, AOF off: a restart keeps the ledger as of the last snapshot (appendonly yes keeps every consume)',
    };
  }
  if (found.status === 'volatile') {
    return {
      name,
      status: 'warn',
      detail:
        'RDB snapshots and AOF are off: a restart empties the ledger; states minted before it are then refused (ERR_LEDGER_LOST) until they expire. Turn on AOF (appendonly yes) to keep it',
    };
  }
  return {
    name,
    status: 'warn',
    detail: `AOF ${onOff(found.aof)}, RDB snapshots ${onOff(found.rdb)} (INFO persistence does not say, and CONFIG GET save is refused or silent): check that Redis persists its data; a restart without either empties the ledger`,
  };
}

/**
 * The two ways a Redis forgets spent ids: eviction under memory pressure (the policy, read through the store: `CONFIG`,
 * else `INFO memory` on a managed Redis that refuses `CONFIG`) and a restart without persistence (`INFO persistence`).
 * Each read is two commands at most, each bounded by the store's command timeout: twice that here.
 */
async function checkRedisLedger(
  add: (c: Check) => void,
  store: import('@mrtr/store-redis').RedisReplayStore,
  timeoutMs: number,
): Promise<void> {
  const policy = await withTimeout(store.checkEvictionPolicy(), timeoutMs * 2, 'redis').catch(
    (error: unknown): EvictionCheck => ({ status: 'unknown', error }),
  );
  add(policyLine(policy));
  const persistence = await withTimeout(store.checkPersistence(), timeoutMs * 2, 'redis').catch(
    (error: unknown): PersistenceCheck => ({ status: 'unknown', error }),
  );
  add(persistenceLine(persistence));
}

async function checkRedis(add: (c: Check) => void, url: string, timeoutMs: number, skewMs: number): Promise<void> {
  const where = redactUrl(url);
  let store: import('@mrtr/store-redis').RedisReplayStore | undefined;
  try {
    const { createRedisStore } = await loadOptional(() => import('@mrtr/store-redis'), STORE_PACKAGES.redis, 'doctor --store redis');
    // The checks below report a Redis that is down or evicting themselves: no second report on stderr, and the
    // consume check runs whatever the policy (the policy line says what the store itself would do).
    store = createRedisStore({
      url,
      namespace: 'mrtr-doctor',
      connectTimeoutMs: timeoutMs,
      commandTimeoutMs: timeoutMs,
      evictionPolicyCheck: 'warn',
      onError: () => {},
    });
    const { id, check } = await consumeTwice(store, timeoutMs * 2, 'redis');
    check.detail += ` at ${where}`;
    add(check);
    const client = store.client as unknown as {
      time(): Promise<[string, string]>;
      del(key: string): Promise<number>;
    };
    await withTimeout(client.del(`${store.keyPrefix}${id}`), timeoutMs, 'redis').catch(() => {});
    await checkRedisLedger(add, store, timeoutMs);
    try {
      const t0 = hostNow();
      const [sec, usec] = await withTimeout(client.time(), timeoutMs, 'redis');
      const t1 = hostNow();
      const redisMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
      add(
        skewCheck(
          'redis clock',
          redisMs - Math.round((t0 + t1) / 2),
          t1 - t0,
          skewMs,
          'Redis expires consumed ids by its own clock: fix NTP, or set extraRetentionMs of the store to the bound',
        ),
      );
    } catch (error) {
      add({ name: 'redis clock', status: 'warn', detail: `cannot read TIME: ${errorText(error)}` });
    }
  } catch (error) {
    add({ name: 'redis', status: 'fail', detail: `${where}: ${errorText(error)}` });
  } finally {
    await store?.close().catch(() => {});
  }
  await checkRedisTasks(add, url, timeoutMs);
}

interface PgPool {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

type StoreSql = typeof import('@mrtr/store-sql');

/**
 * A schema check of `@mrtr/store-sql` (the store's own, from the schema it creates tables from) as a doctor line;
 * `undefined` when the table does not exist.
 */
function schemaLine(
  name: 'sql schema' | 'task schema',
  table: string,
  found: import('@mrtr/store-sql').SqlSchemaCheck | undefined,
): Check | undefined {
  if (found === undefined) return undefined;
  if (found.problems.length > 0) return { name, status: 'fail', detail: `table "${table}": ${found.problems.join('; ')}` };
  if (found.warnings.length > 0) return { name, status: 'warn', detail: `table "${table}": ${found.warnings.join('; ')}` };
  return { name, status: 'ok', detail: `table "${table}": ${found.summary}` };
}

/** The replay table's schema on PostgreSQL (the connection's current schema). */
async function schemaCheck(sql: StoreSql, pool: PgPool, table: string, timeoutMs: number): Promise<Check | undefined> {
  return schemaLine('sql schema', table, await withTimeout(sql.checkPostgresSchema(pool as never, { table }), timeoutMs, 'postgres'));
}

async function checkPostgres(
  add: (c: Check) => void,
  url: string,
  table: string,
  tasksTable: string,
  timeoutMs: number,
  skewMs: number,
): Promise<void> {
  const where = redactUrl(url);
  let pool: PgPool | undefined;
  let store: import('@mrtr/store-sql').SqlReplayStore | undefined;
  try {
    await checkPostgresReplay();
    if (pool !== undefined) await checkPostgresTasks(add, pool, where, tasksTable, timeoutMs);
  } finally {
    await store?.close().catch(() => {});
    await pool?.end().catch(() => {});
  }

  async function checkPostgresReplay(): Promise<void> {
    try {
      const what = 'doctor --store postgres';
      const pg = (
        (await loadOptional(() => import('pg'), STORE_PACKAGES.postgres, what)) as unknown as {
          default: { Pool: new (config: Record<string, unknown>) => PgPool };
        }
      ).default;
      const sql = await loadOptional(() => import('@mrtr/store-sql'), STORE_PACKAGES.postgres, what);
      pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: timeoutMs, statement_timeout: timeoutMs, max: 2 });
      pool.on('error', () => {});
      store = sql.createPostgresStore({
        pool: pool as never,
        table,
        namespace: 'mrtr-doctor',
        purgeIntervalMs: 0,
        statementTimeoutMs: timeoutMs,
      });
      const before = await schemaCheck(sql, pool, table, timeoutMs);
      const schema: Check = before ?? {
        name: 'sql schema',
        status: 'warn',
        detail: `table "${table}" was missing: the store creates it on its first consume (ensureSchema, the default), so the server's role needs CREATE on the schema (or create it in a migration)`,
      };
      add(schema);
      const { id, check } = await consumeTwice(store, timeoutMs * 2, 'postgres');
      check.detail += ` at ${where}`;
      add(check);
      await withTimeout(pool.query(`DELETE FROM "${table}" WHERE ns = $1 AND id = $2`, ['mrtr-doctor', id]), timeoutMs, 'postgres').catch(
        () => {},
      );
      if (before === undefined) afterCreation(schema, await schemaCheck(sql, pool, table, timeoutMs));
      const t0 = hostNow();
      const { rows } = await withTimeout(
        pool.query('SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now'),
        timeoutMs,
        'postgres',
      );
      const t1 = hostNow();
      add(
        skewCheck(
          'sql clock',
          Number(rows[0]!.now) - Math.round((t0 + t1) / 2),
          t1 - t0,
          skewMs,
          "the SQL store judges expiry by the servers' clocks, so this host or the database is off: fix NTP",
        ),
      );
    } catch (error) {
      add({ name: 'postgres', status: 'fail', detail: `${where}: ${errorText(error)}` });
    }
  }
}

interface SqliteDb {
  prepare(sql: string): { all(...params: unknown[]): Record<string, unknown>[]; run(...params: unknown[]): unknown };
  pragma(source: string, options?: { simple?: boolean }): unknown;
  close(): unknown;
}

/**
 * The SQLite store on the server's database file, opened here with the driver the server uses. A file that does
 * not exist yet is not created: the driver and a consume are checked on an in-memory database instead.
 */
async function checkSqlite(add: (c: Check) => void, file: string, table: string, tasksTable: string, timeoutMs: number): Promise<void> {
  let db: SqliteDb | undefined;
  let store: import('@mrtr/store-sql').SqlReplayStore | undefined;
  const where = file === ':memory:' ? 'an in-memory database' : file;
  try {
    const what = 'doctor --store sqlite';
    const sqlite = await loadOptional(() => import('better-sqlite3'), STORE_PACKAGES.sqlite, what);
    const sql = await loadOptional(() => import('@mrtr/store-sql'), STORE_PACKAGES.sqlite, what);
    // better-sqlite3 is CommonJS (`export =`): under ESM its constructor is the default export.
    const Database = ((sqlite as { default?: unknown }).default ?? sqlite) as unknown as new (
      file: string,
      options?: Record<string, unknown>,
    ) => SqliteDb;
    const exists = file === ':memory:' || existsSync(file);
    db = new Database(exists ? file : ':memory:', { timeout: timeoutMs });
    db.pragma(`busy_timeout = ${timeoutMs}`);
    const before = schemaLine('sql schema', table, sql.checkSqliteSchema(db as never, { table }));
    const schema: Check = before ?? {
      name: 'sql schema',
      status: 'warn',
      detail: exists
        ? `table "${table}" was missing: the store creates it on its first consume (ensureSchema, the default)`
        : `${file} does not exist: the store creates the file and the table when the server starts (check the path); the driver and a consume were checked on an in-memory database instead`,
    };
    add(schema);
    store = sql.createSqliteStore({ database: db as never, table, namespace: 'mrtr-doctor', purgeIntervalMs: 0 });
    const { id, check } = await consumeTwice(store, timeoutMs * 2, 'sqlite');
    check.detail += ` in ${exists ? where : 'an in-memory database'}`;
    add(check);
    try {
      db.prepare(`DELETE FROM "${table}" WHERE ns = ? AND id = ?`).run('mrtr-doctor', id);
    } catch {
      // best effort, like the other stores
    }
    if (before === undefined && exists)
      afterCreation(schema, schemaLine('sql schema', table, sql.checkSqliteSchema(db as never, { table })));
    const mode = String(db.pragma('journal_mode', { simple: true }) ?? '');
    if (exists && file !== ':memory:' && mode.toLowerCase() !== 'wal') {
      add({
        name: 'sqlite mode',
        status: 'warn',
        detail: `journal_mode ${mode}: the store switches a file it opens to WAL; a database you pass it should go through configureSqliteDatabase(db)`,
      });
    }
  } catch (error) {
    add({ name: 'sqlite', status: 'fail', detail: `${where}: ${errorText(error)}` });
  }
  try {
    if (db !== undefined) await checkSqliteTasks(add, db, file, tasksTable, timeoutMs);
  } finally {
    await store?.close().catch(() => {});
    try {
      db?.close();
    } catch {
      // already closed
    }
  }
}

// ── Task stores ──

/** How long the probe task stays readable: long enough for a slow database, short enough to vanish by itself. */
const PROBE_TTL_MS = 10_000;
const TASK_NAMESPACE = 'mrtr-doctor';

/**
 * Creates a probe task (a random id and principal), reads it back, completes it and reads that back: the backend,
 * the permissions the store needs and its schema, through the store the server uses. `where` ends the line:
 * `at redis://…`, `in FILE`.
 */
async function probeTask(
  store: TaskStore,
  name: string,
  where: string,
  timeoutMs: number,
): Promise<{ taskId: string; principal: string; check: Check }> {
  const taskId = `doctor-${randomBytes(16).toString('base64url')}`;
  const principal = `mrtr-doctor-${randomBytes(16).toString('base64url')}`;
  const t = Date.now();
  const record: TaskRecord = {
    taskId,
    principal,
    status: 'working',
    createdAt: t,
    lastUpdatedAt: t,
    ttlMs: PROBE_TTL_MS,
    inputRequests: {},
    askedKeys: [],
  };
  const started = performance.now();
  let step = 'create';
  const fail = (detail: string): { taskId: string; principal: string; check: Check } => ({
    taskId,
    principal,
    check: { name, status: 'fail', detail: `probe task: ${detail} ${where}` },
  });
  try {
    await withTimeout(store.create(record), timeoutMs * 2, name);
    step = 'read';
    const read = await withTimeout(store.get(taskId), timeoutMs, name);
    if (read === undefined) return fail('created, but not readable back');
    if (read.principal !== principal || read.status !== 'working') return fail('created, but read back as another record');
    step = 'update';
    const done = Date.now();
    const updated = await withTimeout(
      store.update(taskId, (r) => ({ ...r, status: 'completed', lastUpdatedAt: Math.max(done, r.lastUpdatedAt), result: { content: [] } })),
      timeoutMs * 2,
      name,
    );
    if (updated?.status !== 'completed')
      return fail(`update answered ${updated === undefined ? 'no task' : `status ${updated.status}`}, not completed`);
    step = 'read back';
    const back = await withTimeout(store.get(taskId), timeoutMs, name);
    if (back?.status !== 'completed')
      return fail(`completed, but read back as ${back === undefined ? 'no task' : `status ${back.status}`}`);
  } catch (error) {
    return fail(`${step} failed: ${errorText(error)}`);
  }
  const ms = performance.now() - started;
  return {
    taskId,
    principal,
    check: { name, status: 'ok', detail: `probe task created, read, completed and read back (${duration(ms)} for all four) ${where}` },
  };
}

/** The installed store package predates task stores: nothing to probe with (warn, the server may not keep tasks). */
const noTaskStore = (name: string, pkg: string, factory: string): Check => ({
  name,
  status: 'warn',
  detail: `not checked: the installed ${pkg} has no ${factory} (a version before task stores); update it if the server keeps tasks there`,
});

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('base64url');

async function checkRedisTasks(add: (c: Check) => void, url: string, timeoutMs: number): Promise<void> {
  const name = 'redis tasks';
  const where = redactUrl(url);
  let store: import('@mrtr/store-redis').RedisTaskStore | undefined;
  try {
    const mod = await loadOptional(() => import('@mrtr/store-redis'), STORE_PACKAGES.redis, 'doctor --store redis');
    if (typeof mod.createRedisTaskStore !== 'function') {
      add(noTaskStore(name, '@mrtr/store-redis', 'createRedisTaskStore'));
      return;
    }
    store = mod.createRedisTaskStore({
      url,
      namespace: TASK_NAMESPACE,
      connectTimeoutMs: timeoutMs,
      commandTimeoutMs: timeoutMs,
      onError: () => {},
    });
    await withTimeout(store.ready(), timeoutMs * 2, name);
    const { taskId, principal, check } = await probeTask(store, name, `at ${where}`, timeoutMs);
    if (check.status === 'fail' && /NOPERM/.test(check.detail)) {
      check.detail +=
        "; the server's Redis user needs +evalsha and +eval (the task store's scripts), +get, +set and +zrem, and inside the scripts +@sortedset, +pexpireat, +getrange and +time";
    }
    add(check);
    // The keys the store wrote (see @mrtr/store-redis's tasks.ts); they expire with the ttl anyway.
    const client = store.client as unknown as { del(...keys: string[]): Promise<number> };
    const tag = `${store.keyPrefix}p:{${sha256(principal)}}`;
    for (const key of [`${store.keyPrefix}t:{${sha256(taskId)}}`, `${tag}:k`, `${tag}:l`]) {
      await withTimeout(client.del(key), timeoutMs, name).catch(() => {});
    }
  } catch (error) {
    add({ name, status: 'fail', detail: `${where}: ${errorText(error)}` });
  } finally {
    await store?.close().catch(() => {});
  }
}

/** Folds the check after the probe into the "table was missing" one. */
function afterCreation(schema: Check, after: Check | undefined): void {
  if (after === undefined) {
    schema.status = 'fail';
    schema.detail += '; it was not created';
  } else {
    if (after.status === 'fail') schema.status = 'fail';
    schema.detail += `; created now: ${after.detail.replace(/^table "[^"]*": /, '')}`;
  }
}

/** The task table's schema on PostgreSQL (the connection's current schema). */
async function pgTaskSchema(sql: StoreSql, pool: PgPool, table: string, timeoutMs: number): Promise<Check | undefined> {
  return schemaLine('task schema', table, await withTimeout(sql.checkPostgresTaskSchema(pool as never, { table }), timeoutMs, 'postgres'));
}

async function checkPostgresTasks(add: (c: Check) => void, pool: PgPool, where: string, table: string, timeoutMs: number): Promise<void> {
  const name = 'postgres tasks';
  let store: import('@mrtr/store-sql').SqlTaskStore | undefined;
  try {
    const mod = await loadOptional(() => import('@mrtr/store-sql'), STORE_PACKAGES.postgres, 'doctor --store postgres');
    if (typeof mod.createPostgresTaskStore !== 'function') {
      add(noTaskStore(name, '@mrtr/store-sql', 'createPostgresTaskStore'));
      return;
    }
    const before = await pgTaskSchema(mod, pool, table, timeoutMs);
    const schema: Check = before ?? {
      name: 'task schema',
      status: 'warn',
      detail: `table "${table}" was missing: the task store creates it at start (ensureSchema, the default), so the server's role needs CREATE on the schema (or create it in a migration)`,
    };
    add(schema);
    store = mod.createPostgresTaskStore({
      pool: pool as never,
      table,
      namespace: TASK_NAMESPACE,
      statementTimeoutMs: timeoutMs,
      connectTimeoutMs: timeoutMs,
      purgeBatchSize: 0,
    });
    const { taskId, check } = await probeTask(store, name, `at ${where}`, timeoutMs);
    add(check);
    await withTimeout(pool.query(`DELETE FROM "${table}" WHERE ns = $1 AND task_id = $2`, [TASK_NAMESPACE, taskId]), timeoutMs, name).catch(
      () => {},
    );
    if (before === undefined) afterCreation(schema, await pgTaskSchema(mod, pool, table, timeoutMs));
  } catch (error) {
    add({ name, status: 'fail', detail: `${where}: ${errorText(error)}` });
  } finally {
    await store?.close().catch(() => {});
  }
}

async function checkSqliteTasks(add: (c: Check) => void, db: SqliteDb, file: string, table: string, timeoutMs: number): Promise<void> {
  const name = 'sqlite tasks';
  const exists = file === ':memory:' || existsSync(file);
  const where = !exists || file === ':memory:' ? 'an in-memory database' : file;
  let store: import('@mrtr/store-sql').SqlTaskStore | undefined;
  try {
    const mod = await loadOptional(() => import('@mrtr/store-sql'), STORE_PACKAGES.sqlite, 'doctor --store sqlite');
    if (typeof mod.createSqliteTaskStore !== 'function') {
      add(noTaskStore(name, '@mrtr/store-sql', 'createSqliteTaskStore'));
      return;
    }
    const before = schemaLine('task schema', table, mod.checkSqliteTaskSchema(db as never, { table }));
    const schema: Check = before ?? {
      name: 'task schema',
      status: 'warn',
      detail: exists
        ? `table "${table}" was missing: the task store creates it at start (ensureSchema, the default), which needs write access to the database file`
        : `${file} does not exist (see sql schema): the task store was checked on an in-memory database instead`,
    };
    add(schema);
    store = mod.createSqliteTaskStore({ database: db as never, table, namespace: TASK_NAMESPACE, purgeBatchSize: 0 });
    const { taskId, check } = await probeTask(store, name, `in ${where}`, timeoutMs);
    add(check);
    try {
      db.prepare(`DELETE FROM "${table}" WHERE ns = ? AND task_id = ?`).run(TASK_NAMESPACE, taskId);
    } catch {
      // best effort, like the other stores
    }
    if (before === undefined && exists)
      afterCreation(schema, schemaLine('task schema', table, mod.checkSqliteTaskSchema(db as never, { table })));
  } catch (error) {
    add({ name, status: 'fail', detail: `${where}: ${errorText(error)}` });
  } finally {
    await store?.close().catch(() => {});
  }
}

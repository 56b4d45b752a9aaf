import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { DATABASE_URL, gateService, K1, KEYS, REDIS_URL, REQUIRE_SERVICES, runCli } from './helpers.js';

gateService('doctor.test.ts', 'REDIS_URL');
gateService('doctor.test.ts', 'DATABASE_URL');

const lines = (stdout: string) => stdout.trimEnd().split('\n');
const suffix = `${process.pid}_${Date.now().toString(36)}`;
const tables: string[] = [];
const table = (name: string) => {
  const t = `cli_doctor_${name}_${suffix}`;
  tables.push(t);
  return t;
};

async function sql(text: string): Promise<void> {
  const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/** The side tables the stores create next to a table: the replay store's outcome budget, ledger epoch and key fingerprints, the task counts. */
const SIDE_TABLES = ['', '_budget', '_epoch', '_keys', '_counts'];

afterAll(async () => {
  if (DATABASE_URL === undefined || tables.length === 0) return;
  await sql(`DROP TABLE IF EXISTS ${tables.flatMap((t) => SIDE_TABLES.map((side) => `"${t}${side}"`)).join(', ')}`);
});

/** The column types of the schema checks' DDL, per dialect (see `@mrtr/store-sql`'s schema.ts). */
const DDL_TYPES = {
  postgres: {
    owner: 'text',
    fp: 'text',
    outcome: 'text',
    lease_until: 'bigint',
    fence: 'integer',
    ns: 'text',
    epoch_ms: 'bigint',
    ms: 'bigint',
  },
  sqlite: {
    owner: 'TEXT',
    fp: 'TEXT',
    outcome: 'TEXT',
    lease_until: 'INTEGER',
    fence: 'INTEGER',
    ns: 'TEXT',
    epoch_ms: 'INTEGER',
    ms: 'INTEGER',
  },
} as const;
type Dialect = keyof typeof DDL_TYPES;
type AddedColumn = 'owner' | 'fp' | 'outcome' | 'lease_until' | 'fence';

/** The `sql schema` warning for a replay table of an earlier version, missing `columns`. */
const missingColumns = (dialect: Dialect, t: string, columns: AddedColumn[]): string =>
  `no ${columns.join(', ')} columns (a table of an earlier version): the store adds them before its first consume (ensureSchema, the default); with ensureSchema: false every consume fails until a migration runs ALTER TABLE "${t}" ${columns.map((c) => `ADD COLUMN ${c} ${DDL_TYPES[dialect][c]}`).join(', ')}`;

/** The `sql schema` warning for a replay table without its epoch table. */
const missingEpoch = (dialect: Dialect, t: string): string =>
  `no table ${t}_epoch (the ledger epoch, of an earlier version): the store creates it before its first consume (ensureSchema, the default); with ensureSchema: false every consume fails until a migration runs CREATE TABLE IF NOT EXISTS "${t}_epoch" (ns ${DDL_TYPES[dialect].ns} NOT NULL, epoch_ms ${DDL_TYPES[dialect].epoch_ms} NOT NULL, PRIMARY KEY (ns))`;

/** The `sql schema` warning for a replay table without its key fingerprint table. */
const missingKeys = (dialect: Dialect, t: string): string => {
  const text = DDL_TYPES[dialect].ns;
  return `no table ${t}_keys (the fleet check's key fingerprints, of an earlier version): the store creates it before its first consume (ensureSchema, the default); with ensureSchema: false the fleet key check (checkKeys) fails until a migration runs CREATE TABLE IF NOT EXISTS "${t}_keys" (ns ${text} NOT NULL, kid ${text} NOT NULL, fp ${text} NOT NULL, expires_at ${DDL_TYPES[dialect].ms} NOT NULL, PRIMARY KEY (ns, kid))`;
};

/** The `sql schema` summary of a replay table as the store makes it. */
const replaySummary = (t: string): string =>
  `columns (ns, id, expires_at, owner, fp, outcome, lease_until, fence), primary key (ns, id), expiry index, epoch table ${t}_epoch (ns, epoch_ms), key fingerprint table ${t}_keys (ns, kid, fp, expires_at)`;

describe('mrtr doctor without services', () => {
  it('memory store: keys and every codec ok, the one-process store warns; exit 0 (1 with --strict)', async () => {
    const r = await runCli(['doctor', '--store', 'memory'], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(0);
    const out = lines(r.stdout);
    expect(out[0]).toBe('ok    keys           2 keys (k2, k1); "k2" seals, all open');
    for (const [i, codec] of ['hmac', 'jwe', 'aead'].entries()) {
      expect(out[i + 1]).toMatch(
        new RegExp(`^ok    codec ${codec} +sealed with "k2" and opened \\(\\d+ characters\\); tokens sealed by "k1" open too$`),
      );
    }
    expect(out[4]).toMatch(/^warn {2}memory +consume of a throwaway id: first accepted, replay refused .*one process only/);
    expect(out[5]).toBe('4 ok, 1 warn, 0 fail');
    const strict = await runCli(['doctor', '--store', 'memory', '--strict'], { env: { MRTR_KEYS: KEYS } });
    expect(strict.code).toBe(1);
  });

  it('defaults to the memory store when neither REDIS_URL nor DATABASE_URL is set; MRTR_CODEC picks a codec', async () => {
    const r = await runCli(['doctor', '--json'], { env: { MRTR_KEYS: K1, MRTR_CODEC: 'aead' } });
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({ ok: true, codecs: ['aead'], stores: ['memory'], counts: { ok: 2, warn: 1, fail: 0 } });
    expect(j.checks.map((c: { name: string }) => c.name)).toEqual(['keys', 'codec aead', 'memory']);
  });

  it('--store none warns that states can be replayed', async () => {
    const r = await runCli(['doctor', '--store', 'none', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/warn +store +none: without a replay store a state can be replayed/);
  });

  it('no MRTR_KEYS → keys fail, codecs skipped, exit 1', async () => {
    const r = await runCli(['doctor', '--store', 'none']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/fail +keys +MRTR_KEYS is not set \(make one with "mrtr keygen"\)/);
    expect(r.stdout).toMatch(/fail +codec jwe +skipped: no valid key ring/);
  });

  it('an invalid MRTR_KEYS → fail with the reasons, no secret printed', async () => {
    const short = Buffer.alloc(20, 7).toString('base64url');
    const r = await runCli(['doctor', '--store', 'none', '--codec', 'hmac'], { env: { MRTR_KEYS: `k1:${short}` } });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/fail +keys +MRTR_KEYS is invalid: k1: secret is 20 bytes; at least 32 are required/);
    expect(r.stdout).not.toContain(short);
  });

  it('a store whose URL is missing fails', async () => {
    const r = await runCli(['doctor', '--store', 'redis,postgres', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/fail +redis +REDIS_URL is not set/);
    expect(r.stdout).toMatch(/fail +postgres +DATABASE_URL is not set/);
  });

  it('unreachable Redis and PostgreSQL fail within the timeout, the password redacted', async () => {
    const port = await freePort();
    const started = Date.now();
    const r = await runCli(['doctor', '--codec', 'hmac', '--timeout-ms', '500'], {
      env: { MRTR_KEYS: KEYS, REDIS_URL: `redis://:hunter2@127.0.0.1:${port}`, DATABASE_URL: `postgres://u:hunter2@127.0.0.1:${port}/db` },
    });
    expect(r.code).toBe(1);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(r.stdout).toMatch(new RegExp(`fail +redis +redis://127.0.0.1:${port}: ERR_STORE_UNAVAILABLE`));
    expect(r.stdout).toMatch(new RegExp(`fail +postgres +postgres://127.0.0.1:${port}/db: `));
    expect(r.stdout).not.toContain('hunter2');
  });

  // Issue 19 item 6: redactUrl masked only the userinfo password, so `?password=` (and `?sslpassword=`, a fragment,
  // the user name) were printed. Now only scheme, host, port and database are, in the text and the JSON output.
  it('store URLs show only scheme, host, port and database: no user, password, query or fragment (issue 19 item 6)', async () => {
    const port = await freePort();
    const secrets = ['hunter2', 'secret', 'sslpassword', 'xsslpw', 'frag', 'alice', '?', '#'];
    const env = {
      MRTR_KEYS: KEYS,
      REDIS_URL: `redis://alice:hunter2@127.0.0.1:${port}/3?password=secret&sslpassword=xsslpw#frag`,
      DATABASE_URL: `postgres://alice:hunter2@127.0.0.1:${port}/db?password=secret&sslpassword=xsslpw#frag`,
    };
    const r = await runCli(['doctor', '--codec', 'hmac', '--timeout-ms', '500'], { env });
    expect(r.code).toBe(1);
    const stores = lines(r.stdout).filter((l) => /^fail {2}(redis|postgres) {2}/.test(l));
    expect(stores).toHaveLength(2);
    // The task store lines name the place the same way.
    const tasks = lines(r.stdout).filter((l) => /^fail {2}(redis|postgres) tasks /.test(l));
    expect(tasks).toHaveLength(2);
    expect(tasks[0]).toMatch(new RegExp(`^fail {2}redis tasks +redis://127\\.0\\.0\\.1:${port}/3: `));
    expect(tasks[1]).toMatch(new RegExp(`^fail {2}postgres tasks postgres://127\\.0\\.0\\.1:${port}/db: `));
    expect(stores[0]).toMatch(new RegExp(`^fail {2}redis +redis://127\\.0\\.0\\.1:${port}/3: `));
    expect(stores[1]).toMatch(new RegExp(`^fail {2}postgres +postgres://127\\.0\\.0\\.1:${port}/db: `));
    const j = await runCli(['doctor', '--codec', 'hmac', '--timeout-ms', '500', '--json'], { env });
    const details = (JSON.parse(j.stdout).checks as { name: string; detail: string }[])
      .filter((c) => c.name === 'redis' || c.name === 'postgres')
      .map((c) => c.detail);
    expect(details).toEqual([
      expect.stringMatching(new RegExp(`^redis://127\\.0\\.0\\.1:${port}/3: `)),
      expect.stringMatching(new RegExp(`^postgres://127\\.0\\.0\\.1:${port}/db: `)),
    ]);
    for (const text of [r.stdout, r.stderr, j.stdout, j.stderr]) for (const secret of secrets) expect(text).not.toContain(secret);
    // An unparsable URL is a fixed placeholder, never the text itself.
    const bad = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--timeout-ms', '500'], {
      env: { MRTR_KEYS: KEYS, DATABASE_URL: 'postgres://alice:hunter2@[bad' },
    });
    expect(bad.stdout).toMatch(/^fail {2}postgres +\(unparsable URL\): /m);
    expect(bad.stdout + bad.stderr).not.toContain('hunter2');
  });

  it.each([
    [['--codec', 'rot13'], {}, /--codec \(or MRTR_CODEC\) must be/],
    [[], { MRTR_CODEC: 'rot13' }, /--codec \(or MRTR_CODEC\) must be/],
    [['--store', 'mongo'], {}, /unknown store "mongo" \(memory, redis, postgres, sqlite, upstash, dynamodb, cloudflare or none\)/],
    [['--table', 'drop table;'], {}, /--table must be/],
    [['--tasks-table', 'drop table;'], {}, /--tasks-table must be letters, digits and _/],
    [['--tasks-table', 't'.repeat(49)], {}, /--tasks-table must be .* at most 48 characters/],
    [['--timeout-ms', '5'], {}, /--timeout-ms must be between 100/],
    [['extra'], {}, /doctor takes no arguments/],
    [[], { MRTR_CLOCK_OFFSET_MS: 'soon' }, /MRTR_CLOCK_OFFSET_MS must be an integer/],
  ])('usage error %# → exit 2', async (args, env, message) => {
    const r = await runCli(['doctor', ...args], { env: { MRTR_KEYS: KEYS, ...env } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
  });
});

describe.skipIf(REDIS_URL === undefined)('mrtr doctor on Redis', () => {
  it('consume, eviction policy, persistence and clock: ok (persistence ok or warn, as the shared Redis is set up)', async () => {
    const r = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS, REDIS_URL: REDIS_URL! } });
    const out = lines(r.stdout);
    expect(out[2]).toMatch(/^ok {4}redis +consume of a throwaway id: first accepted, replay refused \(.+ for both\) at redis:\/\//);
    // The shared Redis of the test environment is expected to be noeviction (anything else fails the run).
    expect(out[3]).toBe('ok    redis policy   maxmemory-policy noeviction: consumed ids are never evicted');
    // Its persistence is the machine's: either answer is pinned (a private redis-server pins each below).
    expect(out[4]).toMatch(
      /^(ok {4}redis persistence (AOF on|RDB snapshots on)|warn {2}redis persistence RDB snapshots and AOF are off: a restart empties the ledger)/,
    );
    expect(out[5]).toMatch(/^ok {4}redis clock +(in step with|\d+ ms (ahead of|behind)) this host \(round trip .+; tolerated 5 s\)$/);
    expect(out[6]).toMatch(/^ok {4}redis tasks +probe task created, read, completed and read back \(.+ for all four\) at redis:\/\//);
    expect(r.code).toBe(0);
  });

  it('a skewed host clock warns past half the skew and fails past it', async () => {
    const warn = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--json'], {
      env: { MRTR_KEYS: KEYS, REDIS_URL: REDIS_URL!, MRTR_CLOCK_OFFSET_MS: '-3500' },
    });
    const clock = (stdout: string) => JSON.parse(stdout).checks.find((c: { name: string }) => c.name === 'redis clock');
    // The estimate moves by up to half a round trip (slow on a loaded machine): assert the band, not the digits.
    expect(clock(warn.stdout)).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(/^\d+(\.\d)? s ahead of this host .*extraRetentionMs/),
    });
    const fail = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--json'], {
      env: { MRTR_KEYS: KEYS, REDIS_URL: REDIS_URL!, MRTR_CLOCK_OFFSET_MS: '60000' },
    });
    expect(clock(fail.stdout)).toMatchObject({ status: 'fail', detail: expect.stringMatching(/^(\d+ s|1m( \d+s)?) behind this host/) });
    expect(fail.code).toBe(1);
  });
});

/** A free TCP port on 127.0.0.1. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

function redisServer(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}
const REDIS_SERVER = redisServer();
if (REDIS_SERVER === undefined) {
  if (REQUIRE_SERVICES) {
    it('redis-server is required (MRTR_REQUIRE_SERVICES=1) for the eviction-policy tests but is not on PATH', () => {
      throw new Error('redis-server must be on PATH when MRTR_REQUIRE_SERVICES=1');
    });
  } else console.warn('[cli] doctor.test.ts: eviction-policy tests skipped because redis-server is not on PATH');
}

describe.skipIf(REDIS_SERVER === undefined)('mrtr doctor on a throwaway redis-server', () => {
  const servers: ChildProcess[] = [];
  // Where a server with persistence writes its files (never the package directory, the tests' cwd); made on first use.
  let dataDir: string | undefined;
  const start = async (...args: string[]): Promise<string> => {
    const port = await freePort();
    dataDir ??= mkdtempSync(join(tmpdir(), 'mrtr-cli-doctor-redis-'));
    const dir = mkdtempSync(join(dataDir, `${port}-`));
    const base = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'];
    const child = spawn(REDIS_SERVER!, [...base, ...args], { stdio: 'ignore' });
    servers.push(child);
    const url = `redis://127.0.0.1:${port}`;
    for (let i = 0; i < 100; i++) {
      const ok = await new Promise<boolean>((resolve) => {
        const socket = connect(port, '127.0.0.1');
        socket.once('connect', () => {
          socket.destroy();
          resolve(true);
        });
        socket.once('error', () => resolve(false));
      });
      if (ok) return url;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('redis-server did not start');
  };
  afterAll(async () => {
    await Promise.all(
      servers.map((s) =>
        s.exitCode !== null || s.signalCode !== null ? undefined : new Promise((r) => s.once('exit', r).kill('SIGKILL')),
      ),
    );
    if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
  });

  it('an evicting maxmemory-policy fails: consumed ids may be evicted, and the store refuses it by default', async () => {
    const url = await start('--maxmemory-policy', 'allkeys-lru');
    const r = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS, REDIS_URL: url } });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^ok {4}redis +consume of a throwaway id/m);
    expect(r.stdout).toMatch(
      /fail +redis policy +maxmemory-policy allkeys-lru: under memory pressure Redis may evict consumed ids .* refuses .* use noeviction/,
    );
    const volatile = await start('--maxmemory-policy', 'volatile-ttl');
    const v = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], {
      env: { MRTR_KEYS: KEYS, REDIS_URL: volatile },
    });
    expect(v.code).toBe(1);
    expect(v.stdout).toMatch(/fail +redis policy +maxmemory-policy volatile-ttl/);
  });

  it('a Redis user without +eval/+evalsha: the task store check fails naming the permissions; the replay check still passes', async () => {
    const url = await start('--user', 'doctor', 'on', '>pw', '~*', '+@all', '-eval', '-evalsha');
    const env = { MRTR_KEYS: KEYS, REDIS_URL: url.replace('redis://', 'redis://doctor:pw@') };
    const r = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^ok {4}redis +consume of a throwaway id/m);
    expect(r.stdout).toMatch(
      /^fail {2}redis tasks +probe task: create failed: ERR_STORE_UNAVAILABLE .*NOPERM .*'evalsha'.* at redis:\/\/127\.0\.0\.1:\d+; the server's Redis user needs \+evalsha and \+eval/m,
    );
    expect(r.stdout).not.toContain(':pw@');
    const j = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--json'], { env });
    expect(JSON.parse(j.stdout).checks.find((c: { name: string }) => c.name === 'redis tasks')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('NOPERM'),
    });
  });

  it('CONFIG refused (managed Redis): the policy is read from INFO memory; an evicting one fails naming it', async () => {
    const url = await start('--rename-command', 'CONFIG', '', '--maxmemory-policy', 'volatile-lru');
    const r = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS, REDIS_URL: url } });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^ok {4}redis +consume of a throwaway id/m);
    expect(r.stdout).toMatch(
      /^fail {2}redis policy +maxmemory-policy volatile-lru: under memory pressure Redis may evict consumed ids .* refuses .* use noeviction$/m,
    );
    // INFO says AOF is off; without CONFIG GET save, and with no snapshot seen, RDB cannot be told.
    expect(r.stdout).toMatch(
      /^warn {2}redis persistence AOF off, RDB snapshots unknown \(INFO persistence does not say, and CONFIG GET save is refused or silent\): check that Redis persists its data/m,
    );
    const safe = await start('--rename-command', 'CONFIG', '');
    const s = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS, REDIS_URL: safe } });
    expect(s.stdout).toMatch(/^ok {4}redis policy +maxmemory-policy noeviction: consumed ids are never evicted$/m);
    expect(s.code).toBe(0);
  });

  it('CONFIG and INFO both refused: the policy is unknown, which fails (the store refuses to consume until it can tell)', async () => {
    const url = await start('--user', 'doctor', 'on', '>pw', '~*', '&*', '+@all', '-config', '-info');
    const env = { MRTR_KEYS: KEYS, REDIS_URL: url.replace('redis://', 'redis://doctor:pw@') };
    const r = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^ok {4}redis +consume of a throwaway id/m);
    expect(r.stdout).toMatch(
      /^fail {2}redis policy +cannot read maxmemory-policy from CONFIG or INFO \(.*NOPERM.*config.*\): the store refuses to consume until it can tell \(evictionPolicyCheck: 'accept-unknown' accepts it once you know it is noeviction\)$/m,
    );
    expect(r.stdout).toMatch(
      /^warn {2}redis persistence cannot read INFO persistence \(.*NOPERM.*info.*\): check that Redis persists its data/m,
    );
    expect(r.stdout).not.toContain(':pw@');
  });

  it('persistence: none warns (a restart empties the ledger); AOF is ok; RDB snapshots alone are ok, naming what they lose', async () => {
    const volatile = await start();
    const v = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--json'], { env: { MRTR_KEYS: KEYS, REDIS_URL: volatile } });
    const line = (stdout: string) => JSON.parse(stdout).checks.find((c: { name: string }) => c.name === 'redis persistence');
    expect(line(v.stdout)).toEqual({
      name: 'redis persistence',
      status: 'warn',
      detail:
        'RDB snapshots and AOF are off: a restart empties the ledger; states minted before it are then refused (ERR_LEDGER_LOST) until they expire. Turn on AOF (appendonly yes) to keep it',
    });
    expect(v.code).toBe(0);
    expect(
      (await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--strict'], { env: { MRTR_KEYS: KEYS, REDIS_URL: volatile } })).code,
    ).toBe(1);
    const aof = await start('--appendonly', 'yes');
    const a = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS, REDIS_URL: aof } });
    expect(lines(a.stdout)).toContain('ok    redis persistence AOF on: a restart keeps the ledger');
    expect(a.code).toBe(0);
    const rdb = await start('--save', '3600 1');
    const b = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--strict'], { env: { MRTR_KEYS: KEYS, REDIS_URL: rdb } });
    expect(lines(b.stdout)).toContain(
      'ok    redis persistence RDB snapshots on, AOF off: a restart keeps the ledger as of the last snapshot (appendonly yes keeps every consume)',
    );
    expect(b.code).toBe(0);
  });
});

describe.skipIf(DATABASE_URL === undefined)('mrtr doctor on PostgreSQL', () => {
  it('a missing table is created by the store (warn: the role needs CREATE); then ok', async () => {
    const t = table('fresh');
    const tt = table('fresh_tasks');
    const env = { MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL! };
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'jwe', '--table', t, '--tasks-table', tt], { env });
    expect(r.code).toBe(0);
    const out = lines(r.stdout);
    expect(out[2]).toMatch(
      new RegExp(
        `^warn  sql schema +table "${t}" was missing: the store creates it on its first consume .*; created now: columns \\(ns, id, expires_at, owner, fp, outcome, lease_until, fence\\), primary key \\(ns, id\\), expiry index, epoch table ${t}_epoch \\(ns, epoch_ms\\), key fingerprint table ${t}_keys \\(ns, kid, fp, expires_at\\)$`,
      ),
    );
    expect(out[3]).toMatch(/^ok {4}postgres +consume of a throwaway id: first accepted, replay refused .* at postgres:\/\//);
    expect(out[4]).toMatch(/^ok {4}sql clock +.* this host \(round trip .*; tolerated 5 s\)$/);
    const again = await runCli(['doctor', '--store', 'postgres', '--codec', 'jwe', '--table', t, '--tasks-table', tt], { env });
    expect(again.code).toBe(0);
    expect(lines(again.stdout)[2]).toMatch(
      new RegExp(
        `^ok    sql schema +table "${t}": columns \\(ns, id, expires_at, owner, fp, outcome, lease_until, fence\\), primary key \\(ns, id\\), expiry index, epoch table ${t}_epoch \\(ns, epoch_ms\\), key fingerprint table ${t}_keys \\(ns, kid, fp, expires_at\\)$`,
      ),
    );
    expect(lines(again.stdout).at(-1)).toBe('7 ok, 0 warn, 0 fail');
  });

  it('a table without its primary key fails (single use is not enforced); without the expiry index warns', async () => {
    const noPk = table('nopk');
    await sql(`CREATE TABLE "${noPk}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL)`);
    const env = { MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL! };
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', noPk, '--json'], { env });
    expect(r.code).toBe(1);
    const checks = JSON.parse(r.stdout).checks as { name: string; status: string; detail: string }[];
    expect(checks.find((c) => c.name === 'sql schema')).toMatchObject({
      status: 'fail',
      detail: expect.stringContaining('no PRIMARY KEY (ns, id): single use is not enforced'),
    });
    const noIndex = table('noidx');
    await sql(`CREATE TABLE "${noIndex}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, id))`);
    const w = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', noIndex], { env });
    expect(w.stdout).toMatch(/warn +sql schema +table ".*": no index on expires_at/);
    const wrongType = table('wrongtype');
    await sql(`CREATE TABLE "${wrongType}" (ns text NOT NULL, id text NOT NULL, expires_at integer NOT NULL, PRIMARY KEY (ns, id))`);
    const f = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', wrongType], { env });
    expect(f.code).toBe(1);
    expect(f.stdout).toMatch(/column expires_at is integer, not bigint/);
  });

  it('a table of an earlier version (no owner, fp, outcome, lease_until, fence columns, no epoch table) warns with the migration; the store adds them', async () => {
    const old = table('noowner');
    await sql(`CREATE TABLE "${old}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, id))`);
    await sql(`CREATE INDEX "${old}_exp" ON "${old}" (expires_at)`);
    const env = { MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL! };
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', old], { env });
    expect(r.code).toBe(0);
    expect(lines(r.stdout)[2]).toBe(
      `warn  sql schema     table "${old}": ${missingColumns('postgres', old, ['owner', 'fp', 'outcome', 'lease_until', 'fence'])}; ${missingEpoch('postgres', old)}; ${missingKeys('postgres', old)}`,
    );
    const again = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', old], { env });
    expect(lines(again.stdout)[2]).toBe(`ok    sql schema     table "${old}": ${replaySummary(old)}`);
    // The version before outcome recording: owner but no fp and outcome.
    const noOutcome = table('nooutcome');
    await sql(
      `CREATE TABLE "${noOutcome}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, PRIMARY KEY (ns, id))`,
    );
    await sql(`CREATE INDEX "${noOutcome}_exp" ON "${noOutcome}" (expires_at)`);
    const w = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', noOutcome], { env });
    expect(lines(w.stdout)[2]).toBe(
      `warn  sql schema     table "${noOutcome}": ${missingColumns('postgres', noOutcome, ['fp', 'outcome', 'lease_until', 'fence'])}; ${missingEpoch('postgres', noOutcome)}; ${missingKeys('postgres', noOutcome)}`,
    );
    const wrongOwner = table('wrongowner');
    await sql(
      `CREATE TABLE "${wrongOwner}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner bytea, PRIMARY KEY (ns, id))`,
    );
    const f = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', wrongOwner], { env });
    expect(f.code).toBe(1);
    expect(f.stdout).toMatch(/column owner is bytea, not text/);
  });

  it('the version before leases and the epoch (owner, fp, outcome): warns naming lease_until, fence and the epoch table; then ok', async () => {
    const env = { MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL! };
    const before = table('nolease');
    await sql(
      `CREATE TABLE "${before}" (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, fp text, outcome text, PRIMARY KEY (ns, id))`,
    );
    await sql(`CREATE INDEX "${before}_exp" ON "${before}" (expires_at)`);
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', before], { env });
    expect(r.code).toBe(0);
    expect(lines(r.stdout)[2]).toBe(
      `warn  sql schema     table "${before}": ${missingColumns('postgres', before, ['lease_until', 'fence'])}; ${missingEpoch('postgres', before)}; ${missingKeys('postgres', before)}`,
    );
    expect(lines(r.stdout)[3]).toMatch(/^ok {4}postgres +consume of a throwaway id: first accepted, replay refused/);
    const again = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', before, '--strict'], { env });
    expect(lines(again.stdout)[2]).toBe(`ok    sql schema     table "${before}": ${replaySummary(before)}`);
    expect(again.code).toBe(0);
  });

  it('the epoch table alone missing warns with its CREATE TABLE; an epoch table without its primary key fails', async () => {
    const env = { MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL! };
    const columns =
      'ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, fp text, outcome text, lease_until bigint, fence integer, PRIMARY KEY (ns, id)';
    const noEpoch = table('noepoch');
    await sql(`CREATE TABLE "${noEpoch}" (${columns})`);
    await sql(`CREATE INDEX "${noEpoch}_exp" ON "${noEpoch}" (expires_at)`);
    await sql(
      `CREATE TABLE "${noEpoch}_keys" (ns text NOT NULL, kid text NOT NULL, fp text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, kid))`,
    );
    const w = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', noEpoch], { env });
    expect(w.code).toBe(0);
    expect(lines(w.stdout)[2]).toBe(`warn  sql schema     table "${noEpoch}": ${missingEpoch('postgres', noEpoch)}`);
    const badEpoch = table('badepoch');
    await sql(`CREATE TABLE "${badEpoch}" (${columns})`);
    await sql(`CREATE INDEX "${badEpoch}_exp" ON "${badEpoch}" (expires_at)`);
    await sql(`CREATE TABLE "${badEpoch}_epoch" (ns text NOT NULL, epoch_ms bigint NOT NULL)`);
    const f = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', badEpoch], { env });
    expect(f.code).toBe(1);
    expect(lines(f.stdout)[2]).toBe(
      `fail  sql schema     table "${badEpoch}": ${badEpoch}_epoch: no PRIMARY KEY (ns): the ledger epoch is not one per namespace`,
    );
  });

  it('a skewed host clock fails the SQL clock check', async () => {
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--table', table('clock'), '--skew-ms', '1000'], {
      env: { MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL!, MRTR_CLOCK_OFFSET_MS: '-5000' },
    });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/fail +sql clock +\d+(\.\d)? s ahead of this host .*tolerated 1 s\); the SQL store judges expiry/);
  });
});

describe.skipIf(DATABASE_URL === undefined)('mrtr doctor: the PostgreSQL task store', () => {
  const env = () => ({ MRTR_KEYS: KEYS, DATABASE_URL: DATABASE_URL! });
  const count = async (t: string): Promise<number> => {
    const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 5000 });
    await client.connect();
    try {
      return Number((await client.query(`SELECT count(*) AS n FROM "${t}"`)).rows[0].n);
    } finally {
      await client.end();
    }
  };

  it('a missing task table is created by the store on first use (warn: the role needs CREATE); the probe passes and leaves no row; then ok', async () => {
    const tt = table('tasks_fresh');
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--tasks-table', tt], { env: env() });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^warn {2}task schema +table "${tt}" was missing: the task store creates it at start \\(ensureSchema, the default\\), so the server's role needs CREATE on the schema \\(or create it in a migration\\); created now: columns \\(ns, task_id, principal, live, version, expires_at, record\\), primary key \\(ns, task_id\\), principal and expiry indexes$`,
        'm',
      ),
    );
    expect(r.stdout).toMatch(
      /^ok {4}postgres tasks probe task created, read, completed and read back \(.+ for all four\) at postgres:\/\/127\.0\.0\.1:\d+\/\w+$/m,
    );
    expect(await count(tt)).toBe(0);
    const again = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--tasks-table', tt, '--json'], { env: env() });
    expect(again.code).toBe(0);
    const checks = JSON.parse(again.stdout).checks as { name: string; status: string; detail: string }[];
    expect(checks.slice(-2)).toEqual([
      {
        name: 'task schema',
        status: 'ok',
        detail: `table "${tt}": columns (ns, task_id, principal, live, version, expires_at, record), primary key (ns, task_id), principal and expiry indexes`,
      },
      { name: 'postgres tasks', status: 'ok', detail: expect.stringMatching(/^probe task created, read, completed and read back/) },
    ]);
  });

  it('a task table missing a column fails naming it (and the probe fails); one without its indexes warns with the CREATE INDEX', async () => {
    const broken = table('tasks_norecord');
    await sql(
      `CREATE TABLE "${broken}" (ns text NOT NULL, task_id text NOT NULL, principal text NOT NULL, live boolean NOT NULL, version bigint NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, task_id))`,
    );
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--tasks-table', broken], { env: env() });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(new RegExp(`^fail {2}task schema +table "${broken}": column record is missing$`, 'm'));
    expect(r.stdout).toMatch(/^fail {2}postgres tasks probe task: create failed: ERR_STORE_UNAVAILABLE .*record/m);

    const wrongType = table('tasks_wrongtype');
    await sql(
      `CREATE TABLE "${wrongType}" (ns text NOT NULL, task_id text NOT NULL, principal text NOT NULL, live integer NOT NULL, version bigint NOT NULL, expires_at bigint NOT NULL, record text, PRIMARY KEY (ns, task_id))`,
    );
    const w = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--tasks-table', wrongType], { env: env() });
    expect(w.code).toBe(1);
    expect(w.stdout).toMatch(
      new RegExp(`^fail {2}task schema +table "${wrongType}": column live is integer, not boolean; column record allows NULL$`, 'm'),
    );

    const noIndex = table('tasks_noidx');
    await sql(
      `CREATE TABLE "${noIndex}" (ns text NOT NULL, task_id text NOT NULL, principal text NOT NULL, live boolean NOT NULL, version bigint NOT NULL, expires_at bigint NOT NULL, record text NOT NULL, PRIMARY KEY (ns, task_id))`,
    );
    const i = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--tasks-table', noIndex], { env: env() });
    expect(i.code).toBe(0);
    expect(i.stdout).toMatch(
      new RegExp(
        `^warn {2}task schema +table "${noIndex}": no index on \\(ns, principal, expires_at\\) .*CREATE INDEX "${noIndex}_principal_idx" ON "${noIndex}" \\(ns, principal, expires_at\\); no index on expires_at .*CREATE INDEX "${noIndex}_expires_at_idx" ON "${noIndex}" \\(expires_at\\)$`,
        'm',
      ),
    );
    expect(i.stdout).toMatch(/^ok {4}postgres tasks probe task created/m);
  });
});

describe.skipIf(REDIS_URL === undefined || DATABASE_URL === undefined)('mrtr doctor with the full server environment', () => {
  it('REDIS_URL and DATABASE_URL both set: both stores are checked by default', async () => {
    const env = { MRTR_KEYS: KEYS, REDIS_URL: REDIS_URL!, DATABASE_URL: DATABASE_URL! };
    const args = ['doctor', '--table', table('both'), '--tasks-table', table('both_tasks')];
    const names = [
      'keys',
      'codec hmac',
      'codec jwe',
      'codec aead',
      'redis',
      'redis policy',
      'redis persistence',
      'redis clock',
      'redis tasks',
      'sql schema',
      'postgres',
      'sql clock',
      'task schema',
      'postgres tasks',
    ];
    const r = await runCli(args, { env });
    // A name longer than the column (redis persistence) is followed by one space.
    expect(
      lines(r.stdout)
        .slice(0, -1)
        .map((l) => /^(ok|warn|fail) +(\S+(?: \S+)?) /.exec(l)?.[2]),
    ).toEqual(names);
    expect(r.stdout).not.toMatch(/^fail/m);
    const j = JSON.parse((await runCli([...args, '--json'], { env })).stdout) as { checks: { name: string; status: string }[] };
    expect(j.checks.map((c) => c.name)).toEqual(names);
    expect(j.checks.filter((c) => c.status === 'fail')).toEqual([]);
  });

  // A store on its own clock refuses an expiry at or before it (ERR_STATE_EXPIRED): the throwaway id's expiry is read
  // from the store's clock, so a host two minutes behind still checks single use (and its clock lines fail).
  it('a host whose clock is 2 min behind: every consume still checks single use, on the store clock; the clock lines fail', async () => {
    const preload = new URL('./fixtures/skewed-clock.mjs', import.meta.url).href;
    const r = await runCli(
      ['doctor', '--codec', 'hmac', '--store', 'memory,redis,postgres,sqlite', '--sqlite-file', ':memory:', '--table', table('skew')],
      {
        env: {
          MRTR_KEYS: KEYS,
          REDIS_URL: REDIS_URL!,
          DATABASE_URL: DATABASE_URL!,
          NODE_OPTIONS: `--import=${preload}`,
          MRTR_TEST_CLOCK_SKEW_MS: '-120000',
        },
      },
    );
    expect(r.code).toBe(1);
    for (const store of ['redis', 'postgres', 'sqlite'])
      expect(r.stdout).toMatch(new RegExp(`^ok {4}${store} +consume of a throwaway id: first accepted, replay refused`, 'm'));
    expect(r.stdout).toMatch(/^warn {2}memory +consume of a throwaway id: first accepted, replay refused/m);
    expect(r.stdout).toMatch(/^fail {2}redis clock +(1m \d+s|2m( \d+s)?) ahead of this host/m);
    expect(r.stdout).toMatch(/^fail {2}sql clock +(1m \d+s|2m( \d+s)?) ahead of this host/m);
    expect(r.stdout).not.toMatch(/ERR_STATE_EXPIRED/);
  });
});

describe('mrtr doctor on SQLite (--store sqlite)', () => {
  // Made on first use: a run that skips these tests (a -t filter) runs no afterAll here, and leaves nothing.
  let dir: string | undefined;
  afterAll(() => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });
  const file = (name: string) => join((dir ??= mkdtempSync(join(tmpdir(), 'mrtr-cli-doctor-sqlite-'))), `${name}.sqlite`);
  const run = (args: string[], env: Record<string, string> = {}) =>
    runCli(['doctor', '--codec', 'hmac', ...args], { env: { MRTR_KEYS: KEYS, ...env } });
  /** A database file prepared with `setup` (WAL, as the store leaves a file it owns). */
  const prepared = (name: string, setup: string) => {
    const path = file(name);
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.exec(setup);
    db.close();
    return path;
  };

  it('a new file: the table is created as the store would, then the same file checks clean', async () => {
    const path = prepared('fresh', 'SELECT 1');
    const r = await run(['--store', 'sqlite', '--sqlite-file', path]);
    expect(r.code).toBe(0);
    const out = lines(r.stdout);
    expect(out[2]).toMatch(
      /^warn {2}sql schema +table "mrtr_replay" was missing: the store creates it on its first consume .*; created now: /,
    );
    expect(out[2]!.endsWith(`; created now: ${replaySummary('mrtr_replay')}`)).toBe(true);
    expect(out[3]).toMatch(
      new RegExp(`^ok {4}sqlite +consume of a throwaway id: first accepted, replay refused \\(.*\\) in ${path.replaceAll('.', '\\.')}$`),
    );
    expect(out[4]).toMatch(
      /^warn {2}task schema +table "mrtr_tasks" was missing: the task store creates it at start \(ensureSchema, the default\), which needs write access to the database file; created now: columns \(ns, task_id, principal, live, version, expires_at, record\), primary key \(ns, task_id\), principal and expiry indexes$/,
    );
    expect(out[5]).toMatch(/^ok {4}sqlite tasks +probe task created, read, completed and read back/);
    const again = await run(['--store', 'sqlite', '--sqlite-file', path, '--strict']);
    expect(again.code).toBe(0);
    expect(lines(again.stdout).slice(2)).toEqual([
      `ok    sql schema     table "mrtr_replay": ${replaySummary('mrtr_replay')}`,
      expect.stringMatching(/^ok {4}sqlite +consume of a throwaway id/),
      'ok    task schema    table "mrtr_tasks": columns (ns, task_id, principal, live, version, expires_at, record), primary key (ns, task_id), principal and expiry indexes',
      expect.stringMatching(
        new RegExp(
          `^ok {4}sqlite tasks +probe task created, read, completed and read back \\(.+ for all four\\) in ${path.replaceAll('.', '\\.')}$`,
        ),
      ),
      '6 ok, 0 warn, 0 fail',
    ]);
    // The throwaway ids and the probe tasks are gone again.
    const db = new Database(path, { readonly: true });
    expect(db.prepare('SELECT count(*) AS n FROM mrtr_replay').get()).toEqual({ n: 0 });
    expect(db.prepare('SELECT count(*) AS n FROM mrtr_tasks').get()).toEqual({ n: 0 });
    db.close();
  });

  it('MRTR_SQLITE_FILE selects the store by default and names the file; --table picks the table', async () => {
    const path = prepared('env', 'SELECT 1');
    const r = await run(['--table', 'replay_ids', '--json'], { MRTR_SQLITE_FILE: path });
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout) as { stores: string[]; checks: { name: string; status: string; detail: string }[] };
    expect(report.stores).toEqual(['sqlite']);
    expect(report.checks.find((c) => c.name === 'sqlite')?.status).toBe('ok');
    expect(report.checks.find((c) => c.name === 'sql schema')?.detail).toMatch(/^table "replay_ids" was missing/);
    expect(report.checks.find((c) => c.name === 'sqlite tasks')?.status).toBe('ok');
  });

  it('--tasks-table picks the task table; a task table missing a column fails naming it', async () => {
    const path = prepared(
      'tasks-broken',
      'CREATE TABLE job_tasks (ns TEXT NOT NULL, task_id TEXT NOT NULL, live INTEGER NOT NULL, version INTEGER NOT NULL, expires_at INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (ns, task_id))',
    );
    const r = await run(['--store', 'sqlite', '--sqlite-file', path, '--tasks-table', 'job_tasks']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^fail {2}task schema +table "job_tasks": column principal is missing$/m);
    expect(r.stdout).toMatch(/^fail {2}sqlite tasks +probe task: create failed: ERR_STORE_UNAVAILABLE .*principal/m);
    expect(r.stdout).toMatch(/^ok {4}sqlite +consume of a throwaway id/m);
  });

  it('a file that does not exist is not created: the driver and a consume are checked in memory (warn)', async () => {
    const path = file('missing');
    const r = await run(['--store', 'sqlite', '--sqlite-file', path]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^warn {2}sql schema +.*missing\.sqlite does not exist: the store creates the file and the table when the server starts \(check the path\)/m,
    );
    expect(r.stdout).toMatch(/^ok {4}sqlite +consume of a throwaway id: first accepted, replay refused .* in an in-memory database$/m);
    expect(r.stdout).toMatch(
      /^warn {2}task schema +.*missing\.sqlite does not exist \(see sql schema\): the task store was checked on an in-memory database instead$/m,
    );
    expect(r.stdout).toMatch(/^ok {4}sqlite tasks +probe task created, read, completed and read back .* in an in-memory database$/m);
    expect(existsSync(path)).toBe(false);
    expect((await run(['--store', 'sqlite', '--sqlite-file', path, '--strict'])).code).toBe(1);
  });

  it('without a file: fail, naming --sqlite-file and MRTR_SQLITE_FILE', async () => {
    const r = await run(['--store', 'sqlite']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^fail {2}sqlite +no database file: pass --sqlite-file PATH \(or set MRTR_SQLITE_FILE\)$/m);
  });

  it('schema problems: no primary key fails, missing owner/fp/outcome/lease_until/fence columns and epoch table warn with the migration, a rollback journal warns', async () => {
    const noPk = prepared('nopk', 'CREATE TABLE mrtr_replay (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, owner TEXT)');
    const f = await run(['--store', 'sqlite', '--sqlite-file', noPk]);
    expect(f.code).toBe(1);
    expect(f.stdout).toMatch(/^fail {2}sql schema +table "mrtr_replay": no PRIMARY KEY \(ns, id\): single use is not enforced$/m);
    expect(f.stdout).toMatch(/^fail {2}sqlite +.*nopk\.sqlite: ERR_STORE_UNAVAILABLE /m);

    const old = prepared(
      'old',
      'CREATE TABLE mrtr_replay (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (ns, id)); CREATE INDEX mrtr_replay_exp ON mrtr_replay (expires_at)',
    );
    const w = await run(['--store', 'sqlite', '--sqlite-file', old]);
    expect(w.code).toBe(0);
    expect(lines(w.stdout)[2]).toBe(
      `warn  sql schema     table "mrtr_replay": ${missingColumns('sqlite', 'mrtr_replay', ['owner', 'fp', 'outcome', 'lease_until', 'fence'])}; ${missingEpoch('sqlite', 'mrtr_replay')}; ${missingKeys('sqlite', 'mrtr_replay')}`,
    );
    expect(w.stdout).toMatch(/^ok {4}sqlite +consume of a throwaway id/m);

    // The version before leases and the epoch: outcomes, but no lease_until, fence or epoch table; the store adds them.
    const noLease = prepared(
      'nolease',
      'CREATE TABLE mrtr_replay (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, owner TEXT, fp TEXT, outcome TEXT, PRIMARY KEY (ns, id)); CREATE INDEX mrtr_replay_exp ON mrtr_replay (expires_at)',
    );
    const l = await run(['--store', 'sqlite', '--sqlite-file', noLease]);
    expect(l.code).toBe(0);
    expect(lines(l.stdout)[2]).toBe(
      `warn  sql schema     table "mrtr_replay": ${missingColumns('sqlite', 'mrtr_replay', ['lease_until', 'fence'])}; ${missingEpoch('sqlite', 'mrtr_replay')}; ${missingKeys('sqlite', 'mrtr_replay')}`,
    );
    expect(lines(l.stdout)[3]).toMatch(/^ok {4}sqlite +consume of a throwaway id/);
    const added = await run(['--store', 'sqlite', '--sqlite-file', noLease]);
    expect(lines(added.stdout)[2]).toBe(`ok    sql schema     table "mrtr_replay": ${replaySummary('mrtr_replay')}`);

    const rollback = file('rollback');
    new Database(rollback).close();
    const j = await run(['--store', 'sqlite', '--sqlite-file', rollback]);
    expect(j.stdout).toMatch(
      /^warn {2}sqlite mode +journal_mode delete: the store switches a file it opens to WAL; a database you pass it should go through configureSqliteDatabase\(db\)$/m,
    );
  });
});

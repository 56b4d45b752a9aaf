import { createStateGuard, KeyRing } from '@mrtr/core';
import { CODECS, type CodecName, codecFactory } from '../codecs.js';
import {
  colourEnabled,
  EXIT_BAD,
  EXIT_OK,
  intValue,
  type Io,
  parseCommand,
  statusLine,
  style,
  UsageError,
  writeJson,
  writeLines,
} from '../io.js';
import { checkRing, DEFAULT_SKEW_MS, splitEntries } from '../keys.js';
import type { Settings } from './backend.js';
import { BACKENDS, type StoreName, STORES } from './backends.js';
import { type Add, type Check, errorText, setClockOffset } from './common.js';
import { checkBackend } from './probes.js';

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
  redis clock   Redis TIME against this host (Redis expires ids by its own clock); upstash clock the same over REST;
                dynamodb clock DynamoDB's clock as the store reads it from its replies' Date headers
  sql schema    the table's columns (lease_until and fence too), primary key (ns, id), expiry index, its epoch
                table TABLE_epoch and its key fingerprint table TABLE_keys (PostgreSQL and SQLite)
  sql clock     the database clock against this host (PostgreSQL)
  dynamodb table
                the table exists, partition key pk (string) and no sort key (fails otherwise), the heavy index
                (hv, hk) the task store uses (warns without it), its TTL
  STORE epoch   the ledger epoch of the probes' namespace and how long ago it began (upstash, dynamodb, cloudflare)
  STORE tasks   the task store on the same backend: a probe task (its own namespace, a random principal, a
                10 s ttl) created, read back, completed and read back, then removed
  task schema   the task table's columns, primary key (ns, task_id) and indexes (PostgreSQL and SQLite)

Upstash's eviction policy and persistence cannot be read over REST: check in its console that eviction is off.
A cloudflare store (a Durable Object) exists only inside its Worker: the doctor checks it through the Worker's
doctor route (createDoctorRoute of @mrtr/store-cloudflare) at MRTR_DOCTOR_URL, with MRTR_DOCTOR_TOKEN: the
consume, the Durable Objects' clock and the ledger epoch, each the store's own answer (no task probe).

Environment: MRTR_KEYS (required), REDIS_URL, DATABASE_URL, MRTR_SQLITE_FILE, UPSTASH_REDIS_REST_URL and
UPSTASH_REDIS_REST_TOKEN (or KV_REST_API_URL and KV_REST_API_TOKEN), MRTR_DYNAMODB_TABLE with the AWS SDK's
(AWS_REGION, credentials, AWS_ENDPOINT_URL_DYNAMODB), MRTR_DOCTOR_URL and MRTR_DOCTOR_TOKEN, MRTR_CODEC, MRTR_STORE.
The stores' packages are optional: redis needs @mrtr/store-redis and ioredis, postgres @mrtr/store-sql
and pg, sqlite @mrtr/store-sql and better-sqlite3, upstash @mrtr/store-upstash and @upstash/redis,
dynamodb @mrtr/store-dynamodb and @aws-sdk/client-dynamodb, installed next to @mrtr/cli; cloudflare needs
MRTR_DOCTOR_URL and MRTR_DOCTOR_TOKEN (and nothing installed here).

Options:
  --codec NAME    hmac, jwe, aead or all (default: MRTR_CODEC, else all)
  --store NAME    memory, redis, postgres, sqlite, upstash, dynamodb, cloudflare or none; repeatable as a comma
                  list (default: MRTR_STORE, else each store whose setting is in the environment: redis for
                  REDIS_URL, postgres for DATABASE_URL, sqlite for MRTR_SQLITE_FILE, upstash for
                  UPSTASH_REDIS_REST_URL, dynamodb for MRTR_DYNAMODB_TABLE, cloudflare for MRTR_DOCTOR_URL;
                  else memory)
  --table NAME    the SQL store's table (default mrtr_replay)
  --tasks-table NAME  the SQL task store's table (default mrtr_tasks)
  --sqlite-file PATH  the SQLite store's database file (default: MRTR_SQLITE_FILE)
  --dynamodb-table NAME  the DynamoDB stores' table (default: MRTR_DYNAMODB_TABLE)
  --skew-ms MS    the guard's clockSkewMs: a store clock further off fails, half of it warns (default ${DEFAULT_SKEW_MS})
  --timeout-ms MS longest wait for a store to connect or answer (default 5000)
  --strict        exit 1 on a warning too
  --json          print the checks as JSON
  -h, --help      this help

Exit codes: 0 no check failed, 1 a check failed (or warned, with --strict), 2 usage error.
`;

const nonEmpty = (text: string | undefined): string | undefined => (text === '' ? undefined : text);
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

function identifier(flag: string, value: unknown, fallback: string): string {
  const text = (value as string | undefined) ?? fallback;
  if (!IDENTIFIER.test(text))
    throw new UsageError(`${flag} must be letters, digits and _, starting with a letter or _, at most 48 characters`);
  return text;
}

function settingsOf(env: NodeJS.ProcessEnv, values: Record<string, unknown>): Settings {
  const dynamoTable = nonEmpty((values['dynamodb-table'] as string | undefined) ?? env.MRTR_DYNAMODB_TABLE);
  if (dynamoTable !== undefined && !/^[A-Za-z0-9_.-]{3,255}$/.test(dynamoTable))
    throw new UsageError('--dynamodb-table (or MRTR_DYNAMODB_TABLE) must be 3 to 255 letters, digits, _, - and .');
  return {
    env,
    redisUrl: nonEmpty(env.REDIS_URL),
    databaseUrl: nonEmpty(env.DATABASE_URL),
    sqliteFile: nonEmpty((values['sqlite-file'] as string | undefined) ?? env.MRTR_SQLITE_FILE),
    upstashUrl: nonEmpty(env.UPSTASH_REDIS_REST_URL) ?? nonEmpty(env.KV_REST_API_URL),
    upstashToken: nonEmpty(env.UPSTASH_REDIS_REST_TOKEN) ?? nonEmpty(env.KV_REST_API_TOKEN),
    dynamoTable,
    doctorUrl: nonEmpty(env.MRTR_DOCTOR_URL),
    doctorToken: nonEmpty(env.MRTR_DOCTOR_TOKEN),
    table: identifier('--table', values.table, 'mrtr_replay'),
    tasksTable: identifier('--tasks-table', values['tasks-table'], 'mrtr_tasks'),
    skewMs: intValue('skew-ms', values['skew-ms'] as string | undefined, DEFAULT_SKEW_MS, 0, 600_000),
    timeoutMs: intValue('timeout-ms', values['timeout-ms'] as string | undefined, 5000, 100, 120_000),
  };
}

/** The stores to check: `--store`/`MRTR_STORE`, else those the environment names, else memory. */
function storesOf(text: string | undefined, s: Settings): StoreName[] {
  if (text === undefined || text === '') {
    const named = STORES.filter((name) => BACKENDS[name].byDefault?.(s) === true);
    return named.length === 0 ? ['memory'] : named;
  }
  if (text === 'none') return [];
  const names = text.split(',').map((n) => n.trim());
  for (const n of names) {
    if (!(STORES as readonly string[]).includes(n))
      throw new UsageError(`--store (or MRTR_STORE): unknown store "${n}" (${STORES.join(', ')} or none)`);
  }
  return [...new Set(names as StoreName[])];
}

function codecsOf(text: string): CodecName[] {
  if (text !== 'all' && !(CODECS as readonly string[]).includes(text))
    throw new UsageError('--codec (or MRTR_CODEC) must be hmac, jwe, aead or all');
  return text === 'all' ? [...CODECS] : [text as CodecName];
}

function clockOffsetOf(offset: string | undefined): number {
  if (offset === undefined || offset === '') return 0;
  if (!/^-?\d{1,10}$/.test(offset)) throw new UsageError('MRTR_CLOCK_OFFSET_MS must be an integer (milliseconds)');
  return Number(offset);
}

/** The `keys` line; the ring when it is valid. */
function keysLine(keysText: string | undefined, add: Add): KeyRing | undefined {
  if (keysText === undefined || keysText.trim() === '') {
    add({ name: 'keys', status: 'fail', detail: 'MRTR_KEYS is not set (make one with "mrtr keygen")' });
    return undefined;
  }
  const report = checkRing(keysText.trim());
  if (!report.ok) {
    const reasons = [...report.problems, ...report.entries.flatMap((e) => e.problems.map((p) => `${e.kid ?? `entry ${e.index}`}: ${p}`))];
    add({ name: 'keys', status: 'fail', detail: `MRTR_KEYS is invalid: ${reasons.join('; ')}` });
    return undefined;
  }
  const ring = KeyRing.parse(keysText);
  const detail = `${ring.kids.length} key${ring.kids.length === 1 ? '' : 's'} (${ring.kids.join(', ')}); "${ring.primaryKid}" seals, all open`;
  const warned = report.warnings.length > 0;
  add({ name: 'keys', status: warned ? 'warn' : 'ok', detail: warned ? `${detail}; ${report.warnings.join('; ')}` : detail });
  return ring;
}

const REQUEST = { method: 'tools/call', target: 'mrtr-doctor', arguments: { check: true }, principal: 'mrtr-doctor' };

/** A seal/open round trip through the guard with one codec; and every other key's tokens open. */
async function codecLine(name: CodecName, ring: KeyRing, keysText: string): Promise<Check> {
  const label = `codec ${name}`;
  try {
    const factory = await codecFactory(name);
    const guard = createStateGuard({ keys: ring, codec: factory, audience: 'mrtr-doctor' });
    const token = await guard.mint({ doctor: true }, REQUEST);
    const opened = await guard.verify(token, REQUEST);
    if (opened.kid !== ring.primaryKid) throw new Error(`sealed with "${opened.kid}", not the primary`);
    const others: string[] = [];
    for (const entry of splitEntries(keysText.trim()).slice(1)) {
      const single = new KeyRing([entry]);
      const other = await createStateGuard({ keys: single, codec: factory, audience: 'mrtr-doctor' }).mint({ doctor: true }, REQUEST);
      const back = await guard.verify(other, REQUEST);
      if (back.kid !== entry.kid) throw new Error(`a token of "${entry.kid}" opened as "${back.kid}"`);
      others.push(entry.kid);
    }
    const also = others.length === 0 ? '' : `; tokens sealed by ${others.map((k) => `"${k}"`).join(', ')} open too`;
    return { name: label, status: 'ok', detail: `sealed with "${ring.primaryKid}" and opened (${token.length} characters)${also}` };
  } catch (error) {
    return { name: label, status: 'fail', detail: `round trip failed: ${errorText(error)}` };
  }
}

/** Prints the report; the exit code. */
function report(io: Io, checks: Check[], strict: boolean, json: boolean, summary: { codecs: CodecName[]; stores: StoreName[] }): number {
  const counts = { ok: 0, warn: 0, fail: 0, info: 0 };
  for (const c of checks) counts[c.status]++;
  const failed = counts.fail > 0 || (strict && counts.warn > 0);
  if (json) {
    writeJson(io, { ok: !failed, ...summary, checks, counts: { ok: counts.ok, warn: counts.warn, fail: counts.fail } });
  } else {
    const s = style(colourEnabled(io.stdout, io.env));
    const lines = checks.map((c) => statusLine(s, c.status, c.name, c.detail));
    lines.push(`${counts.ok} ok, ${counts.warn} warn, ${counts.fail} fail`);
    writeLines(io.stdout, lines);
  }
  return failed ? EXIT_BAD : EXIT_OK;
}

export async function doctor(io: Io, args: string[]): Promise<number> {
  const parsed = parseCommand(io, args, DOCTOR_HELP, {
    strings: ['codec', 'store', 'table', 'tasks-table', 'sqlite-file', 'dynamodb-table', 'skew-ms', 'timeout-ms'],
    flags: ['strict'],
  });
  if (parsed === undefined) return EXIT_OK;
  const { values, positionals } = parsed;
  if (positionals.length > 0) throw new UsageError(`doctor takes no arguments (got "${positionals[0]}")`);
  const env = io.env;
  const codecs = codecsOf((values.codec as string | undefined) ?? env.MRTR_CODEC ?? 'all');
  const settings = settingsOf(env, values);
  const stores = storesOf((values.store as string | undefined) ?? env.MRTR_STORE, settings);
  setClockOffset(clockOffsetOf(env.MRTR_CLOCK_OFFSET_MS));

  const checks: Check[] = [];
  const add: Add = (c) => checks.push(c);
  const ring = keysLine(env.MRTR_KEYS, add);
  for (const name of codecs) {
    if (ring === undefined) add({ name: `codec ${name}`, status: 'fail', detail: 'skipped: no valid key ring' });
    else add(await codecLine(name, ring, env.MRTR_KEYS!));
  }
  for (const name of stores) await checkBackend(name, BACKENDS[name], settings, add);
  if (stores.length === 0)
    add({ name: 'store', status: 'warn', detail: 'none: without a replay store a state can be replayed until it expires' });
  return report(io, checks, values.strict === true, values.json === true, { codecs, stores });
}

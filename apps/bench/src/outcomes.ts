import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { Client } from '@modelcontextprotocol/client';
import { createStateGuard, type JsonValue, KeyRing, type ReplayStore, type RequestContext, type StateGuard } from '@mrtr/core';
import type { ClaimResult } from '@mrtr/core/store';
import { CheckFailure, type SkippedRow } from './codecs.js';
import {
  type CodecFactory,
  type CreateMrtr,
  closeAll,
  connectClient,
  dropTable,
  E2E_CONCURRENCY,
  flow,
  mrtrServer,
  PATH,
  UNBOUNDED_PRINCIPAL,
} from './e2e.js';
import { makeGuardArgs, makeGuardData } from './guard.js';
import type { Job } from './harness.js';
import { type Loaded, loadFunction } from './load.js';
import { type Backend, getMemoryIds, MEMORY_ID_COUNT } from './stores.js';

/**
 * Outcome recording: what keeping the outcome of a round costs, with and without, side by side in one
 * run, per store and end to end.
 *
 * - Store step: `consume(id)` against `claim(id, fingerprint)` + `record(id, fingerprint, sealedOutcome)`, the
 *   sealed outcome being the very token the guard seals for the outcome below.
 * - Round step (the guard): `guard.open(token)` (every check, then `consume`) against `guard.admit(token, answers)`
 *   (the same checks, the answers' fingerprint, `claim`) followed by `admission.record(outcome)` (seal the outcome
 *   with the codec, `record`). The outcome is what `@mrtr/mcp-server` records for a completed round,
 *   `{ r: CallToolResult }`, of {@link OUTCOME_JSON_BYTES} bytes of JSON.
 * - End to end: the e2e rows c (memory), f (Redis) and g (PostgreSQL) of `e2e.ts` with `recordOutcomes: true` and
 *   `false`.
 */

/** The concurrencies of the store rows (`stores.ts`): memory at 1 and 32, the others at 1, 32 and 128. */
export const OUTCOME_CONCURRENCY: Record<Backend, readonly number[]> = {
  memory: [1, 32],
  redis: [1, 32, 128],
  postgres: [1, 32, 128],
  sqlite: [1, 32, 128],
};
export const BACKENDS: readonly Backend[] = ['memory', 'redis', 'postgres', 'sqlite'];
/** JSON bytes of the recorded outcome, `{ r: { content: [{ type: 'text', text }] } }` (a ~300-byte tool result). */
export const OUTCOME_JSON_BYTES = 300;

const RUN_TAG = randomBytes(6).toString('hex');
const AUDIENCE = 'https://mcp.example.com/mcp';
const PRINCIPAL = 'user-7f3a9c2e@example.com';
/**
 * Lifetime of the states and store entries of the store and round rows: a job's round lasts seconds, and Redis and
 * PostgreSQL let go of the outcomes of a run (~0.5 KiB each) two minutes later instead of keeping them for hours.
 */
const LIFETIME_MS = 120_000;
const MEMORY_MAX_ENTRIES = 8_000_000;
/**
 * No store-wide cap on the memory rows' outcomes: past `outcomeBudgetBytes` an outcome is recorded as "done, not
 * kept", a cheaper path than the one measured (the store rows record the same string again and again, and the round
 * rows get a fresh store every round, so what is held stays far below this).
 */
const MEMORY_OUTCOME_BUDGET_BYTES = 2 ** 40;
/** The same for every store of these rows: the kept path is what is measured. */
/** A fingerprint as core makes it (SHA-256, base64url, 43 characters), for the store rows. */
const STORE_FINGERPRINT = randomBytes(32).toString('base64url');
const CONFIRM: JsonValue = { action: 'accept', content: { ok: true } };

type RecordingStore = ReplayStore & Required<Pick<ReplayStore, 'claim' | 'record'>>;

/**
 * What a wrapper around the current store declares: the store's outcome bounds, and nothing of the calls the wrapper
 * does not pass on (leases, clock, epoch: the timed rows measure claim and record alone).
 */
const wrapperCapabilities = (get: () => ReplayStore): ReplayStore['capabilities'] => ({
  shared: false,
  outcomes: get().capabilities.outcomes,
  keyExchange: false,
  clock: false,
  leases: false,
  epoch: false,
});
type MemoryFactory = (options: { maxEntries?: number; outcomeBudgetBytes?: number; namespace?: string }) => RecordingStore;
type RedisFactory = (options: { url: string; namespace?: string; outcomeBudgetBytes?: number }) => RecordingStore;
type PostgresFactory = (options: {
  connectionString: string;
  table?: string;
  namespace?: string;
  outcomeBudgetBytes?: number;
}) => RecordingStore & { ensureSchema(): Promise<void> };
type SqliteFactory = (options: { filename: string; namespace?: string; outcomeBudgetBytes?: number }) => RecordingStore & {
  ensureSchema(): Promise<void>;
};

/** What `@mrtr/mcp-server` records for a completed `tools/call` round: `{ r: result }`, exactly {@link OUTCOME_JSON_BYTES} B of JSON. */
export function makeOutcome(): JsonValue {
  const files = Array.from({ length: 40 }, (_, i) => `/srv/app/tmp/cache-1/part-${String(i).padStart(3, '0')}.bin`);
  const outcome = { r: { content: [{ type: 'text', text: '' }] } };
  const size = (): number => Buffer.byteLength(JSON.stringify(outcome));
  const head = `Deleted ${files.length} files under /srv/app/tmp/cache-1 (41.7 MiB freed): `;
  outcome.r.content[0]!.text = head + files.join(', ');
  const over = size() - OUTCOME_JSON_BYTES;
  if (over > 0) outcome.r.content[0]!.text = outcome.r.content[0]!.text.slice(0, -over);
  if (size() !== OUTCOME_JSON_BYTES) throw new Error(`outcome: expected ${OUTCOME_JSON_BYTES} B of JSON, got ${size()}`);
  return outcome;
}

export interface OutcomeStoreRow {
  backend: Backend;
  label: string;
  /** The store the jobs use now (memory: a fresh one every round). */
  store(): RecordingStore;
  /** Before each round, outside timing. */
  prepare?: () => Promise<void>;
  /** The state guard (hmac codec) on this store; its store hands out a fresh id per attempt (see `freshIds`). */
  guard: StateGuard;
  /** The same guard on the store itself: single use and retries as an application sees them (checks only). */
  plainGuard: StateGuard;
}

export interface OutcomeE2eRow {
  id: string;
  store: 'memory' | 'redis' | 'postgres';
  recordOutcomes: boolean;
  label: string;
  client: Client;
  /** Store calls the adapter made (the check reads them: with recording, claims and records, no consumes). */
  calls: { consume: number; claim: number; record: number; lastOutcomeChars: number };
  prepare?: () => Promise<void>;
}

export interface OutcomeSetup {
  stores: OutcomeStoreRow[];
  e2e: OutcomeE2eRow[];
  skipped: SkippedRow[];
  notes: string[];
  outcome: JsonValue;
  request: RequestContext;
  data: JsonValue;
  close(): Promise<void>;
}

/**
 * The store the timed guard sees: every `consume` and `claim` hands the real store a fresh id (the guard's id plus
 * a counter), so one pre-made token can be presented again and again as a first use, as in the guard rows; `record`
 * goes to the id its `claim` got (paired by fingerprint: every timed admission has its own answers, see
 * `guardJobs`). Both variants pay the same renaming; the pairing adds one Map set and delete to the recording one.
 */
function freshIds(get: () => RecordingStore): RecordingStore {
  let n = 0;
  const claimed = new Map<string, string>();
  return {
    capabilities: wrapperCapabilities(get),
    consume: (id, expiresAtMs) => get().consume(`${id}.${n++}`, expiresAtMs),
    claim: (id, expiresAtMs, fingerprint) => {
      const fresh = `${id}.${n++}`;
      claimed.set(fingerprint, fresh);
      return get().claim(fresh, expiresAtMs, fingerprint);
    },
    record: (id, fingerprint, outcome) => {
      const fresh = claimed.get(fingerprint);
      claimed.delete(fingerprint);
      return get().record(fresh ?? id, fingerprint, outcome);
    },
    close: async () => {},
  };
}

/** Forwards to the current store (memory rows get a fresh one every round). */
function forward(get: () => RecordingStore): RecordingStore {
  return {
    capabilities: wrapperCapabilities(get),
    consume: (id, expiresAtMs) => get().consume(id, expiresAtMs),
    claim: (id, expiresAtMs, fingerprint) => get().claim(id, expiresAtMs, fingerprint),
    record: (id, fingerprint, outcome) => get().record(id, fingerprint, outcome),
    close: async () => {},
  };
}

/** Forwards to the current store and counts the calls (the same wrapper on both e2e variants). */
function counting(get: () => RecordingStore, calls: OutcomeE2eRow['calls']): RecordingStore {
  return {
    capabilities: wrapperCapabilities(get),
    consume: (id, expiresAtMs) => {
      calls.consume++;
      return get().consume(id, expiresAtMs);
    },
    claim: (id, expiresAtMs, fingerprint) => {
      calls.claim++;
      return get().claim(id, expiresAtMs, fingerprint);
    },
    record: (id, fingerprint, outcome) => {
      calls.record++;
      calls.lastOutcomeChars = outcome.length;
      return get().record(id, fingerprint, outcome);
    },
    close: async () => {},
  };
}

export interface OutcomeEnv {
  redisUrl?: string | undefined;
  databaseUrl?: string | undefined;
  /** Skip SQLite (it needs a writable temp dir). */
  sqlite?: boolean;
  /** Skip the end-to-end rows. */
  e2e?: boolean;
}

/** Stores with outcome recording, one per backend, their guards, and the e2e clients with recording on and off. */
export async function setupOutcomes(env: OutcomeEnv): Promise<OutcomeSetup> {
  const closers: Closer[] = [];
  const outcome = makeOutcome();
  const data = makeGuardData('400');
  const request: RequestContext = { method: 'tools/call', target: 'delete_files', arguments: makeGuardArgs('100'), principal: PRINCIPAL };
  const setup: OutcomeSetup = {
    stores: [],
    e2e: [],
    skipped: [],
    notes: [],
    outcome,
    request,
    data,
    close: async () => closeAll(closers),
  };
  const hmac = await loadFunction<CodecFactory>('@mrtr/codec-hmac', 'createHmacCodec');
  const memory = await loadFunction<MemoryFactory>('@mrtr/store-memory', 'createMemoryStore');
  if (!hmac.ok || !memory.ok) {
    setup.skipped.push({
      id: 'outcomes',
      label: 'outcome recording rows',
      reason: hmac.ok ? (memory as { reason: string }).reason : hmac.reason,
    });
    return setup;
  }
  const keys = new KeyRing([{ kid: 'k1', secret: new Uint8Array(randomBytes(32)) }]);
  const pgFactory = given(env.databaseUrl) ? await loadFunction<PostgresFactory>('@mrtr/store-sql', 'createPostgresStore') : undefined;
  const build: OutcomeBuild = { setup, closers, env, memory: memory.value, pgFactory, hmac: hmac.value, keys };
  for (const add of OUTCOME_BACKENDS) await add(build);
  if (env.e2e !== false) await e2eOutcomeRows(build);
  return setup;
}

type Closer = () => Promise<unknown> | unknown;

/** What the backends of {@link setupOutcomes} build on and add to. */
interface OutcomeBuild {
  setup: OutcomeSetup;
  closers: Closer[];
  env: OutcomeEnv;
  memory: MemoryFactory;
  /** The PostgreSQL store's factory; undefined without `DATABASE_URL`. */
  pgFactory: Loaded<PostgresFactory> | undefined;
  hmac: CodecFactory;
  keys: KeyRing;
}

const given = (url: string | undefined): url is string => url !== undefined && url !== '';

/** The store rows' backends, in the order of their rows. */
const OUTCOME_BACKENDS: readonly ((build: OutcomeBuild) => Promise<void>)[] = [
  memoryOutcomeRows,
  redisOutcomeRows,
  postgresOutcomeRows,
  sqliteOutcomeRows,
];

/** Adds the store row of `get` (the current store), with its two guards. */
function addStoreRow(build: OutcomeBuild, backend: Backend, label: string, get: () => RecordingStore, prepare?: () => Promise<void>): void {
  const guardOn = (store: ReplayStore): StateGuard =>
    createStateGuard({
      keys: build.keys,
      codec: build.hmac,
      store,
      audience: AUDIENCE,
      ttlMs: LIFETIME_MS,
      flowTtlMs: LIFETIME_MS,
      ...UNBOUNDED_PRINCIPAL,
    });
  build.setup.stores.push({
    backend,
    label,
    store: get,
    guard: guardOn(freshIds(get)),
    plainGuard: guardOn(forward(get)),
    ...(prepare === undefined ? {} : { prepare }),
  });
}

/** Memory: a fresh store every round. */
async function memoryOutcomeRows(build: OutcomeBuild): Promise<void> {
  const make = (): RecordingStore =>
    build.memory({ maxEntries: MEMORY_MAX_ENTRIES, outcomeBudgetBytes: MEMORY_OUTCOME_BUDGET_BYTES, namespace: 'bench-outcomes' });
  let store = make();
  build.closers.push(() => store.close());
  addStoreRow(
    build,
    'memory',
    `@mrtr/store-memory (maxEntries ${MEMORY_MAX_ENTRIES.toLocaleString('en-US')}, no outcome cap, fresh store per round)`,
    () => store,
    async () => {
      await store.close();
      store = make();
    },
  );
}

async function redisOutcomeRows(build: OutcomeBuild): Promise<void> {
  const { env, setup } = build;
  if (!given(env.redisUrl)) {
    setup.notes.push('REDIS_URL is not set: Redis outcome rows skipped.');
    return;
  }
  const redis = await loadFunction<RedisFactory>('@mrtr/store-redis', 'createRedisStore');
  if (!redis.ok) {
    setup.skipped.push({ id: 'redis', label: '@mrtr/store-redis', reason: redis.reason });
    return;
  }
  const store = redis.value({
    url: env.redisUrl,
    namespace: `mrtr-bench-outcomes:${RUN_TAG}`,
    outcomeBudgetBytes: MEMORY_OUTCOME_BUDGET_BYTES,
  });
  build.closers.push(() => store.close());
  addStoreRow(build, 'redis', '@mrtr/store-redis (from URL, batching on; claim and record are one script call each)', () => store);
}

/** A PostgreSQL store on a table of this run, dropped after the store closed. */
async function postgresOn(build: OutcomeBuild, create: PostgresFactory, options: Parameters<PostgresFactory>[0]): Promise<RecordingStore> {
  const { connectionString, table } = options;
  const store = create(options);
  build.closers.push(() => dropTable(connectionString, table!));
  build.closers.push(() => store.close());
  await store.ensureSchema();
  return store;
}

async function postgresOutcomeRows(build: OutcomeBuild): Promise<void> {
  const { env, setup, pgFactory } = build;
  if (pgFactory === undefined) {
    setup.notes.push('DATABASE_URL is not set: PostgreSQL outcome rows skipped.');
  } else if (!pgFactory.ok) {
    setup.skipped.push({ id: 'postgres', label: '@mrtr/store-sql (postgres)', reason: pgFactory.reason });
  } else {
    const store = await postgresOn(build, pgFactory.value, {
      connectionString: env.databaseUrl!,
      table: `mrtr_bench_outc_${RUN_TAG}`,
      namespace: 'bench',
      outcomeBudgetBytes: MEMORY_OUTCOME_BUDGET_BYTES,
    });
    addStoreRow(
      build,
      'postgres',
      '@mrtr/store-sql createPostgresStore (from URL, default pool of 10, group commit for consume)',
      () => store,
    );
  }
}

async function sqliteOutcomeRows(build: OutcomeBuild): Promise<void> {
  if (build.env.sqlite === false) return;
  const sqlite = await loadFunction<SqliteFactory>('@mrtr/store-sql', 'createSqliteStore');
  if (!sqlite.ok) {
    build.setup.skipped.push({ id: 'sqlite', label: '@mrtr/store-sql (sqlite)', reason: sqlite.reason });
    return;
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'mrtr-bench-outcomes-'));
  build.closers.push(() => rmSync(dir, { recursive: true, force: true }));
  const store = sqlite.value({ filename: path.join(dir, 'store.db'), namespace: 'bench', outcomeBudgetBytes: MEMORY_OUTCOME_BUDGET_BYTES });
  build.closers.push(() => store.close());
  await store.ensureSchema();
  addStoreRow(
    build,
    'sqlite',
    '@mrtr/store-sql createSqliteStore (own file, defaults: WAL, synchronous=FULL, group commit for consume)',
    () => store,
  );
}

/** End to end: rows c, f and g of e2e.ts, recordOutcomes true and false. */
async function e2eOutcomeRows(build: OutcomeBuild): Promise<void> {
  const { env, setup, closers, pgFactory } = build;
  const adapter = await loadFunction<CreateMrtr>('@mrtr/mcp-server', 'createMrtr');
  if (!adapter.ok) {
    setup.skipped.push({ id: 'e2e', label: '@mrtr/mcp-server outcome rows', reason: adapter.reason });
    return;
  }
  const addE2e = async (store: OutcomeE2eRow['store'], label: string, get: () => RecordingStore, prepare?: () => Promise<void>) => {
    for (const recordOutcomes of [false, true]) {
      const calls = { consume: 0, claim: 0, record: 0, lastOutcomeChars: 0 };
      const client = await connectClient(mrtrServer(adapter.value, build.hmac, counting(get, calls), build.keys, recordOutcomes));
      closers.push(() => client.close());
      const id = `${store}-${recordOutcomes ? 'on' : 'off'}`;
      const row = { id, store, recordOutcomes, label: `${label}, recordOutcomes: ${String(recordOutcomes)}`, client, calls };
      setup.e2e.push({ ...row, ...(prepare === undefined ? {} : { prepare }) });
    }
  };
  const make = (): RecordingStore => build.memory({ maxEntries: 4_000_000, namespace: 'e2e-outcomes' });
  let store = make();
  closers.push(() => store.close());
  await addE2e(
    'memory',
    'c: mrtr @mrtr/codec-hmac + @mrtr/store-memory',
    () => store,
    async () => {
      await store.close();
      store = make();
    },
  );
  if (given(env.redisUrl)) {
    const redis = await loadFunction<RedisFactory>('@mrtr/store-redis', 'createRedisStore');
    if (redis.ok) {
      const store = redis.value({ url: env.redisUrl, namespace: `mrtr-bench-outcomes-e2e:${RUN_TAG}` });
      closers.push(() => store.close());
      await addE2e('redis', 'f: mrtr @mrtr/codec-hmac + @mrtr/store-redis', () => store);
    }
  }
  if (pgFactory?.ok === true) {
    const options = { connectionString: env.databaseUrl!, table: `mrtr_bench_oe2e_${RUN_TAG}`, namespace: 'e2e' };
    const store = await postgresOn(build, pgFactory.value, options);
    await addE2e('postgres', 'g: mrtr @mrtr/codec-hmac + @mrtr/store-sql (PostgreSQL)', () => store);
  }
}

export interface OutcomeCheckReport {
  checks: string[];
  /** The sealed outcome the store rows record (what `admission.record(outcome)` hands the store). */
  sealedOutcome: string;
  /** Characters of the sealed outcome the e2e flow records (its tool result is one short line). */
  e2eSealedOutcomeChars?: number;
}

const refuses = async (what: string, promise: Promise<unknown>, code: string): Promise<void> => {
  try {
    await promise;
  } catch (error) {
    if ((error as { code?: unknown }).code === code) return;
    throw new CheckFailure(`${what}: expected ${code}, got ${String(error)}`);
  }
  throw new CheckFailure(`${what}: accepted`);
};

const expectStatus = (what: string, got: ClaimResult, status: ClaimResult['status']): void => {
  if (got.status !== status) throw new CheckFailure(`${what}: expected ${status}, got ${JSON.stringify(got)}`);
};

/**
 * Before timing, per store: consume once; claim → first, pending, record → true, recorded (the same outcome),
 * another fingerprint → replayed; through the guard: a second open is a replay, an identical retry after record
 * gets the recorded outcome, other answers are a replay. End to end: every row completes the flow; with recording
 * the adapter claims and records and never consumes, without it consumes only.
 */
export async function checkOutcomes(setup: OutcomeSetup): Promise<OutcomeCheckReport> {
  const checks: string[] = [];
  let sealedOutcome: string | undefined;
  const exp = Date.now() + LIFETIME_MS;
  for (const row of setup.stores) {
    await row.prepare?.();
    const store = row.store();
    const tag = `check-${RUN_TAG}-${row.backend}`;
    if ((await store.consume(`${tag}-a`, exp)) !== true || (await store.consume(`${tag}-a`, exp)) !== false) {
      throw new CheckFailure(`outcome store ${row.backend}: consume is not true then false`);
    }
    // Through the plain guard: single use, then an identical retry after record.
    const once = await row.plainGuard.mint(setup.data, setup.request);
    await row.plainGuard.open(once, setup.request);
    await refuses(`outcome store ${row.backend}: second open`, row.plainGuard.open(once, setup.request), 'ERR_STATE_REPLAYED');
    const token = await row.plainGuard.mint(setup.data, setup.request);
    const answers = { confirm: CONFIRM };
    const first = await row.plainGuard.admit(token, setup.request, answers);
    if (first.replay) throw new CheckFailure(`outcome store ${row.backend}: first admission is a replay`);
    if ((await first.record(setup.outcome)) !== true)
      throw new CheckFailure(`outcome store ${row.backend}: record did not keep the outcome`);
    const retry = await row.plainGuard.admit(token, setup.request, answers);
    if (!retry.replay || !isDeepStrictEqual(retry.outcome, setup.outcome)) {
      throw new CheckFailure(`outcome store ${row.backend}: an identical retry did not get the recorded outcome`);
    }
    await refuses(
      `outcome store ${row.backend}: other answers`,
      row.plainGuard.admit(token, setup.request, { confirm: { action: 'decline' } }),
      'ERR_STATE_REPLAYED',
    );
    // The store step alone, with the sealed outcome of this guard.
    sealedOutcome ??= await sealedOutcomeOf(row, setup);
    const id = `${tag}-b`;
    expectStatus(`outcome store ${row.backend}: claim`, await store.claim(id, exp, STORE_FINGERPRINT), 'first');
    expectStatus(`outcome store ${row.backend}: claim again before record`, await store.claim(id, exp, STORE_FINGERPRINT), 'pending');
    if ((await store.record(id, STORE_FINGERPRINT, sealedOutcome)) !== true)
      throw new CheckFailure(`outcome store ${row.backend}: record → false`);
    const recorded = await store.claim(id, exp, STORE_FINGERPRINT);
    if (recorded.status !== 'recorded' || recorded.outcome !== sealedOutcome) {
      throw new CheckFailure(`outcome store ${row.backend}: claim after record did not return the outcome`);
    }
    expectStatus(
      `outcome store ${row.backend}: claim with another fingerprint`,
      await store.claim(id, exp, `${STORE_FINGERPRINT.startsWith('x') ? 'y' : 'x'}${STORE_FINGERPRINT.slice(1)}`),
      'replayed',
    );
    // The timed guard: two admissions of one token with their own answers are both first uses.
    for (let i = 0; i < 2; i++) {
      const admission = await row.guard.admit(token, setup.request, { confirm: CONFIRM, attempt: i });
      if (admission.replay || (await admission.record(setup.outcome)) !== true)
        throw new CheckFailure(`outcome store ${row.backend}: timed guard admission ${i} was not a first use`);
    }
    checks.push(
      `${row.backend}: consume once; claim first, pending, recorded, other fingerprint replayed; guard: second open replayed, identical retry gets the outcome, other answers replayed`,
    );
  }
  let e2eSealedOutcomeChars: number | undefined;
  for (const row of setup.e2e) {
    await row.prepare?.();
    const before = { ...row.calls };
    const result = (await flow(row.client)) as { content?: { type: string; text?: string }[]; isError?: boolean };
    if (result.isError === true || result.content?.[0]?.text !== `Deleted ${PATH}`) {
      throw new CheckFailure(`outcome e2e ${row.id}: expected "Deleted ${PATH}", got ${JSON.stringify(result)}`);
    }
    const consumes = row.calls.consume - before.consume;
    const claims = row.calls.claim - before.claim;
    const records = row.calls.record - before.record;
    const ok = row.recordOutcomes ? consumes === 0 && claims === 1 && records === 1 : consumes === 1 && claims === 0 && records === 0;
    if (!ok) throw new CheckFailure(`outcome e2e ${row.id}: one flow made ${consumes} consumes, ${claims} claims, ${records} records`);
    if (row.recordOutcomes) e2eSealedOutcomeChars = row.calls.lastOutcomeChars;
    checks.push(`e2e ${row.id}: the flow completes with ${row.recordOutcomes ? 'one claim and one record' : 'one consume'}`);
  }
  if (sealedOutcome === undefined) throw new CheckFailure('outcome rows: no store to seal an outcome with');
  return { checks, sealedOutcome, ...(e2eSealedOutcomeChars === undefined ? {} : { e2eSealedOutcomeChars }) };
}

/** The string `admission.record(outcome)` hands the store, read through a guard whose store passes it on and keeps a copy. */
async function sealedOutcomeOf(row: OutcomeStoreRow, setup: OutcomeSetup): Promise<string> {
  let captured: string | undefined;
  const inner = row.store();
  const capture: RecordingStore = {
    capabilities: wrapperCapabilities(() => inner),
    consume: (id, e) => inner.consume(id, e),
    claim: (id, e, fp) => inner.claim(`${id}.sealed`, e, fp),
    record: (id, fp, outcome) => {
      captured = outcome;
      return inner.record(`${id}.sealed`, fp, outcome);
    },
    close: async () => {},
  };
  const guard = createStateGuard({
    keys: row.guard.codec.keys,
    codec: row.guard.codec,
    store: capture,
    audience: AUDIENCE,
    ttlMs: LIFETIME_MS,
    flowTtlMs: LIFETIME_MS,
    ...UNBOUNDED_PRINCIPAL,
  });
  const token = await guard.mint(setup.data, setup.request);
  const admission = await guard.admit(token, setup.request, { confirm: CONFIRM });
  if (admission.replay || (await admission.record(setup.outcome)) !== true || captured === undefined) {
    throw new CheckFailure(`outcome store ${row.backend}: could not read the sealed outcome`);
  }
  return captured;
}

/**
 * Per store and concurrency, side by side: the store step (`consume` against `claim` + `record` of the sealed
 * outcome) and the round step (`guard.open` against `guard.admit` + `admission.record(outcome)`); then the e2e
 * flows with recording off and on. Every timed recording checks that it was a first use and that the outcome was
 * kept, so a store that stopped keeping outcomes (a cheaper path) aborts the run instead of being measured.
 */
export function outcomeJobs(setup: OutcomeSetup, report: OutcomeCheckReport): Job[] {
  const jobs: Job[] = [];
  const sealed = report.sealedOutcome;
  for (const row of setup.stores) {
    const isMemory = row.backend === 'memory';
    const batchMs = isMemory ? 3 : 15;
    for (const c of OUTCOME_CONCURRENCY[row.backend]) {
      // Store step. Memory ids are pre-made (as in the store rows); the others get a run tag plus a counter.
      for (const step of ['consume', 'claim-record'] as const) {
        let seq = 0;
        // Live from the start (each round's prepare moves it on): a store on its own clock refuses a past expiry.
        let exp = Date.now() + LIFETIME_MS;
        const tag = `${RUN_TAG.slice(0, 6)}o${row.backend.slice(0, 2)}${step === 'consume' ? 'cs' : 'cr'}c${String(c).padStart(3, '0')}`;
        const ids = isMemory ? getMemoryIds() : undefined;
        const nextId = (): string => {
          if (ids === undefined) return tag + (seq++).toString(36).padStart(10, '0');
          const id = ids[seq++];
          if (id === undefined) throw new Error(`outcome bench ran out of its ${MEMORY_ID_COUNT} pre-made ids in one round`);
          return id;
        };
        const op =
          step === 'consume'
            ? async () => {
                if ((await row.store().consume(nextId(), exp)) !== true) throw new Error(`${row.backend}: consume of a fresh id → false`);
              }
            : async () => {
                const id = nextId();
                const store = row.store();
                const claimed = await store.claim(id, exp, STORE_FINGERPRINT);
                if (claimed.status !== 'first') throw new Error(`${row.backend}: claim of a fresh id → ${claimed.status}`);
                if ((await store.record(id, STORE_FINGERPRINT, sealed)) !== true) throw new Error(`${row.backend}: record → false`);
              };
        jobs.push({
          key: `outcome|store|${row.backend}|${step}|c${c}`,
          concurrency: c,
          batchMs,
          prepare: async () => {
            exp = Date.now() + LIFETIME_MS;
            if (isMemory) seq = 0;
            await row.prepare?.();
          },
          op,
        });
      }
      // Round step: one token minted before each round; every timed admission has its own answers (a counter), so
      // concurrent attempts on that token are not taken for identical retries of one another.
      for (const step of ['open', 'admit-record'] as const) {
        let token = '';
        let attempt = 0;
        const op =
          step === 'open'
            ? async () => {
                await row.guard.open(token, setup.request);
              }
            : async () => {
                const admission = await row.guard.admit(token, setup.request, { confirm: CONFIRM, attempt: attempt++ });
                if (admission.replay) throw new Error(`${row.backend}: a timed admission was a replay`);
                if ((await admission.record(setup.outcome)) !== true) throw new Error(`${row.backend}: admission.record → false`);
              };
        jobs.push({
          key: `outcome|guard|${row.backend}|${step}|c${c}`,
          concurrency: c,
          batchMs,
          prepare: async () => {
            await row.prepare?.();
            token = await row.guard.mint(setup.data, setup.request);
          },
          op,
        });
      }
    }
  }
  for (const c of E2E_CONCURRENCY) {
    for (const row of setup.e2e) {
      jobs.push({
        key: `outcome|e2e|${row.store}|${row.recordOutcomes ? 'on' : 'off'}|c${c}`,
        concurrency: c,
        batchMs: row.store === 'memory' ? 40 : 60,
        ...(row.prepare === undefined ? {} : { prepare: row.prepare }),
        op: () => flow(row.client),
      });
    }
  }
  return jobs;
}

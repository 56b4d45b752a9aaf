import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import {
  createStateGuard,
  type JsonValue,
  KeyRing,
  type ReplayStore,
  type RequestContext,
  type StateCodec,
  type StateGuard,
} from '@mrtr/core';
import { andThen, type StateClaims } from '@mrtr/core/codec';
import { canonicalJson } from '@mrtr/core/encoding';
import { bareHmac } from './codecs.js';
import type { Job } from './harness.js';
import { loadFunction } from './load.js';

/**
 * Guard rows: a full `createStateGuard` `open` (codec, claims, principal tag, binding digest, memory store)
 * and `mint`, per codec, against the bare HMAC verify/seal of the same claims JSON (B of the codec bench)
 * and the codec's own open/seal of the same token. Data (the `data` claim) of 400 B, 4 KiB and 16 KiB;
 * arguments (bound by digest) of 100 B and 10 KiB. Plus canonical JSON of 10 KiB against JSON.stringify.
 */
export type GuardDataName = '400' | '4k' | '16k';
export type GuardArgsName = '100' | '10k';
export const GUARD_DATA: readonly GuardDataName[] = ['400', '4k', '16k'];
export const GUARD_ARGS: readonly GuardArgsName[] = ['100', '10k'];
const DATA_BYTES: Record<GuardDataName, number> = { '400': 400, '4k': 4096, '16k': 16384 };
const ARGS_BYTES: Record<GuardArgsName, number> = { '100': 100, '10k': 10240 };
export const GUARD_CODECS = ['hmac', 'jwe', 'aead'] as const;
export type GuardCodecId = (typeof GUARD_CODECS)[number];

const AUDIENCE = 'https://mcp.example.com/mcp';
const PRINCIPAL = 'user-7f3a9c2e@example.com';
/** Room for every consume of one round (a fresh store each round). */
const MEMORY_MAX_ENTRIES = 4_000_000;
/** States outlive the whole run (the bench's budget is 20 minutes). */
const LIFETIME_MS = 3 * 3600_000;

/** Grows `list` with path-like strings, then fits its last entry so that `size()` is exactly `target`. */
function fitTo(target: number, list: string[], size: () => number, what: string): void {
  let i = 0;
  while (size() + 60 < target) list.push(`/srv/app/data/project-${String(i++).padStart(4, '0')}/build/artifact.bin`);
  const last = list.length - 1;
  const missing = target - size();
  if (missing < 0) list[last] = list[last]!.slice(0, list[last]!.length + missing);
  else if (missing > 0) list[last] = list[last] + 'x'.repeat(missing);
  if (size() !== target) throw new Error(`${what}: expected ${target} B of JSON, got ${size()}`);
}

/** The `data` claim: a `delete_files` confirmation round, keys in the order an application writes them. */
export function makeGuardData(name: GuardDataName): JsonValue {
  const paths = ['/srv/app/tmp/cache-1'];
  const data = { step: 1, args: { paths }, answers: { confirm: true, reason: 'cleanup' }, pad: [''] };
  fitTo(DATA_BYTES[name], data.pad, () => Buffer.byteLength(JSON.stringify(data)), `guard data ${name}`);
  return data;
}

/** Tool arguments as a client sends them (keys not in sorted order: `paths`, `recursive`, `dryRun`). */
export function makeGuardArgs(name: GuardArgsName): Record<string, JsonValue> {
  const paths = ['/srv/app/tmp/cache-1'];
  const args = { paths, recursive: true, dryRun: false };
  fitTo(ARGS_BYTES[name], paths, () => Buffer.byteLength(JSON.stringify(args)), `guard args ${name}`);
  return args;
}

/** 10 KiB of arguments made of many small objects, every one with its keys out of order (canonical JSON's worst shape). */
export function makeObjectArgs(): Record<string, JsonValue> {
  const files: { path: string; size: number; mode: string }[] = [];
  const args = { files, recursive: true };
  let i = 0;
  while (Buffer.byteLength(JSON.stringify(args)) < 10240 - 80) {
    files.push({ path: `/srv/app/data/p-${String(i).padStart(4, '0')}/a.bin`, size: 1000 + i, mode: '0644' });
    i++;
  }
  return args;
}

type CodecFactory = (keys: KeyRing, options?: { maxTokenBytes?: number }) => StateCodec;
/** A 16 KiB data claim seals to ~22 KiB (base64url): the codecs and guards here accept up to 64 KiB. */
const MAX_TOKEN_BYTES = 64 * 1024;
const FACTORIES: Record<GuardCodecId, { specifier: string; factory: string }> = {
  hmac: { specifier: '@mrtr/codec-hmac', factory: 'createHmacCodec' },
  jwe: { specifier: '@mrtr/codec-jwe', factory: 'createJweCodec' },
  aead: { specifier: '@mrtr/codec-aead', factory: 'createAeadCodec' },
};

interface GuardRow {
  id: GuardCodecId;
  guard: StateGuard;
  codec: StateCodec;
  /** Replaces the memory store (outside timing, before each round). */
  resetStore(): Promise<void>;
}

export interface GuardSetup {
  rows: GuardRow[];
  skipped: { id: string; label: string; reason: string }[];
  data: Record<GuardDataName, JsonValue>;
  args: Record<GuardArgsName, Record<string, JsonValue>>;
  objectArgs: Record<string, JsonValue>;
}

type MemoryFactory = (options: { maxEntries?: number; namespace?: string }) => ReplayStore & { close(): Promise<void> | void };

/** One key ring, one guard per loadable codec, each with its own memory store. */
export async function setupGuards(): Promise<GuardSetup> {
  const keys = new KeyRing([{ kid: 'k1', secret: new Uint8Array(randomBytes(32)) }]);
  const skipped: GuardSetup['skipped'] = [];
  const rows: GuardRow[] = [];
  const memory = await loadFunction<MemoryFactory>('@mrtr/store-memory', 'createMemoryStore');
  if (!memory.ok) throw new Error(`guard rows need @mrtr/store-memory: ${memory.reason}`);
  for (const id of GUARD_CODECS) {
    const spec = FACTORIES[id];
    const loaded = await loadFunction<CodecFactory>(spec.specifier, spec.factory);
    if (!loaded.ok) {
      skipped.push({ id, label: spec.specifier, reason: loaded.reason });
      continue;
    }
    let store = memory.value({ maxEntries: MEMORY_MAX_ENTRIES, namespace: `guard-${id}` });
    // Every timed open presents a fresh token's jti once: the delegate gives the store a new id per call
    // (the guard's own id plus a counter), so repeated opens of one token stay first uses.
    let n = 0;
    const fresh: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: (key, expiresAtMs) => store.consume(`${key}.${n++}`, expiresAtMs),
      close: async () => {},
    };
    const factory = loaded.value;
    const guard = createStateGuard({
      keys,
      codec: (ring: KeyRing) => factory(ring, { maxTokenBytes: MAX_TOKEN_BYTES }),
      store: fresh,
      audience: AUDIENCE,
      ttlMs: LIFETIME_MS,
      flowTtlMs: LIFETIME_MS,
      maxTokenBytes: MAX_TOKEN_BYTES,
    });
    rows.push({
      id,
      guard,
      codec: guard.codec,
      async resetStore() {
        await store.close();
        store = memory.value({ maxEntries: MEMORY_MAX_ENTRIES, namespace: `guard-${id}` });
      },
    });
  }
  const data = Object.fromEntries(GUARD_DATA.map((d) => [d, makeGuardData(d)])) as GuardSetup['data'];
  const args = Object.fromEntries(GUARD_ARGS.map((a) => [a, makeGuardArgs(a)])) as GuardSetup['args'];
  return { rows, skipped, data, args, objectArgs: makeObjectArgs() };
}

const request = (args: Record<string, JsonValue>): RequestContext => ({
  method: 'tools/call',
  target: 'delete_files',
  arguments: args,
  principal: PRINCIPAL,
});

export interface GuardCheckReport {
  /** Token per codec, data and arguments size (what the open jobs open). */
  tokens: Record<string, string>;
  /** Claims JSON bytes per data size (what B seals and opens). */
  claimsBytes: Record<GuardDataName, number>;
  checks: string[];
}

export class GuardCheckFailure extends Error {}

/**
 * Before timing: every guard opens what it minted (data unchanged), twice when the store is bypassed but
 * refuses the same jti twice through a plain store; refuses another principal, other arguments and a
 * flipped character; canonical JSON of the 10 KiB arguments parses back to them.
 */
export async function checkGuards(setup: GuardSetup): Promise<GuardCheckReport> {
  const report: GuardCheckReport = { tokens: {}, claimsBytes: {} as GuardCheckReport['claimsBytes'], checks: [] };
  const refuses = async (what: string, promise: Promise<unknown>, code: string): Promise<void> => {
    try {
      await promise;
    } catch (error) {
      if ((error as { code?: unknown }).code === code) return;
      throw new GuardCheckFailure(`${what}: expected ${code}, got ${String(error)}`);
    }
    throw new GuardCheckFailure(`${what}: accepted`);
  };
  for (const row of setup.rows) {
    for (const d of GUARD_DATA) {
      for (const a of GUARD_ARGS) {
        const req = request(setup.args[a]);
        const token = await row.guard.mint(setup.data[d], req);
        const opened = await row.guard.open(token, req);
        if (canonicalJson(opened.data) !== canonicalJson(setup.data[d])) throw new GuardCheckFailure(`${row.id} ${d}/${a}: data changed`);
        await refuses(
          `${row.id} ${d}/${a} other principal`,
          row.guard.open(token, { ...req, principal: 'mallory' }),
          'ERR_STATE_PRINCIPAL',
        );
        await refuses(
          `${row.id} ${d}/${a} other arguments`,
          row.guard.open(token, { ...req, arguments: { ...setup.args[a], dryRun: true } }),
          'ERR_STATE_BINDING',
        );
        const i = token.length >> 1;
        const flipped = token.slice(0, i) + (token[i] === 'A' ? 'B' : 'A') + token.slice(i + 1);
        try {
          await row.guard.open(flipped, req);
          throw new GuardCheckFailure(`${row.id} ${d}/${a}: accepted a flipped character`);
        } catch (error) {
          if (error instanceof GuardCheckFailure) throw error;
        }
        report.tokens[`${row.id}|${d}|${a}`] = token;
        if (row.id === 'hmac' && a === '100') report.claimsBytes[d] = Buffer.byteLength(JSON.stringify(opened.claims));
      }
    }
    // Single use through a plain store (the timed rows give the store a fresh id per call).
    const { createMemoryStore } = (await import('@mrtr/store-memory')) as { createMemoryStore: MemoryFactory };
    const once = createStateGuard({ keys: row.guard.codec.keys, codec: row.codec, store: createMemoryStore({}), audience: AUDIENCE });
    const req = request(setup.args['100']);
    const token = await once.mint(setup.data['400'], req);
    await once.open(token, req);
    await refuses(`${row.id} replay`, once.open(token, req), 'ERR_STATE_REPLAYED');
    report.checks.push(
      `${row.id}: 3 data × 2 argument sizes round trip; other principal, other arguments, flipped character and replay refused`,
    );
  }
  for (const [name, args] of [
    ['10k', setup.args['10k']],
    ['10k-objects', setup.objectArgs],
  ] as const) {
    const text = canonicalJson(args);
    if (!isDeepStrictEqual(JSON.parse(text), args) || canonicalJson(JSON.parse(text)) !== text) {
      throw new GuardCheckFailure(`canonical JSON of the ${name} arguments does not round-trip`);
    }
  }
  report.checks.push('canonical JSON of the 10 KiB arguments is stable under a JSON round trip');
  return report;
}

/** Guard open/mint per codec, data and arguments size; codec and bare HMAC twins per data size; canonical JSON. */
export function guardJobs(setup: GuardSetup, report: GuardCheckReport): Job[] {
  const jobs: Job[] = [];
  const bare = bareHmac(); // B of the codec bench: seal/open of base64url(JSON) with HMAC-SHA256
  for (const d of GUARD_DATA) {
    // The claims the hmac guard sealed for this data size: B seals and opens the same JSON.
    const hmacRow = setup.rows.find((r) => r.id === 'hmac');
    const sample = report.tokens[`${hmacRow?.id ?? setup.rows[0]?.id}|${d}|100`];
    if (sample === undefined) continue;
    const source = hmacRow ?? setup.rows[0]!;
    const claimsOf = (o: unknown): StateClaims => (o as { claims: StateClaims }).claims;
    const pending = andThen(source.codec.unseal(sample), claimsOf);
    let claims: StateClaims | undefined;
    let bareToken: string | undefined;
    jobs.push({
      key: `guard|B|seal|${d}`,
      prepare: async () => {
        claims = await pending;
        bareToken = bare.seal(claims) as string;
      },
      op: () => bare.seal(claims!),
    });
    jobs.push({
      key: `guard|B|open|${d}`,
      prepare: async () => {
        claims = await pending;
        bareToken = bare.seal(claims) as string;
      },
      op: () => bare.open(bareToken!),
    });
    for (const row of setup.rows) {
      const token = report.tokens[`${row.id}|${d}|100`]!;
      jobs.push({ key: `guard|${row.id}-codec|open|${d}`, op: () => row.codec.unseal(token) });
      let rowClaims: StateClaims | undefined;
      jobs.push({
        key: `guard|${row.id}-codec|seal|${d}`,
        prepare: async () => {
          rowClaims = claimsOf(await row.codec.unseal(token));
        },
        op: () => row.codec.seal(rowClaims!),
      });
      for (const a of GUARD_ARGS) {
        const req = request(setup.args[a]);
        const t = report.tokens[`${row.id}|${d}|${a}`]!;
        jobs.push({ key: `guard|${row.id}|open|${d}|${a}`, prepare: () => row.resetStore(), op: () => row.guard.open(t, req) });
        jobs.push({ key: `guard|${row.id}|mint|${d}|${a}`, op: () => row.guard.mint(setup.data[d], req) });
      }
    }
  }
  jobs.push({ key: 'canon|canonical|10k', op: () => canonicalJson(setup.args['10k']) });
  jobs.push({ key: 'canon|stringify|10k', op: () => JSON.stringify(setup.args['10k']) });
  jobs.push({ key: 'canon|canonical|10k-objects', op: () => canonicalJson(setup.objectArgs) });
  jobs.push({ key: 'canon|stringify|10k-objects', op: () => JSON.stringify(setup.objectArgs) });
  return jobs;
}

import { createHash } from 'node:crypto';
import { basename, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { KeyProvider, KeyRing, type MintQuota } from '@mrtr/core';
import { parseKeySet } from '@mrtr/core/keys';
import { fileKeySource, watchKeyFile } from '@mrtr/core/node';
import { redactUrl as redactCoreUrl } from '@mrtr/core/store';
import { escapeForTerminal } from './observe.js';
import { DEMO_EFFECTS } from './tools/index.js';

export const CODECS = ['hmac', 'jwe', 'aead'] as const;
export const STORES = ['memory', 'sqlite', 'redis', 'postgres'] as const;
export type CodecName = (typeof CODECS)[number];
export type StoreName = (typeof STORES)[number];

export const DEFAULT_HOST = '127.0.0.1';
export const DEFAULT_PORT = 3000;
export const DEFAULT_TTL_MS = 600_000;
export const MIN_TTL_MS = 1_000;
export const MAX_TTL_MS = 86_400_000;
export const DEFAULT_SQLITE_FILE = 'mrtr-demo.sqlite';
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
/** Open TCP connections the HTTP server accepts at once; more are closed on arrival. */
export const DEFAULT_MAX_CONNECTIONS = 256;
export const MAX_MAX_CONNECTIONS = 65_535;
/** Entries of the in-memory replay store (--store memory). */
export const MEMORY_STORE_ENTRIES = 100_000;
/** Share of the replay store one principal may fill at most (the default --mint-quota is derived from it). */
export const PRINCIPAL_STORE_SHARE = 0.25;
/** The guard's clock-skew tolerance (its default): a state is refused once `exp` + this has passed. */
export const CLOCK_SKEW_MS = 5_000;

/**
 * The default --mint-quota: states one principal may hold at once, a quarter of the memory store's entries
 * (25,000), whatever --ttl-ms. Core's quota counts mints in a sliding window never shorter than a state's
 * lifetime (ttl + 2 × skew, which is also how long a replay store keeps a consumed state), so at most this
 * many of one principal's states are alive, or held by the store, at any moment.
 */
export const DEFAULT_MINT_QUOTA = Math.floor(MEMORY_STORE_ENTRIES * PRINCIPAL_STORE_SHARE);

/**
 * The guard's `mintQuota` for each of `codecs` adapters that share one replay store (--codec all): the
 * principal's quota shared out between them (at least 1 each), so that together they allow at most the quota
 * at once. No `windowMs`: the guard's default, one state lifetime. `undefined` (--mint-quota off): no bound.
 */
export function mintQuotaFor(quota: number | undefined, codecs: number): MintQuota | undefined {
  return quota === undefined ? undefined : { max: Math.max(1, Math.floor(quota / codecs)) };
}

/** Pending connect links one principal may hold (see ledger.ts). */
export const DEFAULT_CONNECT_MAX_PENDING = 5;
/** Lifetime of an unconfirmed connect link. */
export const DEFAULT_CONNECT_LINK_TTL_MS = 600_000;

export const USAGE = `Usage: mrtr-demo [--host 127.0.0.1] [--port 3000] [--codec hmac|jwe|aead|all]
                 [--store memory|sqlite|redis|postgres] [--sqlite-file PATH] [--ttl-ms N]
                 [--max-connections N] [--mint-quota N|off] [--trust-proxy N] [--fixtures conformance]
                 [--stdio] [--log pretty|json|off]

A real MCP 2026-07-28 server showing protected multi round-trip requests (SEP-2322).

Options:
  --host HOST          address to bind (default 127.0.0.1)
  --port N             TCP port, 0 picks a free one (default 3000; 0 with --stdio)
  --codec NAME         request-state codec: hmac | jwe | aead (default hmac); all serves the three at once on
                       /mcp/hmac, /mcp/jwe and /mcp/aead (and hmac on /mcp) for the playground's comparison
  --store NAME         replay store: memory | sqlite | redis | postgres (default memory)
  --sqlite-file PATH   SQLite database file for --store sqlite (default ./mrtr-demo.sqlite)
  --ttl-ms N           lifetime of one round's request state in ms, ${MIN_TTL_MS}-${MAX_TTL_MS} (default ${DEFAULT_TTL_MS});
                       the guard tolerates 5 s of clock skew, so a state is accepted up to 5 s past its exp
  --max-connections N  open HTTP connections accepted at once, 1-${MAX_MAX_CONNECTIONS} (default ${DEFAULT_MAX_CONNECTIONS});
                       further connections are closed on arrival
  --mint-quota N|off   request states one principal may hold at once: at most N minted in any state lifetime
                       (--ttl-ms + 10 s of clock skew), 1-1000000000 (default ${DEFAULT_MINT_QUOTA}, a quarter of the
                       ${MEMORY_STORE_ENTRIES.toLocaleString('en-US')}-entry memory store, whatever --ttl-ms; --codec all gives each codec N/3);
                       past it a call answers -32600 "Too many requests"; off removes the bound
  --keys-file PATH     read the key ring from a file (MRTR_KEYS format or a JWK Set, e.g. written by
                       npx @mrtr/cli keys rotate --file PATH) and re-read it when it changes: a rotation
                       without a restart; instead of MRTR_KEYS
  --trust-proxy N      proxies in front of the demo that append to X-Forwarded-For, 0-16 (default 0): anonymous
                       callers are bounded per client address (2025-era sessions, tasks), read from the socket,
                       or that many hops in from the right of X-Forwarded-For; 0 never reads the header
  --fixtures conformance
                       also register the tools and prompts of the official conformance suite
  --stdio              serve MCP on stdin/stdout; HTTP then only serves the connect pages and /metrics
  --log pretty|json|off
                       one line per request-state event on stderr (flow id, round, method, target, codec,
                       kid, token bytes, outcome, duration; never a token, key or argument value);
                       default pretty on a terminal, json otherwise
  -h, --help           show this help

Environment:
  MRTR_KEYS            key ring "k2:<base64url>,k1:<base64url>" (first seals) or a JWK Set's JSON (keys
                       with notBefore/notAfter follow their schedule); without it or --keys-file an
                       ephemeral key is generated (one instance only; refused with a shared store);
                       with a shared store every instance must hold the fleet's keys (checked at start)
  MRTR_DEMO_NAMESPACE  ledger namespace in the store (default mrtr-demo): one per fleet
  MRTR_DEMO_TOKENS     "alice:<token>,bob:<token>" turns on bearer-token auth
  REDIS_URL            for --store redis (default ${DEFAULT_REDIS_URL})
  DATABASE_URL         for --store postgres (required)
  MRTR_DEMO_ALLOWED_HOSTS
                       extra Host values to accept, comma-separated (e.g. behind a proxy)
  MRTR_DEMO_CONNECT_MAX_PENDING
                       pending connect_account links one principal may hold, 1-100 (default ${DEFAULT_CONNECT_MAX_PENDING})
  MRTR_DEMO_CONNECT_LINK_TTL_MS
                       lifetime of an unconfirmed connect link in ms, 1000-3600000 (default ${DEFAULT_CONNECT_LINK_TTL_MS})
  MRTR_DEMO_CLOCK_OFFSET_MS
                       a test aid: run this instance's clock N ms off the machine's (negative: behind), to see a
                       drifting instance refuse with ERR_CLOCK_SKEW on a store with a clock (default 0)
  MRTR_DEMO_LEASE_MS   a test aid: the lease of a round's claim in ms (default 30000): how soon an identical retry
                       learns that an instance died mid-round ("outcome unknown")
  MRTR_DEMO_CRASH_AFTER_EFFECT
                       a test aid: kill this process (SIGKILL) right after the named tool's effect (deploy,
                       delete_files, rollout), before its outcome is recorded
`;

/**
 * {@link USAGE} naming the command as it was run: `MRTR_DEMO_COMMAND` (set by the repository's `pnpm demo`),
 * else `mrtr-demo` when started through that bin, else `node <path of the script>` relative to the working folder.
 */
export function usageFor(env: NodeJS.ProcessEnv, script: string | undefined = process.argv[1]): { usage: string; command: string } {
  const command =
    env.MRTR_DEMO_COMMAND?.trim() ||
    (script === undefined || basename(script) === 'mrtr-demo' ? 'mrtr-demo' : `node ${relative(process.cwd(), script) || script}`);
  return { usage: USAGE.replace(/^Usage: mrtr-demo/, `Usage: ${command}`), command };
}

/** A command-line or environment problem: printed with the usage hint, exit code 2. */
export class UsageError extends Error {}

export interface CliOptions {
  host: string;
  /** Whether --host was given. */
  hostGiven: boolean;
  port: number;
  /** `all`: the three codecs at once, each on its own path (HTTP only). */
  codec: CodecName | 'all';
  store: StoreName;
  sqliteFile: string;
  /** --keys-file: the key ring's file, re-read when it changes; `undefined`: MRTR_KEYS or an ephemeral key. */
  keysFile: string | undefined;
  ttlMs: number;
  maxConnections: number;
  /** Proxies in front that append to X-Forwarded-For (`trustProxy` of `createHttpHandler`). */
  trustProxy: number;
  /** States one principal may hold at once (minted in any state lifetime); `undefined` = no bound (--mint-quota off). */
  mintQuota: number | undefined;
  fixtures: 'conformance' | undefined;
  stdio: boolean;
  /** `undefined`: pretty on a terminal, json otherwise (decided where the output is known). */
  log: 'pretty' | 'json' | 'off' | undefined;
  help: boolean;
}

function oneOf<T extends string>(flag: string, value: string | undefined, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if ((allowed as readonly string[]).includes(value)) return value as T;
  throw new UsageError(`${flag} must be one of ${allowed.join(', ')} (got "${value}")`);
}

function integer(flag: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!/^\d{1,9}$/.test(value)) throw new UsageError(`${flag} must be an integer (got "${value}")`);
  const n = Number(value);
  if (n < min || n > max) throw new UsageError(`${flag} must be between ${min} and ${max} (got ${n})`);
  return n;
}

/** Parses the command line (strict: unknown flags, positionals and missing values are errors). */
export function parseCli(argv: readonly string[]): CliOptions {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        host: { type: 'string' },
        port: { type: 'string' },
        codec: { type: 'string' },
        store: { type: 'string' },
        'sqlite-file': { type: 'string' },
        'keys-file': { type: 'string' },
        'ttl-ms': { type: 'string' },
        'max-connections': { type: 'string' },
        'mint-quota': { type: 'string' },
        'trust-proxy': { type: 'string' },
        fixtures: { type: 'string' },
        stdio: { type: 'boolean' },
        log: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const str = (key: string): string | undefined => values[key] as string | undefined;
  const stdio = values.stdio === true;
  const host = str('host') ?? DEFAULT_HOST;
  if (!/^(?:[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?)$/.test(host))
    throw new UsageError(`--host is not a valid host name or address`);
  const store = oneOf('--store', str('store'), STORES, 'memory');
  const sqliteFile = str('sqlite-file');
  if (sqliteFile !== undefined && store !== 'sqlite') throw new UsageError('--sqlite-file needs --store sqlite');
  if (sqliteFile !== undefined && sqliteFile.length === 0) throw new UsageError('--sqlite-file must not be empty');
  const keysFile = str('keys-file');
  if (keysFile !== undefined && keysFile.length === 0) throw new UsageError('--keys-file must not be empty');
  const fixtures = str('fixtures');
  if (fixtures !== undefined && fixtures !== 'conformance') throw new UsageError(`--fixtures must be "conformance" (got "${fixtures}")`);
  if (str('codec') === 'all' && stdio) throw new UsageError('--codec all serves three HTTP endpoints; it cannot be used with --stdio');
  const log = str('log');
  if (log !== undefined && log !== 'pretty' && log !== 'json' && log !== 'off') {
    throw new UsageError(`--log must be one of pretty, json, off (got "${log}")`);
  }
  const ttlMs = integer('--ttl-ms', str('ttl-ms'), DEFAULT_TTL_MS, MIN_TTL_MS, MAX_TTL_MS);
  const quota = str('mint-quota');
  const mintQuota = quota === 'off' ? undefined : integer('--mint-quota', quota, DEFAULT_MINT_QUOTA, 1, 1_000_000_000);
  return {
    host,
    hostGiven: str('host') !== undefined,
    port: integer('--port', str('port'), stdio ? 0 : DEFAULT_PORT, 0, 65_535),
    codec: oneOf('--codec', str('codec'), [...CODECS, 'all'] as const, 'hmac'),
    store,
    sqliteFile: sqliteFile ?? DEFAULT_SQLITE_FILE,
    keysFile,
    ttlMs,
    mintQuota,
    maxConnections: integer('--max-connections', str('max-connections'), DEFAULT_MAX_CONNECTIONS, 1, MAX_MAX_CONNECTIONS),
    trustProxy: integer('--trust-proxy', str('trust-proxy'), 0, 0, 16),
    fixtures,
    stdio,
    log,
    help: values.help === true,
  };
}

export interface KeySetting {
  keys: KeyRing;
  /** True when neither MRTR_KEYS nor --keys-file was given and a key was generated for this process. */
  ephemeral: boolean;
  /** Stops following the key file or the schedule (idempotent); the ring keeps its last keys. */
  close(): void;
}

/**
 * The key ring: from `--keys-file` (re-read when the file changes, and every 5 minutes as a safety net), else from
 * MRTR_KEYS (core's format or a JWK Set; a scheduled set is followed by a key provider), else an ephemeral key for this
 * process. Set but empty (a secret binding that did not resolve, `MRTR_KEYS=` in a .env file) is an error, never a
 * random key; so is giving both. Errors never echo key material (core's messages name the kid at most).
 */
export async function readKeys(env: NodeJS.ProcessEnv, keysFile?: string, warn?: (line: string) => void): Promise<KeySetting> {
  const text = env.MRTR_KEYS;
  if (keysFile !== undefined) {
    if (text !== undefined) throw new UsageError('MRTR_KEYS and --keys-file are both given: keep one source of keys');
    return followKeys(`--keys-file ${keysFile}`, fileKeySource(keysFile), keysFile, warn);
  }
  if (text === undefined) return { keys: KeyRing.generate('ephemeral'), ephemeral: true, close() {} };
  if (text.trim() === '')
    throw new UsageError('MRTR_KEYS is set but empty: set a key ring (npx @mrtr/cli keygen) or unset it for an ephemeral key');
  let keys: ReturnType<typeof parseKeySet>;
  try {
    keys = parseKeySet(text);
  } catch (error) {
    throw new UsageError(`MRTR_KEYS is invalid: ${error instanceof Error ? error.message : 'parse error'}`);
  }
  if (keys.every((k) => k.notBefore === undefined && k.notAfter === undefined)) {
    try {
      return { keys: new KeyRing(keys), ephemeral: false, close() {} };
    } catch (error) {
      throw new UsageError(`MRTR_KEYS is invalid: ${error instanceof Error ? error.message : 'parse error'}`);
    }
  }
  // A scheduled JWK Set: the provider switches keys at their notBefore/notAfter without a restart.
  return followKeys('MRTR_KEYS', () => text, undefined, warn);
}

async function followKeys(
  source: string,
  load: () => string | Promise<string>,
  watchPath: string | undefined,
  warn: ((line: string) => void) | undefined,
): Promise<KeySetting> {
  let provider: KeyProvider;
  try {
    provider = await KeyProvider.create({
      load,
      onError: (error) => warn?.(`${source}: the last good keys stay in force (${error.code}: ${causeText(error)})`),
    });
  } catch (error) {
    throw new UsageError(`${source} is invalid: ${causeText(error)}`);
  }
  const stopWatching = watchPath === undefined ? () => {} : watchKeyFile(provider, watchPath);
  return {
    keys: provider.keys,
    ephemeral: false,
    close() {
      stopWatching();
      provider.close();
    },
  };
}

/** The innermost message of a key source error (a file error, a parse error), for one line on stderr. */
function causeText(error: unknown): string {
  let at: unknown = error;
  for (let depth = 0; depth < 4 && at instanceof Error && at.cause instanceof Error; depth++) at = at.cause;
  return escapeForTerminal(at instanceof Error ? at.message : String(at));
}

/** Bearer tokens: SHA-256 of the token → principal name. */
export type TokenTable = ReadonlyMap<string, string>;

const PRINCIPAL_NAME = /^[A-Za-z0-9_.@-]{1,64}$/;
const TOKEN_TEXT = /^[\x21-\x2b\x2d-\x7e]{16,512}$/; // printable ASCII without ','

export function tokenDigest(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('base64url');
}

/** Parses MRTR_DEMO_TOKENS="alice:<token>,bob:<token>"; `undefined` when unset (anonymous mode). */
export function readTokens(env: NodeJS.ProcessEnv): TokenTable | undefined {
  const text = env.MRTR_DEMO_TOKENS;
  if (text === undefined || text.trim() === '') return undefined;
  const table = new Map<string, string>();
  for (const part of text.split(',')) {
    const entry = part.trim();
    if (entry === '') continue;
    const colon = entry.indexOf(':');
    const name = colon > 0 ? entry.slice(0, colon) : '';
    const token = colon > 0 ? entry.slice(colon + 1) : '';
    if (!PRINCIPAL_NAME.test(name))
      throw new UsageError('MRTR_DEMO_TOKENS: each entry must be "name:token" with a name of [A-Za-z0-9_.@-]');
    if (!TOKEN_TEXT.test(token)) throw new UsageError(`MRTR_DEMO_TOKENS: the token of "${name}" must be 16-512 printable characters`);
    const digest = tokenDigest(token);
    if (table.has(digest)) throw new UsageError('MRTR_DEMO_TOKENS: two principals share one token');
    table.set(digest, name);
  }
  if (table.size === 0) throw new UsageError('MRTR_DEMO_TOKENS is set but names no token');
  return table;
}

/** Extra allowed Host header values from MRTR_DEMO_ALLOWED_HOSTS (lower-cased `host[:port]`). */
export function readAllowedHosts(env: NodeJS.ProcessEnv): string[] {
  const text = env.MRTR_DEMO_ALLOWED_HOSTS;
  if (text === undefined) return [];
  return text
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter((h) => h.length > 0);
}

/**
 * The ledger namespace of the replay and task stores (MRTR_DEMO_NAMESPACE, default the audience): every instance of
 * one fleet uses the same one; another fleet (other keys) on the same Redis or database needs its own.
 */
export function readNamespace(env: NodeJS.ProcessEnv, fallback: string): string {
  const text = env.MRTR_DEMO_NAMESPACE;
  if (text === undefined || text === '') return fallback;
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(text)) throw new UsageError('MRTR_DEMO_NAMESPACE must be 1-64 characters of [A-Za-z0-9_.-]');
  return text;
}

/**
 * A test aid: this instance's clock runs `MRTR_DEMO_CLOCK_OFFSET_MS` off the machine's (negative: behind), to show what
 * a fleet does with an instance whose clock drifted. 0 when unset.
 */
export function readClockOffsetMs(env: NodeJS.ProcessEnv): number {
  const text = env.MRTR_DEMO_CLOCK_OFFSET_MS;
  if (text === undefined || text === '') return 0;
  if (!/^-?\d{1,10}$/.test(text) || Math.abs(Number(text)) > 86_400_000) {
    throw new UsageError('MRTR_DEMO_CLOCK_OFFSET_MS must be an integer from -86400000 to 86400000');
  }
  return Number(text);
}

/** Test aids for the fault checks (see USAGE): the lease of a round's claim, and a crash right after a tool's effect. */
export interface FaultAids {
  leaseMs: number | undefined;
  crashAfterEffect: string | undefined;
}

/** {@link FaultAids} from MRTR_DEMO_LEASE_MS and MRTR_DEMO_CRASH_AFTER_EFFECT. */
export function readFaultAids(env: NodeJS.ProcessEnv): FaultAids {
  const lease = env.MRTR_DEMO_LEASE_MS;
  if (lease !== undefined && lease !== '' && (!/^\d{1,7}$/.test(lease) || Number(lease) < 3)) {
    throw new UsageError('MRTR_DEMO_LEASE_MS must be an integer from 3 to 9999999');
  }
  const crash = env.MRTR_DEMO_CRASH_AFTER_EFFECT;
  if (crash !== undefined && crash !== '' && !(DEMO_EFFECTS as readonly string[]).includes(crash)) {
    throw new UsageError(`MRTR_DEMO_CRASH_AFTER_EFFECT must be one of ${DEMO_EFFECTS.join(', ')}`);
  }
  return { leaseMs: lease ? Number(lease) : undefined, crashAfterEffect: crash || undefined };
}

/** How long connect_account waits for the connect page to be completed before asking again. */
export function readConnectWaitMs(env: NodeJS.ProcessEnv): number {
  const text = env.MRTR_DEMO_CONNECT_WAIT_MS;
  if (text === undefined || text === '') return 5_000;
  if (!/^\d{1,6}$/.test(text) || Number(text) > 60_000) throw new UsageError('MRTR_DEMO_CONNECT_WAIT_MS must be 0-60000');
  return Number(text);
}

/** Per-principal bounds of the connect ledger from MRTR_DEMO_CONNECT_MAX_PENDING / MRTR_DEMO_CONNECT_LINK_TTL_MS. */
export function readLedgerLimits(env: NodeJS.ProcessEnv): {
  maxPendingPerPrincipal: number;
  maxLinksPerPrincipal: number;
  pendingTtlMs: number;
} {
  const pending = env.MRTR_DEMO_CONNECT_MAX_PENDING;
  const ttl = env.MRTR_DEMO_CONNECT_LINK_TTL_MS;
  let maxPendingPerPrincipal = DEFAULT_CONNECT_MAX_PENDING;
  let pendingTtlMs = DEFAULT_CONNECT_LINK_TTL_MS;
  if (pending !== undefined && pending !== '') {
    if (!/^\d{1,3}$/.test(pending) || Number(pending) < 1 || Number(pending) > 100)
      throw new UsageError('MRTR_DEMO_CONNECT_MAX_PENDING must be 1-100');
    maxPendingPerPrincipal = Number(pending);
  }
  if (ttl !== undefined && ttl !== '') {
    if (!/^\d{1,7}$/.test(ttl) || Number(ttl) < 1000 || Number(ttl) > 3_600_000)
      throw new UsageError('MRTR_DEMO_CONNECT_LINK_TTL_MS must be 1000-3600000');
    pendingTtlMs = Number(ttl);
  }
  // Settled links (the page's answer, kept for the flow) give way beyond 4x the pending cap (at least 20).
  return { maxPendingPerPrincipal, maxLinksPerPrincipal: Math.max(20, 4 * maxPendingPerPrincipal), pendingTtlMs };
}

/** Where a store is, for the start line: `redactUrl` of `@mrtr/core/store` (scheme, host, port and database only), escaped for the terminal. */
export function redactUrl(url: string): string {
  return escapeForTerminal(redactCoreUrl(url));
}

import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';
import { KeyRing } from '@mrtr/core';

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

export const USAGE = `Usage: mrtr-demo [--host 127.0.0.1] [--port 3000] [--codec hmac|jwe|aead]
                 [--store memory|sqlite|redis|postgres] [--sqlite-file PATH] [--ttl-ms N]
                 [--fixtures conformance] [--stdio]

A real MCP 2026-07-28 server showing protected multi round-trip requests (SEP-2322).

Options:
  --host HOST          address to bind (default 127.0.0.1)
  --port N             TCP port, 0 picks a free one (default 3000; 0 with --stdio)
  --codec NAME         request-state codec: hmac | jwe | aead (default hmac)
  --store NAME         replay store: memory | sqlite | redis | postgres (default memory)
  --sqlite-file PATH   SQLite database file for --store sqlite (default ./mrtr-demo.sqlite)
  --ttl-ms N           lifetime of one round's request state in ms, ${MIN_TTL_MS}-${MAX_TTL_MS} (default ${DEFAULT_TTL_MS})
  --fixtures conformance
                       also register the tools and prompts of the official conformance suite
  --stdio              serve MCP on stdin/stdout; HTTP then only serves the connect pages
  -h, --help           show this help

Environment:
  MRTR_KEYS            key ring "k2:<base64url>,k1:<base64url>" (first seals); without it an
                       ephemeral key is generated (one instance only)
  MRTR_DEMO_TOKENS     "alice:<token>,bob:<token>" turns on bearer-token auth
  REDIS_URL            for --store redis (default ${DEFAULT_REDIS_URL})
  DATABASE_URL         for --store postgres (required)
  MRTR_DEMO_ALLOWED_HOSTS
                       extra Host values to accept, comma-separated (e.g. behind a proxy)
`;

/** A command-line or environment problem: printed with the usage hint, exit code 2. */
export class UsageError extends Error {}

export interface CliOptions {
  host: string;
  /** Whether --host was given. */
  hostGiven: boolean;
  port: number;
  codec: CodecName;
  store: StoreName;
  sqliteFile: string;
  ttlMs: number;
  fixtures: 'conformance' | undefined;
  stdio: boolean;
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
        'ttl-ms': { type: 'string' },
        fixtures: { type: 'string' },
        stdio: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const str = (key: string): string | undefined => values[key] as string | undefined;
  const stdio = values.stdio === true;
  const host = str('host') ?? DEFAULT_HOST;
  if (!/^(?:[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?)$/.test(host)) throw new UsageError(`--host is not a valid host name or address`);
  const store = oneOf('--store', str('store'), STORES, 'memory');
  const sqliteFile = str('sqlite-file');
  if (sqliteFile !== undefined && store !== 'sqlite') throw new UsageError('--sqlite-file needs --store sqlite');
  if (sqliteFile !== undefined && sqliteFile.length === 0) throw new UsageError('--sqlite-file must not be empty');
  const fixtures = str('fixtures');
  if (fixtures !== undefined && fixtures !== 'conformance') throw new UsageError(`--fixtures must be "conformance" (got "${fixtures}")`);
  return {
    host,
    hostGiven: str('host') !== undefined,
    port: integer('--port', str('port'), stdio ? 0 : DEFAULT_PORT, 0, 65_535),
    codec: oneOf('--codec', str('codec'), CODECS, 'hmac'),
    store,
    sqliteFile: sqliteFile ?? DEFAULT_SQLITE_FILE,
    ttlMs: integer('--ttl-ms', str('ttl-ms'), DEFAULT_TTL_MS, MIN_TTL_MS, MAX_TTL_MS),
    fixtures,
    stdio,
    help: values.help === true,
  };
}

export interface KeySetting {
  keys: KeyRing;
  /** True when no MRTR_KEYS was given and a key was generated for this process. */
  ephemeral: boolean;
}

/** Reads MRTR_KEYS (core's format); never echoes key material in errors. */
export function readKeys(env: NodeJS.ProcessEnv): KeySetting {
  const text = env.MRTR_KEYS;
  if (text === undefined || text.trim() === '') return { keys: KeyRing.generate('ephemeral'), ephemeral: true };
  try {
    return { keys: KeyRing.parse(text), ephemeral: false };
  } catch (error) {
    // KeyRing's messages name the kid at most, never the secret.
    throw new UsageError(`MRTR_KEYS is invalid: ${error instanceof Error ? error.message : 'parse error'}`);
  }
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
    if (!PRINCIPAL_NAME.test(name)) throw new UsageError('MRTR_DEMO_TOKENS: each entry must be "name:token" with a name of [A-Za-z0-9_.@-]');
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

/** How long connect_account waits for the connect page to be completed before asking again. */
export function readConnectWaitMs(env: NodeJS.ProcessEnv): number {
  const text = env.MRTR_DEMO_CONNECT_WAIT_MS;
  if (text === undefined || text === '') return 5_000;
  if (!/^\d{1,6}$/.test(text) || Number(text) > 60_000) throw new UsageError('MRTR_DEMO_CONNECT_WAIT_MS must be 0-60000');
  return Number(text);
}

/** `redis://user:secret@host` → `redis://user:***@host` for log lines. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparsable URL)';
  }
}

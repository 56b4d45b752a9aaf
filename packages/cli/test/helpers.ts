import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createAeadCodec } from '@mrtr/codec-aead';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { createJweCodec } from '@mrtr/codec-jwe';
import { type CodecFactory, createStateGuard, type JsonValue, KeyRing, type OpenedState } from '@mrtr/core';
import { it } from 'vitest';

/** The built CLI: the tests run it as a child process, as a user would. */
export const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `node dist/cli.js ...args` with only the given environment (plus PATH/HOME), optional stdin,
 * killed after `timeoutMs`.
 */
export function runCli(
  args: string[],
  options: { env?: Record<string, string>; input?: string; timeoutMs?: number } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
      timeout: options.timeoutMs ?? 30_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (signal !== null) reject(new Error(`mrtr ${args.join(' ')} was killed (${signal}); stderr: ${stderr}`));
      else resolve({ code, stdout, stderr });
    });
    // A CLI that exits before reading its input (a usage error) closes the pipe first: the write then fails with
    // EPIPE, which is no failure of the run (its exit code and output are what the tests check). Anything else is.
    child.stdin.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') reject(error);
    });
    child.stdin.end(options.input ?? '');
  });
}

export const CODEC_FACTORIES: Record<'hmac' | 'jwe' | 'aead', CodecFactory> = {
  hmac: createHmacCodec,
  jwe: createJweCodec,
  aead: createAeadCodec,
};

/** Fixed test keys (32 bytes each, one base64url, one standard base64). */
export const K2 = 'k2:8Xq6m5b1rYt0uQJ8wG3zNfVdLhPkEoIsAcR2yT9nU4M';
export const K1 = 'k1:3n0vJm2KqX1Y8bZtRwU7cE5hLfA9pGsDiO4TyHkNeQ0=';
export const KEYS = `${K2},${K1}`;
export const AUDIENCE = 'https://mcp.example.com/mcp';
export const T0 = Date.parse('2026-01-15T12:00:00.000Z');
export const REQUEST = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };

export interface MintOptions {
  keys?: string;
  now?: number;
  audience?: string;
  request?: { method?: string; target?: string; arguments?: unknown; principal?: string | undefined };
  unauthenticated?: string;
  ttlMs?: number;
  flowTtlMs?: number;
  data?: JsonValue;
  rounds?: number;
}

/** Mints a real token with core's guard (rounds > 1 re-mints as a continued flow). */
export async function mint(codec: 'hmac' | 'jwe' | 'aead', options: MintOptions = {}): Promise<string> {
  const now = options.now ?? T0;
  const guard = createStateGuard({
    keys: KeyRing.parse(options.keys ?? KEYS),
    codec: CODEC_FACTORIES[codec],
    audience: options.audience ?? AUDIENCE,
    now: () => now,
    maxRounds: 1000,
    ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
    ...(options.flowTtlMs === undefined ? {} : { flowTtlMs: options.flowTtlMs }),
    ...(options.unauthenticated === undefined ? {} : { unauthenticated: { principal: options.unauthenticated } }),
  });
  const request = { ...REQUEST, ...options.request };
  let token = await guard.mint(options.data ?? { confirmed: false }, request);
  for (let round = 2; round <= (options.rounds ?? 1); round++) {
    const opened: OpenedState = await guard.verify(token, request);
    token = await guard.mint(options.data ?? { confirmed: false }, request, { continues: opened });
  }
  return token;
}

// Services: REDIS_URL / DATABASE_URL unset → those tests skip with a printed reason, unless
// MRTR_REQUIRE_SERVICES=1, where a missing service fails.
export const REDIS_URL = process.env.REDIS_URL === '' ? undefined : process.env.REDIS_URL;
export const DATABASE_URL = process.env.DATABASE_URL === '' ? undefined : process.env.DATABASE_URL;
export const REQUIRE_SERVICES = process.env.MRTR_REQUIRE_SERVICES === '1';

/** Call at the top of a test file: prints why a service's tests skip, or registers a failing test when required. */
export function gateService(file: string, name: 'REDIS_URL' | 'DATABASE_URL'): void {
  const value = name === 'REDIS_URL' ? REDIS_URL : DATABASE_URL;
  if (value !== undefined) return;
  if (REQUIRE_SERVICES) {
    it(`${name} is required (MRTR_REQUIRE_SERVICES=1) but not set`, () => {
      throw new Error(`${name} must be set when MRTR_REQUIRE_SERVICES=1`);
    });
  } else {
    console.warn(`[cli] ${file}: tests that need ${name} skipped because it is not set`);
  }
}

#!/usr/bin/env node
// `pnpm dev`: the Next.js app under `next dev` on 127.0.0.1, with nothing else to start.
//   - `.env.local` (git-ignored; Next.js reads it), MRTR_KEYS and MCP_API_KEYS, is written from `.env.local.example`
//     with fresh random values when it does not exist yet; an existing one is used as it is.
//   - Upstash: unless UPSTASH_REDIS_REST_URL is set (in the environment or .env.local), the Upstash REST shim
//     (scripts/upstash-rest-shim.mjs, in this process) answers Upstash's REST API in front of the Redis at REDIS_URL
//     (redis://127.0.0.1:6379), and its URL and token reach Next.js as UPSTASH_REDIS_REST_URL/_TOKEN.
//   - The route is compiled before "Ready." (one request to /mcp), so the first real request is not the slow one.
//
//   node scripts/dev.mjs [--port 3000]
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { option, start, stopOnExit } from '../../../scripts/example-harness.mjs';
import { startUpstashRestShim } from '../../../scripts/upstash-rest-shim.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
let shim;
stopOnExit({ cleanup: () => shim?.close() });

const envLocal = join(root, '.env.local');
if (!existsSync(envLocal)) {
  const text = readFileSync(join(root, '.env.local.example'), 'utf8')
    .replace('<random 32-byte key>', randomBytes(32).toString('base64url'))
    .replace('<random key>', `dev-${randomBytes(18).toString('base64url')}`);
  writeFileSync(envLocal, text, { mode: 0o600 });
  console.log('wrote .env.local (MRTR_KEYS, MCP_API_KEYS) from .env.local.example');
}
const local = readFileSync(envLocal, 'utf8');
const token = /^MCP_API_KEYS=[^=,\s]+=([^,\s]+)/m.exec(local)?.[1];
if (token === undefined) throw new Error('.env.local has no MCP_API_KEYS=user=key line: delete it to have it written again');

const env = { NEXT_TELEMETRY_DISABLED: '1' };
if (!process.env.UPSTASH_REDIS_REST_URL && !/^UPSTASH_REDIS_REST_URL=/m.test(local)) {
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  await reachable(redisUrl);
  shim = await startUpstashRestShim(redisUrl);
  env.UPSTASH_REDIS_REST_URL = shim.url;
  env.UPSTASH_REDIS_REST_TOKEN = shim.token;
  console.log(`Upstash REST shim: ${shim.url} → ${redisUrl}`);
}

/** Fails with a clear message when nothing listens at the Redis URL (the shim would only fail on the first call). */
async function reachable(redisUrl) {
  const { hostname, port } = new URL(redisUrl);
  await new Promise((resolve, reject) => {
    const socket = connect(Number(port || 6379), hostname || '127.0.0.1', () => socket.end(resolve));
    socket.setTimeout(5_000, () => socket.destroy(new Error('timed out')));
    socket.on('error', (error) =>
      reject(
        new Error(
          `no Redis at ${redisUrl} (${error.message}): start one (redis-server), set REDIS_URL, or set UPSTASH_REDIS_REST_URL/_TOKEN`,
        ),
      ),
    );
  });
}

const port = Number(option('port', process.env.PORT ?? '3000'));
const next = join(createRequire(join(root, 'package.json')).resolve('next/package.json'), '..', 'dist', 'bin', 'next');
const dev = start('next', process.execPath, [next, 'dev', '--hostname', '127.0.0.1', '--port', String(port)], { cwd: root, env });
await dev.waitFor(/Ready in/, 120_000);
const url = `http://127.0.0.1:${port}/mcp`;
const warm = await fetch(url, { method: 'POST', signal: AbortSignal.timeout(120_000) }); // compiles the route (401: no token)
await warm.arrayBuffer();
console.log(`MCP endpoint: ${url}`);
console.log(`Bearer token: ${token}`);
console.log('Ready.');
const { code, signal } = await dev.exited;
await shim?.close();
process.exit(code ?? (signal ? 1 : 0));

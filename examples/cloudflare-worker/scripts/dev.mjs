#!/usr/bin/env node
// `pnpm dev`: the Worker under `wrangler dev` (local mode: workerd through miniflare, the Durable Object in local
// SQLite under .wrangler/state), on 127.0.0.1, with nothing else to start.
//   - `.dev.vars` (git-ignored), the Worker's secrets MRTR_KEYS and API_TOKENS, is written from `.dev.vars.example`
//     with fresh random values when it does not exist yet; an existing one is used as it is.
//   - wrangler 4 needs Node 22.12 or later: on an older Node this runs it under the npm `node@22` package
//     (`npx -y -p node@22 node …/wrangler.js dev`), the same wrangler from this example's devDependencies.
//   - No request leaves the machine: the `Request.cf` download and wrangler's metrics are switched off.
//
//   node scripts/dev.mjs [--port 8787] [--persist-to dir]
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, option, start, stopOnExit } from '../../../scripts/example-harness.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
stopOnExit();

// .dev.vars from .dev.vars.example, once.
const devVars = join(root, '.dev.vars');
if (!existsSync(devVars)) {
  const text = readFileSync(join(root, '.dev.vars.example'), 'utf8')
    .replace('<random 32-byte key>', randomBytes(32).toString('base64url'))
    .replace('<random token>', `dev-${randomBytes(18).toString('base64url')}`);
  writeFileSync(devVars, text, { mode: 0o600 });
  console.log('wrote .dev.vars (MRTR_KEYS, API_TOKENS) from .dev.vars.example');
}
const apiTokens = /^API_TOKENS=(.*)$/m.exec(readFileSync(devVars, 'utf8'))?.[1];
const token = apiTokens === undefined ? undefined : Object.keys(JSON.parse(apiTokens))[0];
if (token === undefined) throw new Error('.dev.vars has no API_TOKENS line with a token: delete it to have it written again');

const port = Number(option('port', process.env.PORT ?? '8787'));
const wrangler = join(createRequire(join(root, 'package.json')).resolve('wrangler/package.json'), '..', 'bin', 'wrangler.js');
const args = [
  wrangler,
  'dev',
  '--ip',
  '127.0.0.1',
  '--port',
  String(port),
  '--inspector-ip',
  '127.0.0.1',
  '--inspector-port',
  String(await freePort()),
  '--show-interactive-dev-session=false',
  ...(option('persist-to') === undefined ? [] : ['--persist-to', option('persist-to')]),
];
// pnpm's npm_config_* settings make npx warn about every one it does not know.
for (const name of Object.keys(process.env)) if (/^npm_config_/i.test(name)) delete process.env[name];
const [major, minor] = process.versions.node.split('.').map(Number);
const modern = major > 22 || (major === 22 && minor >= 12);
const npx = process.platform === 'win32' ? 'npx.cmd' : 'npx';
const dev = modern
  ? start('wrangler', process.execPath, args, { cwd: root, env: quiet() })
  : start('wrangler', npx, ['-y', '-p', 'node@22', 'node', ...args], { cwd: root, env: quiet() });

function quiet() {
  return {
    CLOUDFLARE_CF_FETCH_ENABLED: 'false', // no download of the Request.cf object from workers.cloudflare.com
    WRANGLER_SEND_METRICS: 'false',
    WRANGLER_SEND_ERROR_REPORTS: 'false',
    CLOUDFLARE_TELEMETRY_DISABLED: '1',
  };
}

await dev.waitFor(new RegExp(`Ready on http://127\\.0\\.0\\.1:${port}`), 180_000);
console.log(`MCP endpoint: http://127.0.0.1:${port}/mcp`);
console.log(`Bearer token: ${token}`);
console.log('Ready.');
const { code, signal } = await dev.exited;
process.exit(code ?? (signal ? 1 : 0));

#!/usr/bin/env node
// `pnpm demo -- <flags>`: builds the demo server and what it depends on, then runs it with <flags>.
import { spawnSync, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === '--'));
const build = spawnSync('pnpm', ['exec', 'turbo', 'run', 'build', '--filter=@mrtr/demo-server...', '--output-logs=errors-only'], {
  cwd: root,
  stdio: 'inherit',
});
if (build.status !== 0) process.exit(build.status ?? 1);
const child = spawn(process.execPath, ['apps/demo-server/dist/cli.js', ...args], { cwd: root, stdio: 'inherit' });
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

#!/usr/bin/env node
// `pnpm demo -- <flags>`: builds the demo server and what it depends on, then runs it with <flags>.
//
// The build shows one line per package (a first build takes a few minutes on 2 cores; later ones come from
// turbo's cache in seconds). Ctrl-C reaches the server (it shuts down and exits 0) and this script exits with
// the server's code.
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === '--'));
process.stderr.write('mrtr demo: building @mrtr/demo-server and the packages it uses (one line per package)…\n');
const build = spawnSync(
  'pnpm',
  ['exec', 'turbo', 'run', 'build', '--filter=@mrtr/demo-server...', '--output-logs=hash-only', '--log-prefix=task'],
  { cwd: root, stdio: 'inherit' },
);
if (build.status !== 0) process.exit(build.status ?? 1);
// biome-ignore lint/suspicious/noUndeclaredEnvVars: read at run time by the server, never by a turbo task
const env = { ...process.env, MRTR_DEMO_COMMAND: process.env.MRTR_DEMO_COMMAND || 'pnpm demo --' };
const child = spawn(process.execPath, ['apps/demo-server/dist/cli.js', ...args], { cwd: root, stdio: 'inherit', env });
// A terminal's Ctrl-C signals the whole process group: the server gets SIGINT itself (passing it on would be a
// second one, which the server takes as "exit now"). A SIGTERM sent to this script alone is passed on.
process.on('SIGINT', () => {});
process.on('SIGTERM', () => {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
});
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

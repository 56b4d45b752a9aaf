#!/usr/bin/env node
// Publish check: release every public package to a throwaway registry exactly as a release does, then install
// each one back from that registry like a user would, and run its README's quick start.
//
//   node scripts/publish-check.mjs        (needs REDIS_URL / DATABASE_URL for the store quick starts)
//
// 1. Installs Verdaccio (pinned) with npm into a temp dir and starts it on 127.0.0.1 (random free port):
//    @mrtr/* is served only from its local storage, everything else is proxied from the upstream registry.
// 2. Copies the working tree (tracked + untracked, not ignored) to a scratch dir, runs `changeset version`
//    there, then the root `release` script (`turbo run build --filter=./packages/* && changeset publish`),
//    pointed at the scratch registry, with NPM_CONFIG_PROVENANCE=false (the release workflow turns it on).
//    The repository itself is never modified.
// 3. Checks every published tarball: LICENSE, README.md, CHANGELOG.md, repository/homepage/bugs/engines/
//    keywords, no `workspace:` ranges, no relative README links.
// 4. For npm and for pnpm (isolated, no hoisting, strict peers), per package a fresh consumer project:
//    - install: the `npm install …` lines of the README's Install section, verbatim (`pnpm add …` for pnpm);
//    - esm / cjs: `import()` and `require()` of every subpath in the package's `exports`, and
//      `require('@mrtr/core').MrtrError` is a class;
//    - tsc:node16 / tsc:bundler: the README's Quick start ```ts block, verbatim, as quickstart.mts, under
//      `tsc --noEmit` with module node16 and with moduleResolution bundler;
//    - run: that file transpiled with esbuild (types stripped, nothing bundled) and imported by Node with
//      MRTR_KEYS set to a fresh key. It passes when it exits 0, or when its top-level code finished and the
//      process was still up QUICKSTART_GRACE_MS later (a server, an open connection): it is then stopped and
//      counted as "started and stayed up". A quick start that imports `vitest` is a test file and is run with
//      the consumer's own `vitest run` instead.
// Prints one line per package per package manager and a summary; exits 1 on any failure.
//
// Known README failures: scripts/publish-check.known-failures lists packages whose README quick start is known
// to be broken (one `@mrtr/name  reason` per line). Their quick-start checks (install line, tsc, run) are
// reported as KNOWN and do not fail the run; every other check still does, a listed package that now passes
// fails the run (remove it from the list), and MRTR_PUBLISH_CHECK_STRICT=1 ignores the list.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A setting of this script (not a turbo task, so none of these belong in turbo.json). */
const setting = (name) => process.env[name];

// Pinned tools, all installed from the registry at run time (nothing here is a workspace dependency).
// 6.8.0 is the newest Verdaccio that runs on Node 20 (6.9+ needs Node 22).
const VERDACCIO = 'verdaccio@6.8.0';
const TOOLS = ['typescript@5.9.3', '@types/node@20.19.43', 'esbuild@0.27.7'];
const CONCURRENCY = Number(setting('PUBLISH_CHECK_CONCURRENCY') ?? 4);
const GRACE_MS = Number(setting('QUICKSTART_GRACE_MS') ?? 3000);
const TOTAL_TIMEOUT_MS = 20 * 60_000;
const MIN = 60_000;

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const started = Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0)}s`;
const log = (line) => console.log(line);
const tmp = mkdtempSync(join(tmpdir(), 'mrtr-publish-'));
const children = new Set();

// ---------------------------------------------------------------------------------------------- processes

function cleanup() {
  for (const child of children) killTree(child);
  if (setting('PUBLISH_CHECK_KEEP') !== '1') rmSync(tmp, { recursive: true, force: true });
  else log(`(kept ${tmp})`);
}
function killTree(child) {
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {}
}
process.on('exit', cleanup);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => process.exit(130));
setTimeout(() => {
  log(`publish check: FAIL, gave up after ${TOTAL_TIMEOUT_MS / MIN} minutes`);
  process.exit(1);
}, TOTAL_TIMEOUT_MS).unref();

/** Runs a command (own process group, killed with it on timeout); resolves { code, out, timedOut, ms }. */
function run(command, args, { cwd = tmp, env = process.env, timeoutMs = 5 * MIN } = {}) {
  return new Promise((resolvePromise) => {
    const t0 = Date.now();
    const child = spawn(command, args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.stderr.on('data', (chunk) => (out += chunk));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      killTree(child);
    }, timeoutMs);
    const done = (code) => {
      clearTimeout(timer);
      children.delete(child);
      resolvePromise({ code: timedOut ? 124 : code, out, timedOut, ms: Date.now() - t0 });
    };
    child.on('error', (error) => {
      out += String(error);
      done(127);
    });
    child.on('close', (code) => done(code ?? 1));
  });
}

/** Like run, but a non-zero exit ends the whole check with the command's output. */
async function must(what, command, args, options) {
  const result = await run(command, args, options);
  if (result.code !== 0) {
    log(result.out.trimEnd().split('\n').slice(-40).join('\n'));
    log(`publish check: FAIL, ${what}: exit ${result.code}${result.timedOut ? ' (timed out)' : ''}`);
    process.exit(1);
  }
  return result;
}

function freePort() {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePromise(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** The first lines of a command's output, without colours, blank lines and stack frames, indented. */
const tail = (text, lines = 12) =>
  text
    .replace(/\x1b\[[0-9;]*m/g, '')
    .trimEnd()
    .split('\n')
    .filter((line) => line.trim() !== '' && !/^\s+at |^Node\.js v\d/.test(line))
    .slice(0, lines)
    .map((line) => `      ${line.length > 220 ? `${line.slice(0, 220)}…` : line}`)
    .join('\n');

// --------------------------------------------------------------------------------------------- README parsing

/** The body of a `## heading` section (up to the next `## `), or undefined. */
function section(markdown, heading) {
  const lines = markdown.split('\n');
  const start = lines.findIndex((line) => line.trim() === `## ${heading}`);
  if (start < 0) return undefined;
  const end = lines.findIndex((line, i) => i > start && /^## /.test(line));
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n');
}

/** The `npm install …` lines of the Install section's sh blocks, comments removed, as argument lists. */
function installLines(readme) {
  const body = section(readme, 'Install');
  if (body === undefined) return { error: 'the README has no "## Install" section' };
  const lines = [];
  for (const [, code] of body.matchAll(/```(?:sh|bash|shell|console)\n([\s\S]*?)```/g)) {
    for (const raw of code.split('\n')) {
      const line = raw.replace(/^\$\s*/, '').replace(/\s+#.*$/, '').trim();
      const m = /^npm\s+(?:i|install|add)\s+(.+)$/.exec(line);
      if (m) lines.push(m[1].split(/\s+/));
    }
  }
  if (lines.length === 0) return { error: 'the README\'s Install section has no ```sh block with an `npm install …` line' };
  return { lines };
}

/** The first ```ts block of the Quick start section, verbatim (or, for a command-line package, its ```sh block). */
function quickStart(readme, shell = false) {
  const body = section(readme, 'Quick start');
  if (body === undefined) return { error: 'the README has no "## Quick start" section' };
  const m = (shell ? /```(?:sh|bash|console)\n([\s\S]*?)```/ : /```(?:ts|typescript)\n([\s\S]*?)```/).exec(body);
  if (!m) return { error: `the README's Quick start section has no \`\`\`${shell ? 'sh' : 'ts'} block` };
  return { code: m[1] };
}

// ------------------------------------------------------------------------------------------------- registry

async function startRegistry() {
  const dir = join(tmp, 'verdaccio');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{"name":"scratch-registry","private":true}\n');
  const upstream = (
    setting('PUBLISH_CHECK_UPSTREAM') ??
    spawnSync('npm', ['config', 'get', 'registry'], { encoding: 'utf8' }).stdout.trim() ??
    ''
  ).replace(/\/?$/, '/');
  const installed = await must(
    `npm install ${VERDACCIO}`,
    'npm',
    ['install', '--no-audit', '--no-fund', '--no-save', '--loglevel=error', VERDACCIO],
    { cwd: dir, timeoutMs: 5 * MIN },
  );
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  writeFileSync(
    join(dir, 'config.yaml'),
    [
      `storage: ${join(dir, 'storage')}`,
      'auth:',
      '  htpasswd:',
      `    file: ${join(dir, 'htpasswd')}`,
      'uplinks:',
      '  upstream:',
      `    url: ${upstream}`,
      '    timeout: 60s',
      '    max_fails: 10',
      'packages:',
      "  '@mrtr/*':", // served only from local storage: never proxied, so nothing real can stand in
      '    access: $all',
      '    publish: $authenticated',
      "  '**':",
      '    access: $all',
      '    publish: $authenticated',
      '    proxy: upstream',
      'max_body_size: 200mb',
      'log: { type: stdout, format: pretty, level: warn }',
      '',
    ].join('\n'),
  );
  const logFile = join(dir, 'verdaccio.log');
  const child = spawn(
    process.execPath,
    [join(dir, 'node_modules/verdaccio/bin/verdaccio'), '--config', join(dir, 'config.yaml'), '--listen', `127.0.0.1:${port}`],
    { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  children.add(child);
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  child.on('exit', () => writeFileSync(logFile, output));
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      if ((await fetch(`${url}-/ping`, { signal: AbortSignal.timeout(2000) })).ok) break;
    } catch {}
    if (child.exitCode !== null || Date.now() > deadline) {
      log(output);
      log('publish check: FAIL, Verdaccio did not answer within 60 s');
      process.exit(1);
    }
    await sleep(250);
  }
  // A user through the registry's own API (htpasswd): its token authenticates the publish.
  const user = `ci-${randomBytes(4).toString('hex')}`;
  const response = await fetch(`${url}-/user/org.couchdb.user:${user}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: user, password: randomBytes(16).toString('hex') }),
    signal: AbortSignal.timeout(10_000),
  });
  const { token } = await response.json();
  if (!response.ok || !token) {
    log(`publish check: FAIL, could not create a registry user: HTTP ${response.status}`);
    process.exit(1);
  }
  const version = /verdaccio@(\S+)/.exec(installed.out)?.[1] ?? VERDACCIO.split('@')[1];
  log(`registry: Verdaccio ${version} on ${url} (uplink ${upstream} for everything but @mrtr/*) after ${elapsed()}`);
  return { url, token };
}

// ------------------------------------------------------------------------------------------------ main flow

async function main() {
  log(`publish check in ${tmp}`);
  const scratch = join(tmp, 'scratch');
  const tools = join(tmp, 'tools');
  // Independent, so at the same time: the registry, the consumers' tools (from the upstream registry), and the
  // versioned scratch copy.
  const [{ url, token }, , versioned] = await Promise.all([startRegistry(), installTools(tools), prepareScratch(scratch)]);
  const host = url.replace(/^http:/, '');

  // The user's npm config (nodedir, proxies, …) plus the scratch registry and its token.
  const userNpmrc = join(homedir(), '.npmrc');
  const npmrc = join(tmp, 'npmrc');
  const registryLines = `registry=${url}\n${host}:_authToken=${token}\n`;
  writeFileSync(npmrc, `${existsSync(userNpmrc) ? `${readFileSync(userNpmrc, 'utf8')}\n` : ''}${registryLines}`);
  const env = {
    ...process.env,
    CI: 'true',
    NPM_CONFIG_USERCONFIG: npmrc,
    npm_config_registry: url,
    NPM_CONFIG_PROVENANCE: 'false', // provenance needs a CI identity; the release workflow turns it on
    npm_config_cache: join(tmp, 'npm-cache'),
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    TURBO_TELEMETRY_DISABLED: '1',
    DO_NOT_TRACK: '1',
  };
  for (const key of Object.keys(env)) if (/^npm_(?:package|lifecycle)_|^npm_config_user_agent$/i.test(key)) delete env[key];

  const packages = readdirSync(join(scratch, 'packages'))
    .map((name) => ({ dir: `packages/${name}`, manifest: JSON.parse(readFileSync(join(scratch, 'packages', name, 'package.json'), 'utf8')) }))
    .filter(({ manifest }) => !manifest.private)
    .map(({ dir, manifest }) => ({ dir, name: manifest.name, version: manifest.version, exports: manifest.exports, bin: manifest.bin }));
  const pendingNote = /No unreleased changesets/.test(versioned.out) ? ' (no pending changesets: current versions)' : '';
  log(`changeset version: ${packages.map((p) => `${p.name}@${p.version}`).join(', ')}${pendingNote}`);
  {
    // The versions we mean: the highest bump that the pending changesets (read from the repository, which
    // `changeset version` did not touch) name for a package, applied once to its version; a `fixed` group moves
    // together from its highest version. Anything else (a peer-range cascade to 1.0.0) fails here.
    const LEVEL = { patch: 1, minor: 2, major: 3 };
    const parts = (v) => v.split('.').map(Number);
    const newer = (a, b) => (parts(a).reduce((d, n, i) => d || n - parts(b)[i], 0) >= 0 ? a : b);
    const bump = (v, level) => {
      const [x, y, z] = parts(v);
      return [v, `${x}.${y}.${z + 1}`, `${x}.${y + 1}.0`, `${x + 1}.0.0`][level];
    };
    const asked = new Map();
    for (const file of readdirSync(join(repo, '.changeset')).filter((f) => f.endsWith('.md') && f !== 'README.md')) {
      const front = /^---\r?\n([\s\S]*?)\r?\n---/.exec(readFileSync(join(repo, '.changeset', file), 'utf8'))?.[1] ?? '';
      for (const [, name, type] of front.matchAll(/^\s*["']?([^"'\s:]+)["']?\s*:\s*(patch|minor|major)\s*$/gm)) {
        asked.set(name, Math.max(asked.get(name) ?? 0, LEVEL[type]));
      }
    }
    const before = new Map(readdirSync(join(repo, 'packages')).map((n) => JSON.parse(readFileSync(join(repo, 'packages', n, 'package.json'), 'utf8'))).map((m) => [m.name, m.version]));
    const expected = new Map([...before].map(([name, version]) => [name, bump(version, asked.get(name) ?? 0)]));
    for (const group of JSON.parse(readFileSync(join(repo, '.changeset', 'config.json'), 'utf8')).fixed ?? []) {
      const level = Math.max(0, ...group.map((n) => asked.get(n) ?? 0));
      const top = group.map((n) => before.get(n) ?? '0.0.0').reduce(newer);
      if (level > 0) for (const name of group) expected.set(name, bump(top, level));
    }
    const wrong = packages.filter((p) => expected.get(p.name) !== p.version);
    if (wrong.length > 0) {
      for (const p of wrong) log(`FAIL  version ${p.name}@${p.version}: expected ${expected.get(p.name)} from the pending changesets`);
      log('publish check: FAIL, `changeset version` planned other versions than the changesets ask for (see .changeset/README.md)');
      process.exit(1);
    }
    log(`ok    versions: ${[...new Set(packages.map((p) => p.version))].join(', ')}, as the pending changesets ask`);
  }

  writeFileSync(join(scratch, '.npmrc'), `${existsSync(join(repo, '.npmrc')) ? readFileSync(join(repo, '.npmrc'), 'utf8') : ''}\n${registryLines}`);
  const rootManifest = JSON.parse(readFileSync(join(scratch, 'package.json'), 'utf8'));
  log(`release: pnpm run release  (${rootManifest.scripts.release}), NPM_CONFIG_PROVENANCE=false`);
  const release = await run('pnpm', ['run', 'release'], { cwd: scratch, env, timeoutMs: 10 * MIN });
  if (release.code !== 0) {
    log(tail(release.out, 40));
    log(`publish check: FAIL, the release command exited ${release.code}${release.timedOut ? ' (timed out)' : ''}`);
    process.exit(1);
  }
  log(`release: done after ${elapsed()}`);

  const failures = [];
  const known = readKnownFailures();

  // ---- what the registry now serves
  for (const pkg of packages) {
    const problems = await checkPublished(pkg, url, env);
    log(`${problems.length ? 'FAIL  ' : 'ok    '}registry ${pkg.name}@${pkg.version}${problems.length ? `: ${problems.join('; ')}` : ': tarball has LICENSE, README.md, CHANGELOG.md; metadata complete'}`);
    if (problems.length) failures.push(`${pkg.name} (registry): ${problems.join('; ')}`);
  }

  // ---- consumers
  const keys = `k1:${randomBytes(32).toString('base64url')}`;
  // Dependencies' install scripts are skipped, as pnpm 10 does by default for unapproved ones: with npm,
  // better-sqlite3 (store-sql's README) would otherwise compile from source for minutes. The quick starts use
  // PostgreSQL when DATABASE_URL is set. PUBLISH_CHECK_INSTALL_SCRIPTS=1 runs them.
  const consumerEnv = { ...env, MRTR_KEYS: keys };
  if (setting('PUBLISH_CHECK_INSTALL_SCRIPTS') !== '1') consumerEnv.npm_config_ignore_scripts = 'true';
  const jobs = ['npm', 'pnpm'].flatMap((pm) => packages.map((pkg) => ({ pm, pkg })));
  const done = new Map();
  const queue = [...jobs];
  log(`consumers: ${jobs.length} projects (npm and pnpm × ${packages.length} packages), ${CONCURRENCY} at a time`);
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        done.set(job, await checkConsumer({ ...job, env: consumerEnv, tools, scratch }));
      }
    }),
  );
  const results = [];
  for (const job of jobs) {
    {
      const { pm, pkg } = job;
      const result = done.get(job);
      results.push(result);
      const knownReason = known.get(pkg.name);
      const hard = result.checks.filter((c) => !c.ok && !(knownReason && c.quickStart));
      const soft = result.checks.filter((c) => !c.ok && knownReason && c.quickStart);
      result.status = hard.length ? 'FAIL' : soft.length ? 'KNOWN' : 'ok';
      const marks = result.checks.map((c) => `${c.name} ${c.ok ? '✓' : '✗'}${c.note ? ` (${c.note})` : ''}`).join('  ');
      log(`${result.status.padEnd(6)}${pm.padEnd(5)}${pkg.name.padEnd(20)}${marks}  [${(result.ms / 1000).toFixed(0)}s]`);
      for (const c of result.checks.filter((check) => !check.ok)) log(`    ${c.name}: ${c.why}${c.detail?.trim() ? `\n${tail(c.detail, 6)}` : ''}`);
      if (hard.length) failures.push(`${pkg.name} (${pm}): ${hard.map((c) => `${c.name}: ${c.why}`).join('; ')}`);
    }
  }

  // ---- known failures that are not failures any more
  for (const [name, reason] of known) {
    const own = results.filter((r) => r.pkg.name === name);
    if (!own.length) failures.push(`${name}: listed in publish-check.known-failures but not a published package`);
    else if (own.every((r) => r.status === 'ok')) failures.push(`${name}: listed as a known failure ("${reason}") but its quick start now passes: remove it from scripts/publish-check.known-failures`);
  }

  log('');
  const counts = ['ok', 'KNOWN', 'FAIL'].map((s) => `${results.filter((r) => r.status === s).length} ${s}`).join(', ');
  log(`publish check: ${packages.length} packages published to the scratch registry; consumers (npm + pnpm): ${counts}; ${elapsed()}`);
  if (results.some((r) => r.status === 'KNOWN')) {
    log(`known README quick-start failures (scripts/publish-check.known-failures): ${[...known.keys()].join(', ')}`);
  }
  if (failures.length) {
    log(`publish check: FAIL (${failures.length})`);
    for (const failure of failures) log(`  - ${failure}`);
    process.exit(1);
  }
  log('publish check: ok');
  process.exit(0); // the registry's pipes would keep the event loop alive; the exit handler stops it
}

async function prepareScratch(scratch) {
  // ---- scratch copy: tracked and untracked (not ignored) files, then the installed node_modules as links
  mkdirSync(scratch);
  const listed = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: repo,
    encoding: 'utf8',
  });
  if (listed.status !== 0) throw new Error(`git ls-files failed: ${listed.stderr}`);
  for (const file of listed.stdout.split('\0').filter(Boolean)) {
    if (!existsSync(join(repo, file))) continue; // deleted in the working tree
    mkdirSync(dirname(join(scratch, file)), { recursive: true });
    cpSync(join(repo, file), join(scratch, file), { verbatimSymlinks: true });
  }
  symlinkSync(join(repo, 'node_modules'), join(scratch, 'node_modules'));
  const workspaceDirs = ['packages', 'apps'].flatMap((group) =>
    existsSync(join(repo, group)) ? readdirSync(join(repo, group)).map((name) => `${group}/${name}`) : [],
  );
  for (const dir of workspaceDirs) {
    // pnpm's per-package node_modules hold relative symlinks (into ../../node_modules/.pnpm and to sibling
    // packages), so a copy of the links resolves inside the scratch tree.
    if (existsSync(join(repo, dir, 'node_modules'))) {
      cpSync(join(repo, dir, 'node_modules'), join(scratch, dir, 'node_modules'), {
        recursive: true,
        verbatimSymlinks: true,
      });
    }
  }
  const git = ['-c', 'user.name=publish-check', '-c', 'user.email=publish-check@localhost', '-c', 'commit.gpgsign=false'];
  await must('git init (scratch)', 'git', ['init', '-q', '-b', 'main'], { cwd: scratch });
  await must('git add (scratch)', 'git', [...git, 'add', '-A'], { cwd: scratch });
  await must('git commit (scratch)', 'git', [...git, 'commit', '-qm', 'scratch', '--no-verify'], { cwd: scratch });
  log(`scratch copy of the working tree after ${elapsed()}`);

  // ---- version with changesets (the release command runs later, against the scratch registry)
  const versioned = await must('changeset version', 'pnpm', ['exec', 'changeset', 'version'], { cwd: scratch, timeoutMs: 3 * MIN });
  log(`scratch copy versioned with changesets after ${elapsed()}`);
  return versioned;
}

async function installTools(tools) {
  // Not in the consumer projects, so they cannot supply a dependency a README forgets.
  mkdirSync(tools);
  writeFileSync(join(tools, 'package.json'), '{"name":"tools","private":true}\n');
  await must('npm install (tools)', 'npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...TOOLS], { cwd: tools, timeoutMs: 5 * MIN });
  log(`tools: ${TOOLS.join(', ')} after ${elapsed()}`);
}

function readKnownFailures() {
  const known = new Map();
  if (setting('MRTR_PUBLISH_CHECK_STRICT') === '1') return known;
  const file = join(repo, 'scripts/publish-check.known-failures');
  if (!existsSync(file)) return known;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^\s*(@\S+)\s*(.*)$/.exec(line.replace(/^\s*#.*$/, ''));
    if (m) known.set(m[1], m[2].trim());
  }
  return known;
}

// ------------------------------------------------------------------------------------------ published tarball

async function checkPublished(pkg, url, env) {
  const problems = [];
  const dir = join(tmp, 'tarballs', pkg.name.replace('/', '+'));
  mkdirSync(dir, { recursive: true });
  const packed = await run('npm', ['pack', `${pkg.name}@${pkg.version}`, '--registry', url, '--loglevel=error'], { cwd: dir, env, timeoutMs: 2 * MIN });
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
  if (packed.code !== 0 || !tarball) return [`not downloadable from the registry: ${tail(packed.out, 3).trim()}`];
  await must('tar', 'tar', ['xzf', tarball], { cwd: dir });
  const root = join(dir, 'package');
  for (const file of ['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md']) {
    if (!existsSync(join(root, file))) problems.push(`no ${file} in the tarball`);
  }
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  if (!manifest.repository?.url || !manifest.repository?.directory) problems.push('no repository { url, directory }');
  for (const field of ['homepage', 'bugs', 'license', 'engines', 'keywords', 'description']) {
    if (!manifest[field] || (Array.isArray(manifest[field]) && !manifest[field].length)) problems.push(`no ${field}`);
  }
  const ranges = ['dependencies', 'peerDependencies', 'optionalDependencies'].flatMap((k) => Object.entries(manifest[k] ?? {}));
  const workspace = ranges.filter(([, range]) => String(range).startsWith('workspace:'));
  if (workspace.length) problems.push(`workspace: ranges left in: ${workspace.map(([n]) => n).join(', ')}`);
  if (existsSync(join(root, 'README.md'))) {
    const relative = [...readFileSync(join(root, 'README.md'), 'utf8').matchAll(/\]\((?!https?:|mailto:|#)([^)\s]+)\)/g)].map((m) => m[1]);
    if (relative.length) problems.push(`relative README links (broken on the registry page): ${relative.join(', ')}`);
  }
  return problems;
}

// ------------------------------------------------------------------------------------------------- consumers

async function checkConsumer({ pm, pkg, env, tools, scratch }) {
  const t0 = Date.now();
  const short = pkg.name.replace(/^@mrtr\//, '');
  const dir = join(tmp, 'consumers', pm, short);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify({ name: `consumer-${short}`, version: '0.0.0', private: true }, null, 2)}\n`);
  if (pm === 'pnpm') {
    // Strict: isolated node_modules, nothing hoisted (not even into .pnpm/node_modules), peers must fit.
    writeFileSync(join(dir, '.npmrc'), 'node-linker=isolated\nhoist=false\npublic-hoist-pattern=\nshamefully-hoist=false\nstrict-peer-dependencies=true\nauto-install-peers=true\n');
  }
  const checks = [];
  const readme = readFileSync(join(scratch, pkg.dir, 'README.md'), 'utf8');

  // install: the README's own lines
  const install = installLines(readme);
  let installed = false;
  if (install.error) {
    checks.push({ name: 'install', ok: false, quickStart: true, why: install.error });
  } else {
    let ok = true;
    let detail = '';
    let why = '';
    for (const args of install.lines) {
      const command = pm === 'npm' ? ['install', ...args] : ['add', ...args];
      const result = await run(pm, command, { cwd: dir, env, timeoutMs: 6 * MIN });
      if (result.code !== 0) {
        ok = false;
        why = `\`${pm} ${command.join(' ')}\` (from the README) exited ${result.code}${result.timedOut ? ' (timed out)' : ''}`;
        detail = result.out;
        break;
      }
    }
    if (ok && !install.lines.some((args) => args.includes(pkg.name))) {
      ok = false;
      why = `the README's install lines do not install ${pkg.name} itself`;
    }
    installed = ok;
    checks.push({ name: 'install', ok, quickStart: true, why, detail });
  }
  if (!installed) {
    // Still check the package itself: install it (and core, the peer every package has) by name.
    const names = [...new Set([pkg.name, '@mrtr/core'])];
    const result = await run(pm, pm === 'npm' ? ['install', ...names] : ['add', ...names], { cwd: dir, env, timeoutMs: 6 * MIN });
    if (result.code !== 0) {
      checks.push({ name: 'install-by-name', ok: false, why: `\`${pm} add ${names.join(' ')}\` exited ${result.code}`, detail: result.out });
      return { pm, pkg, checks, ms: Date.now() - t0 };
    }
  }

  // A command-line package (a bin and no importable entry): its Quick start is a shell session, run as written.
  const importable = Object.keys(pkg.exports ?? { '.': 1 }).some((key) => key !== './package.json');
  if (!importable && pkg.bin !== undefined) {
    const qs = quickStart(readme, true);
    if (qs.error) {
      checks.push({ name: 'quick start', ok: false, quickStart: true, why: qs.error });
      return { pm, pkg, checks, ms: Date.now() - t0 };
    }
    const session = await run('sh', ['-e', '-c', qs.code], { cwd: dir, env, timeoutMs: 2 * MIN });
    checks.push({ name: 'run', ok: session.code === 0, quickStart: true, note: 'sh', why: `the quick start session exited ${session.code}`, detail: session.out });
    return { pm, pkg, checks, ms: Date.now() - t0 };
  }

  // esm / cjs: every export subpath, and MrtrError
  const subpaths = Object.keys(typeof pkg.exports === 'object' && pkg.exports && !Array.isArray(pkg.exports) && Object.keys(pkg.exports).some((k) => k.startsWith('.')) ? pkg.exports : { '.': 1 })
    .filter((key) => key !== './package.json' && !key.includes('*'))
    .map((key) => (key === '.' ? pkg.name : `${pkg.name}/${key.slice(2)}`));
  const specifiers = JSON.stringify(subpaths);
  const esm = await run(process.execPath, ['--input-type=module', '-e', `for (const s of ${specifiers}) { const m = await import(s); if (!Object.keys(m).length) throw new Error(s + ' has no exports'); }`], { cwd: dir, env, timeoutMs: MIN });
  checks.push({ name: 'esm', ok: esm.code === 0, why: `import() of ${subpaths.join(', ')} failed`, detail: esm.out });
  const cjs = await run(process.execPath, ['-e', `for (const s of ${specifiers}) { const m = require(s); if (!Object.keys(m).length) throw new Error(s + ' has no exports'); } const { MrtrError } = require('@mrtr/core'); if (typeof MrtrError !== 'function' || typeof MrtrError.is !== 'function') throw new Error('MrtrError is not exported by the CommonJS build of @mrtr/core');`], { cwd: dir, env, timeoutMs: MIN });
  checks.push({ name: 'cjs', ok: cjs.code === 0, why: `require() of ${[...subpaths, '@mrtr/core (MrtrError)'].join(', ')} failed`, detail: cjs.out });

  // the quick start, verbatim
  const qs = quickStart(readme);
  if (qs.error) {
    checks.push({ name: 'quick start', ok: false, quickStart: true, why: qs.error });
    return { pm, pkg, checks, ms: Date.now() - t0 };
  }
  const isTest = /from\s+['"]vitest['"]/.test(qs.code);
  const file = isTest ? 'quickstart.test.mts' : 'quickstart.mts';
  writeFileSync(join(dir, file), qs.code);
  const hint = /^declare\s/m.test(qs.code) ? ' (the quick start `declare`s values it does not define: a fragment, not a program)' : '';
  const tsc = join(tools, 'node_modules/typescript/bin/tsc');
  for (const [name, options] of [
    ['tsc:node16', { module: 'node16', moduleResolution: 'node16' }],
    ['tsc:bundler', { module: 'esnext', moduleResolution: 'bundler' }],
  ]) {
    const config = `tsconfig.${name.split(':')[1]}.json`;
    writeFileSync(
      join(dir, config),
      `${JSON.stringify({ compilerOptions: { ...options, target: 'es2022', lib: ['es2022'], strict: true, noEmit: true, skipLibCheck: true, types: ['node'], typeRoots: [join(tools, 'node_modules/@types')] }, files: [file] }, null, 2)}\n`,
    );
    const result = await run(process.execPath, [tsc, '-p', config, '--pretty', 'false'], { cwd: dir, env, timeoutMs: 2 * MIN });
    checks.push({ name, ok: result.code === 0, quickStart: true, why: `type errors in the README quick start${hint}`, detail: result.out });
  }
  let runResult;
  let note = '';
  if (isTest) {
    const vitest = join(dir, 'node_modules/.bin/vitest');
    if (!existsSync(vitest)) {
      checks.push({ name: 'run', ok: false, quickStart: true, why: 'the quick start imports vitest but the README does not install it' });
      return { pm, pkg, checks, ms: Date.now() - t0 };
    }
    runResult = await run(vitest, ['run', file], { cwd: dir, env, timeoutMs: 3 * MIN });
    note = 'vitest';
  } else {
    const esbuild = join(tools, 'node_modules/.bin/esbuild');
    const transpiled = await run(esbuild, [file, '--format=esm', '--platform=node', '--target=node20', '--outfile=quickstart.mjs', '--log-level=warning'], { cwd: dir, env, timeoutMs: MIN });
    if (transpiled.code !== 0) {
      checks.push({ name: 'run', ok: false, quickStart: true, why: 'esbuild could not transpile the quick start', detail: transpiled.out });
      return { pm, pkg, checks, ms: Date.now() - t0 };
    }
    writeFileSync(
      join(dir, 'run-quickstart.mjs'),
      [
        "await import('./quickstart.mjs');",
        `setTimeout(() => { console.log('[publish-check] still up ${GRACE_MS} ms after the top level finished: stopped'); process.exit(process.exitCode ?? 0); }, ${GRACE_MS}).unref();`,
        '',
      ].join('\n'),
    );
    runResult = await run(process.execPath, ['run-quickstart.mjs'], { cwd: dir, env, timeoutMs: 2 * MIN });
    if (runResult.code === 0 && runResult.out.includes('[publish-check] still up')) note = 'started and stayed up';
  }
  checks.push({
    name: 'run',
    ok: runResult.code === 0,
    quickStart: true,
    note,
    why: `the quick start ${runResult.timedOut ? 'did not finish its top level in time' : `exited ${runResult.code}`}${hint}`,
    detail: runResult.out,
  });
  return { pm, pkg, checks, ms: Date.now() - t0 };
}

main().catch((error) => {
  log(`publish check: FAIL, ${error?.stack ?? error}`);
  process.exit(1);
});

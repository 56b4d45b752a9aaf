#!/usr/bin/env node
// Publish check: release every public package to a throwaway registry exactly as a release does, then install
// each one back from that registry like a user would, and run its README's quick start.
//
//   node scripts/publish-check.mjs        (needs REDIS_URL / DATABASE_URL for the store quick starts; with REDIS_URL,
//                                          an Upstash REST stand-in for store-upstash's: UPSTASH_REDIS_REST_URL/_TOKEN;
//                                          an MCP server stand-in for client's, scripts/mcp-stand-in.mjs: MCP_URL)
//
// 1. Installs Verdaccio (pinned) with npm into a temp dir and starts it on 127.0.0.1 (random free port):
//    @mrtr/* is served only from its local storage, everything else is proxied from the upstream registry.
// 2. Copies the working tree (tracked + untracked, not ignored) to a scratch dir, runs `changeset version`
//    there, then the root `release` script (`turbo run build --filter=./packages/* && changeset publish`),
//    pointed at the scratch registry, with NPM_CONFIG_PROVENANCE=false (the release workflow turns it on).
//    The repository itself is never modified.
// 3. Checks every published tarball: LICENSE, README.md, CHANGELOG.md, repository/homepage/bugs/engines/
//    keywords, no `workspace:` ranges, no exports into ./src (the workspace-only "@mrtr/source" condition),
//    no relative README links.
// 4. For npm and for pnpm (isolated, no hoisting, strict peers), per package a fresh consumer project made with
//    `npm init -y` (so "type" is the default, commonjs, unless the README's own lines change it):
//    - install: the README's Install section, verbatim: its `npm install …` lines (`pnpm add …` for pnpm) and
//      its `npm pkg …` / `npm init …` lines (such as `npm pkg set type=module`), in order;
//    - esm / cjs: `import()` and `require()` of every subpath in the package's `exports`, and
//      `require('@mrtr/core').MrtrError` is a class;
//    - tsc:node16 / tsc:bundler: the README's Quick start ```ts block, verbatim, saved under the name its first
//      line gives (`// compliance.test.ts: …`) or else as quickstart.ts, under `tsc --noEmit` with module node16
//      (which reads the project's "type", as a user's editor does) and with moduleResolution bundler;
//    - run: that file run by Node through tsx, as a user runs a .ts file (`npx tsx quickstart.ts`): it is ESM or
//      CommonJS as the project's "type" says, so top-level await in a commonjs project fails here as it would
//      for the user. MRTR_KEYS is set to a fresh key and PORT to a free port. It passes when it exits 0, or when
//      its top-level code finished and QUICKSTART_GRACE_MS later it is still up *serving* (a listening socket):
//      it is then stopped and counted as "started a server". Still up without serving anything (an open
//      connection, a timer) fails: a quick start exits when it is done. A quick start that imports `vitest` is a
//      test file and is run with the consumer's own `vitest run` instead.
// 5. The repository README's "Quick start" (npm, in a fresh `npm init -y` project, no MRTR_KEYS in the
//    environment): its first ```sh block is run verbatim with `sh -e` (install lines, `npm pkg set …`, the
//    keygen into .env); every ```ts block is saved under the name its first line gives (`// server.ts`) and
//    type-checked as above; of the second ```sh block (how to run them), every line but the last is started in
//    the background and must listen on PORT (a free port on 127.0.0.1; the programs default to the documented
//    one) within 60 s, then the last line (the client) is run verbatim and must exit 0 within 60 s printing
//    every line of the README's ```text block (what the client prints), in order.
// Prints one line per package per package manager and a summary; exits 1 on any failure.
//
// Known README failures: scripts/publish-check.known-failures lists packages whose README quick start is known
// to be broken (one `@mrtr/name  reason` per line). Their quick-start checks (install line, tsc, run) are
// reported as KNOWN and do not fail the run; every other check still does, a listed package that now passes
// fails the run (remove it from the list), and MRTR_PUBLISH_CHECK_STRICT=1 ignores the list.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startMcpStandIn } from './mcp-stand-in.mjs';
import { startUpstashRestShim } from './upstash-rest-shim.mjs';

/** A setting of this script (not a turbo task, so none of these belong in turbo.json). */
const setting = (name) => process.env[name];

// Pinned tools, all installed from the registry at run time (nothing here is a workspace dependency).
// 6.8.0 is the newest Verdaccio that runs on Node 20 (6.9+ needs Node 22).
const VERDACCIO = 'verdaccio@6.8.0';
const TOOLS = ['typescript@5.9.3', '@types/node@20.19.43', 'tsx@4.23.15'];
const CONCURRENCY = Number(setting('PUBLISH_CHECK_CONCURRENCY') ?? 4);
const GRACE_MS = Number(setting('QUICKSTART_GRACE_MS') ?? 3000);
const TOTAL_TIMEOUT_MS = 20 * 60_000;
const ROOT_README = 'README.md (repository)';
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

/**
 * The commands of the Install section's sh blocks that set up a consumer project, comments removed, in order:
 * `npm install …` lines as `{ install: args }` (a package manager adds `args`), and `npm pkg …` / `npm init …`
 * lines as `{ npm: args }` (run with npm whatever the package manager: they only edit package.json). A line may
 * chain several with `&&`.
 */
function installLines(readme) {
  const body = section(readme, 'Install');
  if (body === undefined) return { error: 'the README has no "## Install" section' };
  const lines = [];
  for (const [, code] of body.matchAll(/```(?:sh|bash|shell|console)\n([\s\S]*?)```/g)) {
    for (const raw of code.split('\n')) {
      for (const part of raw
        .replace(/^\$\s*/, '')
        .replace(/\s+#.*$/, '')
        .split('&&')) {
        const line = part.trim();
        const m = /^npm\s+(?:i|install|add)\s+(.+)$/.exec(line);
        if (m) lines.push({ install: m[1].split(/\s+/) });
        else if (/^npm\s+(?:pkg|init)\b/.test(line)) lines.push({ npm: line.split(/\s+/).slice(1) });
      }
    }
  }
  if (!lines.some((line) => line.install)) return { error: "the README's Install section has no ```sh block with an `npm install …` line" };
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
    .map((name) => ({
      dir: `packages/${name}`,
      manifest: JSON.parse(readFileSync(join(scratch, 'packages', name, 'package.json'), 'utf8')),
    }))
    .filter(({ manifest }) => !manifest.private)
    .map(({ dir, manifest }) => ({
      dir,
      name: manifest.name,
      version: manifest.version,
      exports: manifest.exports,
      bin: manifest.bin,
      dependencies: manifest.dependencies,
      peerDependencies: manifest.peerDependencies,
    }));
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
    const before = new Map(
      readdirSync(join(repo, 'packages'))
        .map((n) => JSON.parse(readFileSync(join(repo, 'packages', n, 'package.json'), 'utf8')))
        .map((m) => [m.name, m.version]),
    );
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

  writeFileSync(
    join(scratch, '.npmrc'),
    `${existsSync(join(repo, '.npmrc')) ? readFileSync(join(repo, '.npmrc'), 'utf8') : ''}\n${registryLines}`,
  );
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
    log(
      `${problems.length ? 'FAIL  ' : 'ok    '}registry ${pkg.name}@${pkg.version}${problems.length ? `: ${problems.join('; ')}` : ': tarball has LICENSE, README.md, CHANGELOG.md; metadata complete'}`,
    );
    if (problems.length) failures.push(`${pkg.name} (registry): ${problems.join('; ')}`);
  }

  // ---- consumers
  const keys = `k1:${randomBytes(32).toString('base64url')}`;
  // Dependencies' install scripts are skipped, as pnpm 10 does by default for unapproved ones: with npm,
  // better-sqlite3 (store-sql's README) would otherwise compile from source for minutes. The quick starts use
  // PostgreSQL when DATABASE_URL is set. PUBLISH_CHECK_INSTALL_SCRIPTS=1 runs them.
  const consumerEnv = { ...env, MRTR_KEYS: keys };
  // @mrtr/store-upstash's quick start talks to Upstash's REST API: a small stand-in in front of REDIS_URL plays it
  // (scripts/upstash-rest-shim.mjs), as REDIS_URL and DATABASE_URL play the services of the other store quick starts.
  if (process.env.REDIS_URL && !setting('UPSTASH_REDIS_REST_URL')) {
    const shim = await startUpstashRestShim(process.env.REDIS_URL);
    process.on('exit', () => void shim.close());
    consumerEnv.UPSTASH_REDIS_REST_URL = shim.url;
    consumerEnv.UPSTASH_REDIS_REST_TOKEN = shim.token;
  }
  // @mrtr/client's quick start calls a tool on an MCP server: a small stand-in (scripts/mcp-stand-in.mjs) plays it.
  if (!setting('MCP_URL')) {
    const standIn = await startMcpStandIn();
    process.on('exit', () => void standIn.close());
    consumerEnv.MCP_URL = standIn.url;
  }
  if (setting('PUBLISH_CHECK_INSTALL_SCRIPTS') !== '1') consumerEnv.npm_config_ignore_scripts = 'true';
  // The repository README's quick start gets no MRTR_KEYS: it makes its own .env, as a user does.
  const { MRTR_KEYS: _, ...rootEnv } = consumerEnv;
  const jobs = [
    { pm: 'npm', pkg: { name: ROOT_README }, root: true },
    ...['npm', 'pnpm'].flatMap((pm) => packages.map((pkg) => ({ pm, pkg }))),
  ];
  const done = new Map();
  const queue = [...jobs];
  log(
    `consumers: ${jobs.length} projects (the repository README's quick start with npm; npm and pnpm × ${packages.length} packages), ${CONCURRENCY} at a time`,
  );
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let job = queue.shift(); job; job = queue.shift()) {
        done.set(
          job,
          job.root
            ? await checkRootQuickStart({ env: rootEnv, tools, scratch })
            : await checkConsumer({ ...job, env: consumerEnv, tools, scratch }),
        );
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
      for (const c of result.checks.filter((check) => !check.ok))
        log(`    ${c.name}: ${c.why}${c.detail?.trim() ? `\n${tail(c.detail, 6)}` : ''}`);
      if (hard.length) failures.push(`${pkg.name} (${pm}): ${hard.map((c) => `${c.name}: ${c.why}`).join('; ')}`);
    }
  }

  // ---- known failures that are not failures any more
  for (const [name, reason] of known) {
    const own = results.filter((r) => r.pkg.name === name);
    if (!own.length) failures.push(`${name}: listed in publish-check.known-failures but not a published package`);
    else if (own.every((r) => r.status === 'ok'))
      failures.push(
        `${name}: listed as a known failure ("${reason}") but its quick start now passes: remove it from scripts/publish-check.known-failures`,
      );
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
  await must('npm install (tools)', 'npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...TOOLS], {
    cwd: tools,
    timeoutMs: 5 * MIN,
  });
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
  const packed = await run('npm', ['pack', `${pkg.name}@${pkg.version}`, '--registry', url, '--loglevel=error'], {
    cwd: dir,
    env,
    timeoutMs: 2 * MIN,
  });
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
  // The workspace's exports lead with "@mrtr/source" (./src, not published); the tarball must carry publishConfig.exports.
  const exportsText = JSON.stringify(manifest.exports ?? {});
  if (exportsText.includes('@mrtr/source') || exportsText.includes('./src/'))
    problems.push('exports point into ./src (publishConfig.exports not applied)');
  if (existsSync(join(root, 'README.md'))) {
    const relative = [...readFileSync(join(root, 'README.md'), 'utf8').matchAll(/\]\((?!https?:|mailto:|#)([^)\s]+)\)/g)].map((m) => m[1]);
    if (relative.length) problems.push(`relative README links (broken on the registry page): ${relative.join(', ')}`);
  }
  return problems;
}

// ------------------------------------------------------------------------------------------------- consumers

/** Whether a package builds on @mrtr/core (it is core, or core is among its dependencies or peers). */
const usesCore = (pkg) =>
  pkg.name === '@mrtr/core' || ['dependencies', 'peerDependencies'].some((field) => pkg[field]?.['@mrtr/core'] !== undefined);

async function checkConsumer({ pm, pkg, env, tools, scratch }) {
  const t0 = Date.now();
  const short = pkg.name.replace(/^@mrtr\//, '');
  const dir = join(tmp, 'consumers', pm, short);
  mkdirSync(dir, { recursive: true });
  // A default project, as `npm init -y` makes it for a user: "type" is commonjs unless the README changes it.
  const init = await run('npm', ['init', '-y'], { cwd: dir, env, timeoutMs: MIN });
  if (init.code !== 0)
    return {
      pm,
      pkg,
      checks: [{ name: 'npm init', ok: false, why: `\`npm init -y\` exited ${init.code}`, detail: init.out }],
      ms: Date.now() - t0,
    };
  if (pm === 'pnpm') {
    // Strict: isolated node_modules, nothing hoisted (not even into .pnpm/node_modules), peers must fit.
    writeFileSync(
      join(dir, '.npmrc'),
      'node-linker=isolated\nhoist=false\npublic-hoist-pattern=\nshamefully-hoist=false\nstrict-peer-dependencies=true\nauto-install-peers=true\n',
    );
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
    for (const line of install.lines) {
      const [tool, command] = line.npm ? ['npm', line.npm] : [pm, pm === 'npm' ? ['install', ...line.install] : ['add', ...line.install]];
      const result = await run(tool, command, { cwd: dir, env, timeoutMs: 6 * MIN });
      if (result.code !== 0) {
        ok = false;
        why = `\`${tool} ${command.join(' ')}\` (from the README) exited ${result.code}${result.timedOut ? ' (timed out)' : ''}`;
        detail = result.out;
        break;
      }
    }
    if (ok && !install.lines.some((line) => line.install?.includes(pkg.name))) {
      ok = false;
      why = `the README's install lines do not install ${pkg.name} itself`;
    }
    installed = ok;
    checks.push({ name: 'install', ok, quickStart: true, why, detail });
  }
  if (!installed) {
    // Still check the package itself: install it (and core, when it builds on core) by name.
    const names = [...new Set([pkg.name, ...(usesCore(pkg) ? ['@mrtr/core'] : [])])];
    const result = await run(pm, pm === 'npm' ? ['install', ...names] : ['add', ...names], { cwd: dir, env, timeoutMs: 6 * MIN });
    if (result.code !== 0) {
      checks.push({
        name: 'install-by-name',
        ok: false,
        why: `\`${pm} add ${names.join(' ')}\` exited ${result.code}`,
        detail: result.out,
      });
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
    checks.push({
      name: 'run',
      ok: session.code === 0,
      quickStart: true,
      note: 'sh',
      why: `the quick start session exited ${session.code}`,
      detail: session.out,
    });
    return { pm, pkg, checks, ms: Date.now() - t0 };
  }

  // esm / cjs: every export subpath, and MrtrError
  const subpaths = Object.keys(
    typeof pkg.exports === 'object' && pkg.exports && !Array.isArray(pkg.exports) && Object.keys(pkg.exports).some((k) => k.startsWith('.'))
      ? pkg.exports
      : { '.': 1 },
  )
    .filter((key) => key !== './package.json' && !key.includes('*'))
    .map((key) => (key === '.' ? pkg.name : `${pkg.name}/${key.slice(2)}`));
  const specifiers = JSON.stringify(subpaths);
  const esm = await run(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `for (const s of ${specifiers}) { const m = await import(s); if (!Object.keys(m).length) throw new Error(s + ' has no exports'); }`,
    ],
    { cwd: dir, env, timeoutMs: MIN },
  );
  checks.push({ name: 'esm', ok: esm.code === 0, why: `import() of ${subpaths.join(', ')} failed`, detail: esm.out });
  // MrtrError from core's CommonJS build, where the package builds on core (@mrtr/client does not: it needs only the SDK).
  const coreCheck = usesCore(pkg)
    ? ` const { MrtrError } = require('@mrtr/core'); if (typeof MrtrError !== 'function' || typeof MrtrError.is !== 'function') throw new Error('MrtrError is not exported by the CommonJS build of @mrtr/core');`
    : '';
  const cjs = await run(
    process.execPath,
    [
      '-e',
      `for (const s of ${specifiers}) { const m = require(s); if (!Object.keys(m).length) throw new Error(s + ' has no exports'); }${coreCheck}`,
    ],
    { cwd: dir, env, timeoutMs: MIN },
  );
  checks.push({
    name: 'cjs',
    ok: cjs.code === 0,
    why: `require() of ${[...subpaths, ...(usesCore(pkg) ? ['@mrtr/core (MrtrError)'] : [])].join(', ')} failed`,
    detail: cjs.out,
  });

  // the quick start, verbatim
  const qs = quickStart(readme);
  if (qs.error) {
    checks.push({ name: 'quick start', ok: false, quickStart: true, why: qs.error });
    return { pm, pkg, checks, ms: Date.now() - t0 };
  }
  const isTest = /from\s+['"]vitest['"]/.test(qs.code);
  const file = namedFile(qs.code) ?? (isTest ? 'quickstart.test.ts' : 'quickstart.ts');
  writeFileSync(join(dir, file), qs.code);
  const hint = /^declare\s/m.test(qs.code) ? ' (the quick start `declare`s values it does not define: a fragment, not a program)' : '';
  checks.push(...(await typeCheck(dir, [file], tools, env)).map((c) => ({ ...c, quickStart: true, why: `${c.why}${hint}` })));
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
    writeFileSync(join(dir, 'run-quickstart.mjs'), graceWrapper(file));
    const port = await freePort();
    runResult = await run(process.execPath, ['--import', tsxLoader(tools), 'run-quickstart.mjs'], {
      cwd: dir,
      env: { ...env, PORT: String(port) },
      timeoutMs: 2 * MIN,
    });
    if (runResult.code === 0 && runResult.out.includes('[publish-check] still up')) note = 'started a server';
    if (runResult.code === STILL_UP_EXIT) note = 'still up, serving nothing';
  }
  checks.push({
    name: 'run',
    ok: runResult.code === 0,
    quickStart: true,
    note,
    why: `the quick start ${runResult.timedOut ? 'did not finish its top level in time' : runResult.code === STILL_UP_EXIT ? `was still running ${GRACE_MS} ms after its top level finished without serving anything (close what it opens, so it exits when done)` : `exited ${runResult.code}`}${hint}`,
    detail: runResult.out,
  });
  return { pm, pkg, checks, ms: Date.now() - t0 };
}

// ------------------------------------------------------------------------------------ the repository README

/** Starts a long-running command in its own process group (killed at exit); collects its output. */
function startBackground(command, args, { cwd, env }) {
  const child = spawn(command, args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const state = { child, out: '', exited: undefined };
  child.stdout.on('data', (chunk) => (state.out += chunk));
  child.stderr.on('data', (chunk) => (state.out += chunk));
  child.on('error', (error) => (state.out += String(error)));
  child.on('exit', (code, signal) => (state.exited = code ?? signal ?? 'error'));
  return state;
}

/** Resolves true once something accepts a TCP connection on 127.0.0.1:port. */
function accepts(port) {
  return new Promise((resolvePromise) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.setTimeout(1000, () => socket.destroy());
    socket.on('connect', () => {
      socket.destroy();
      resolvePromise(true);
    });
    socket.on('close', () => resolvePromise(false));
    socket.on('error', () => {});
  });
}

/**
 * The repository README's quick start, as a new user follows it (see step 5 at the top): a fresh `npm init -y`
 * project, the install block verbatim, the programs under their own names, the server started and the client run
 * with the README's own command lines, and the client's output compared with the README's.
 */
async function checkRootQuickStart({ env, tools, scratch }) {
  const t0 = Date.now();
  const result = { pm: 'npm', pkg: { name: ROOT_README }, checks: [] };
  const { checks } = result;
  const finish = () => ({ ...result, ms: Date.now() - t0 });
  const dir = join(tmp, 'consumers', 'npm', 'root-quickstart');
  mkdirSync(dir, { recursive: true });
  const init = await run('npm', ['init', '-y'], { cwd: dir, env, timeoutMs: MIN });
  if (init.code !== 0) {
    checks.push({ name: 'npm init', ok: false, why: `\`npm init -y\` exited ${init.code}`, detail: init.out });
    return finish();
  }
  const readme = readFileSync(join(scratch, 'README.md'), 'utf8');
  const heading = /^## (Quick start\b.*?)\s*$/m.exec(readme)?.[1];
  const body = heading === undefined ? undefined : section(readme, heading);
  const blocks = [...(body ?? '').matchAll(/```(\w*)\n([\s\S]*?)```/g)].map(([, lang, code]) => ({ lang, code }));
  const sh = blocks.filter((b) => /^(?:sh|bash|shell|console)$/.test(b.lang)).map((b) => b.code);
  const programs = blocks.filter((b) => /^(?:ts|typescript)$/.test(b.lang)).map((b) => b.code);
  const expected = (blocks.find((b) => b.lang === 'text')?.code ?? '')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const runLines = (sh[1] ?? '')
    .split('\n')
    .map((line) => line.replace(/^\$\s*/, '').trim())
    .filter((line) => line && !line.startsWith('#'));
  const files = programs.map(namedFile);
  if (
    body === undefined ||
    sh.length < 2 ||
    programs.length === 0 ||
    files.includes(undefined) ||
    runLines.length < 2 ||
    expected.length === 0
  ) {
    checks.push({
      name: 'quick start',
      ok: false,
      why: 'the README\'s "## Quick start…" section needs, in order: a ```sh block that installs, ```ts programs that name their file on their first line (`// server.ts`), a ```sh block that runs them (server lines first, the client last) and a ```text block with what the client prints',
    });
    return finish();
  }

  // install: the first sh block, verbatim
  const install = await run('sh', ['-e', '-c', sh[0]], { cwd: dir, env, timeoutMs: 8 * MIN });
  checks.push({
    name: 'install',
    ok: install.code === 0,
    why: `the install block exited ${install.code}${install.timedOut ? ' (timed out)' : ''}`,
    detail: install.out.trimEnd().split('\n').slice(-6).join('\n'),
  });
  if (install.code !== 0) return finish();
  for (const [i, code] of programs.entries()) writeFileSync(join(dir, files[i]), code);
  checks.push(...(await typeCheck(dir, files, tools, env)));

  // run: every line but the last in the background (the servers), then the last (the client)
  const port = await freePort();
  const runEnv = { ...env, PORT: String(port) };
  const servers = runLines.slice(0, -1).map((line) => startBackground('sh', ['-c', line], { cwd: dir, env: runEnv }));
  const serverOutput = () => servers.map((s) => s.out).join('\n');
  try {
    const started = Date.now();
    let listening = false;
    while (!listening && Date.now() - started < MIN && servers.every((s) => s.exited === undefined)) {
      listening = await accepts(port);
      if (!listening) await sleep(250);
    }
    const exited = servers.find((s) => s.exited !== undefined);
    checks.push({
      name: 'server',
      ok: listening,
      note: listening ? `listening after ${((Date.now() - started) / 1000).toFixed(1)}s` : '',
      why: exited
        ? `\`${runLines[servers.indexOf(exited)]}\` exited ${exited.exited} before listening on PORT=${port}`
        : `nothing listened on 127.0.0.1:${port} (PORT) within 60 s`,
      detail: serverOutput(),
    });
    if (!listening) return finish();
    const client = await run('sh', ['-c', runLines.at(-1)], { cwd: dir, env: runEnv, timeoutMs: MIN });
    const printed = client.out.split('\n').map((line) => line.trim());
    let at = 0;
    for (const line of printed) if (line === expected[at]) at++;
    const missing = expected.slice(at);
    checks.push({
      name: 'client',
      ok: client.code === 0 && missing.length === 0,
      note: client.code === 0 && missing.length === 0 ? `printed ${JSON.stringify(expected.at(-1))}` : '',
      why:
        client.code !== 0
          ? `\`${runLines.at(-1)}\` ${client.timedOut ? 'did not finish within 60 s' : `exited ${client.code}`}`
          : `\`${runLines.at(-1)}\` did not print ${JSON.stringify(missing[0])} (the README's expected output, in order)`,
      detail: `${client.out}\n--- server:\n${serverOutput()}`,
    });
  } finally {
    for (const server of servers) {
      killTree(server.child);
      children.delete(server.child);
    }
  }
  return finish();
}

// ------------------------------------------------------------------------------------------- quick-start helpers

/** The file name a code block gives itself on its first line (`// server.ts` or `// compliance.test.ts: …`). */
function namedFile(code) {
  return /^\/\/\s*([\w.-]+\.(?:[cm]?ts|[cm]?js))(?::|\s|$)/.exec(code)?.[1];
}

/** tsx's loader (`node --import tsx`), from the tools: runs a .ts file as ESM or CommonJS per the project's "type". */
function tsxLoader(tools) {
  return pathToFileURL(join(tools, 'node_modules/tsx/dist/loader.mjs')).href;
}

const STILL_UP_EXIT = 3;
/**
 * A wrapper module that imports the quick start and, GRACE_MS after its top level finished, stops a process that
 * is still up: exit 0 when it is serving (a listening TCP socket), STILL_UP_EXIT with what keeps it alive when not.
 */
function graceWrapper(file) {
  return [
    `await import(${JSON.stringify(`./${file}`)});`,
    'setTimeout(() => {',
    "  const held = process.getActiveResourcesInfo().filter((r) => r !== 'Timeout');",
    "  if (held.includes('TCPServerWrap')) {",
    `    console.log('[publish-check] still up ${GRACE_MS} ms after the top level finished, serving: stopped');`,
    '    process.exit(process.exitCode ?? 0);',
    '  }',
    `  console.log('[publish-check] still up ${GRACE_MS} ms after the top level finished, serving nothing, holding: ' + held.join(', '));`,
    `  process.exit(${STILL_UP_EXIT});`,
    `}, ${GRACE_MS}).unref();`,
    '',
  ].join('\n');
}

/** tsc --noEmit of `files` in `dir`, with module node16 (reads the project's "type") and with bundler resolution. */
async function typeCheck(dir, files, tools, env) {
  const tsc = join(tools, 'node_modules/typescript/bin/tsc');
  const checks = [];
  for (const [name, options] of [
    ['tsc:node16', { module: 'node16', moduleResolution: 'node16' }],
    ['tsc:bundler', { module: 'esnext', moduleResolution: 'bundler' }],
  ]) {
    const config = `tsconfig.${name.split(':')[1]}.json`;
    writeFileSync(
      join(dir, config),
      `${JSON.stringify({ compilerOptions: { ...options, target: 'es2022', lib: ['es2022'], strict: true, noEmit: true, skipLibCheck: true, types: ['node'], typeRoots: [join(tools, 'node_modules/@types')] }, files }, null, 2)}\n`,
    );
    const result = await run(process.execPath, [tsc, '-p', config, '--pretty', 'false'], { cwd: dir, env, timeoutMs: 2 * MIN });
    checks.push({ name, ok: result.code === 0, why: 'type errors in the README quick start', detail: result.out });
  }
  return checks;
}

main().catch((error) => {
  log(`publish check: FAIL, ${error?.stack ?? error}`);
  process.exit(1);
});

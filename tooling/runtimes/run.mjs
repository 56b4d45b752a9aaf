#!/usr/bin/env node
// The runtime matrix and the web bundle sizes (called by scripts/ci-runtimes.sh, which installs the runtimes).
//
//   node tooling/runtimes/run.mjs matrix <bin dir>   compliance suite + guard program, every codec, every runtime
//   node tooling/runtimes/run.mjs sizes              min+gzip of a seal+open program per codec (web build), and jose
//
// Needs `pnpm build` first (it bundles the packages' dist). Every child process and every wait is bounded.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
// The workspace's own esbuild (the one tsup builds the packages with).
const esbuild = createRequire(join(root, 'packages', 'core', 'package.json'))('esbuild');

/** Per runtime × build: the most one run of the three codecs' suites may take. */
const RUN_TIMEOUT_MS = 300_000;
const WEB_CONDITIONS = ['workerd', 'worker', 'browser'];

/**
 * A node_modules folder that holds the workspace packages (and the few third-party packages the programs
 * import directly) by name, for esbuild's `nodePaths`: this folder is not a workspace package.
 */
function linkFarm(work) {
  const modules = join(work, 'node_modules');
  mkdirSync(join(modules, '@mrtr'), { recursive: true });
  for (const name of readdirSync(join(root, 'packages'))) {
    symlinkSync(join(root, 'packages', name), join(modules, '@mrtr', name));
  }
  symlinkSync(realpathSync(join(root, 'packages', 'test-suite', 'node_modules', 'fast-check')), join(modules, 'fast-check'));
  symlinkSync(realpathSync(join(root, 'packages', 'codec-jwe', 'node_modules', 'jose')), join(modules, 'jose'));
  return modules;
}

/**
 * tsup writes Node built-ins without the `node:` prefix (`crypto`, `assert`); Deno resolves only the
 * prefixed names from a local file, so every built-in stays external as `node:<name>`.
 */
const builtins = new Set(builtinModules);
const nodePrefixPlugin = {
  name: 'node-prefix',
  setup(build) {
    build.onResolve({ filter: /^[a-z_/]+$/ }, (args) =>
      builtins.has(args.path) ? { path: `node:${args.path}`, external: true } : undefined,
    );
  },
};

/** The suite module reads the global `Buffer`: give it Node's (every runtime here has `node:buffer`), and only it. */
const suiteBufferPlugin = {
  name: 'suite-buffer',
  setup(build) {
    build.onLoad({ filter: /[\\/]test-suite[\\/]dist[\\/]index\.js$/ }, async (args) => {
      const { readFile } = await import('node:fs/promises');
      return { contents: `import { Buffer } from 'node:buffer';\n${await readFile(args.path, 'utf8')}`, loader: 'js' };
    });
  },
};

async function bundle(options) {
  await esbuild.build({ bundle: true, format: 'esm', target: 'es2022', logLevel: 'error', legalComments: 'none', ...options });
}

function run(command, args, { timeoutMs = RUN_TIMEOUT_MS, cwd = root } = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }, timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve({ code: -1, out: `${out}\n${error.message}`, timedOut });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, timedOut });
    });
  });
}

const freePort = () =>
  new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });

async function fetchText(url, timeoutMs) {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  return `${await response.text()}`;
}

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

/** `RESULT <codec> seal=<kind> passed=N failed=N` lines → one row per codec. */
function parseResults(text) {
  const rows = new Map();
  for (const line of text.split('\n')) {
    const m = /^(RESULT|GUARD) (\w+) seal=(\w+) passed=(\d+) failed=(\d+)(?: hostile=(\d+) ms=(\d+))?/.exec(line);
    if (m) rows.set(m[2], { seal: m[3], passed: Number(m[4]), failed: Number(m[5]), hostile: Number(m[6] ?? 0), ms: Number(m[7] ?? 0) });
  }
  return rows;
}

const CODECS = ['hmac', 'jwe', 'aead'];

async function matrix(binDir) {
  const work = mkdtempSync(join(tmpdir(), 'mrtr-runtimes-'));
  const lines = [];
  let failures = 0;
  const report = (runtime, build, codec, row, extra) => {
    const ok = row !== undefined && row.failed === 0 && row.passed > 0;
    if (!ok) failures++;
    const counts = row ? `${row.passed} passed, ${row.failed} failed` : 'no result';
    const detail = row ? `${row.seal.padEnd(5)}  ${String(row.hostile).padStart(5)} hostile inputs  ${extra || seconds(row.ms)}` : '';
    const line = `${ok ? 'PASS' : 'FAIL'}  ${runtime.padEnd(8)} ${`${build} build`.padEnd(10)} ${codec.padEnd(5)} ${counts.padEnd(22)} ${detail}`;
    lines.push(line);
    console.log(line);
  };
  try {
    const nodePaths = [linkFarm(work)];
    const common = { nodePaths, absWorkingDir: root };
    const entry = (name) => join(here, 'src', name);
    const out = (name) => join(work, name);
    // Node build: what Node, Bun and Deno take when they run the packages unbundled (the `node` condition).
    await bundle({
      ...common,
      entryPoints: [entry('main.ts')],
      outfile: out('node.mjs'),
      platform: 'node',
      plugins: [nodePrefixPlugin, suiteBufferPlugin],
    });
    // Web build: what a web bundler or workerd gets. Only the suite imports Node APIs (node:assert, Buffer).
    const web = {
      ...common,
      platform: 'browser',
      conditions: WEB_CONDITIONS,
      external: ['node:*'],
      plugins: [nodePrefixPlugin, suiteBufferPlugin],
    };
    await bundle({ ...web, entryPoints: [entry('main.ts')], outfile: out('web.mjs') });
    await bundle({ ...web, entryPoints: [entry('worker.ts')], outfile: out('suite-worker.mjs') });
    // The guard worker: the web build with nothing external — it must bundle and run with no Node API.
    await bundle({
      ...common,
      platform: 'browser',
      conditions: WEB_CONDITIONS,
      entryPoints: [entry('guard-worker.ts')],
      outfile: out('guard-worker.mjs'),
    });

    const bin = (name) => join(binDir, name);
    const jobs = [
      ['node', 'node', process.execPath, [out('node.mjs')]],
      ['node', 'web', process.execPath, [out('web.mjs')]],
      ['bun', 'node', bin('bun'), [out('node.mjs')]],
      ['bun', 'web', bin('bun'), [out('web.mjs')]],
      // No permission flags: a permission prompt would fail (--no-prompt), so this proves none is needed.
      ['deno', 'node', bin('deno'), ['run', '--no-prompt', '--quiet', out('node.mjs')]],
      ['deno', 'web', bin('deno'), ['run', '--no-prompt', '--quiet', out('web.mjs')]],
    ];
    for (const [runtime, build, command, args] of jobs) {
      const { code, out: text, timedOut } = await run(command, args);
      const rows = parseResults(text);
      for (const codec of CODECS) report(runtime, build, codec, rows.get(codec), '');
      if (code !== 0 || timedOut) {
        // A crash or a timeout after all rows passed still fails the run.
        if (CODECS.every((codec) => rows.get(codec)?.failed === 0 && rows.get(codec)?.passed > 0)) failures++;
        console.log(`      ${runtime} ${build}: exit ${code}${timedOut ? ' (timed out)' : ''}\n${indent(text)}`);
      } else if ([...rows.values()].some((r) => r.failed > 0)) {
        console.log(
          indent(
            text
              .split('\n')
              .filter((l) => l.includes('FAIL'))
              .join('\n'),
          ),
        );
      }
    }
    await workerd(bin('workerd'), work, report);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  console.log(`runtimes: ${lines.filter((l) => l.startsWith('PASS')).length} passed, ${failures} failed`);
  console.log(failures === 0 ? 'runtime matrix: all passed' : 'runtime matrix: FAILED');
  return failures === 0;
}

const indent = (text) =>
  text
    .trim()
    .split('\n')
    .slice(-40)
    .map((l) => `      | ${l}`)
    .join('\n');

async function workerd(bin, work, report) {
  const [suitePort, guardPort] = [await freePort(), await freePort()];
  // Two module workers: the suite needs nodejs_compat (it uses node:assert and Buffer itself); the guard
  // program runs with no compatibility flag at all, so the codecs' web builds use no Node API.
  writeFileSync(
    join(work, 'config.capnp'),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "suite", worker = .suiteWorker),
    (name = "guard", worker = .guardWorker),
  ],
  sockets = [
    (name = "suite", address = "127.0.0.1:${suitePort}", http = (), service = "suite"),
    (name = "guard", address = "127.0.0.1:${guardPort}", http = (), service = "guard"),
  ],
);
const suiteWorker :Workerd.Worker = (
  modules = [(name = "worker", esModule = embed "suite-worker.mjs")],
  compatibilityDate = "2025-09-01",
  compatibilityFlags = ["nodejs_compat"],
);
const guardWorker :Workerd.Worker = (
  modules = [(name = "worker", esModule = embed "guard-worker.mjs")],
  compatibilityDate = "2025-09-01",
);
`,
  );
  const child = spawn(bin, ['serve', join(work, 'config.capnp')], { cwd: work, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let log = '';
  child.on('error', (error) => (log += `\n${error.message}`));
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => child.on('close', resolve));
  try {
    // Ready when the guard socket answers (bounded: 30 s).
    let guardText;
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        guardText = await fetchText(`http://127.0.0.1:${guardPort}/`, 60_000);
        break;
      } catch (error) {
        if (Date.now() > deadline || child.exitCode !== null || child.pid === undefined)
          throw new Error(`workerd did not answer: ${error.message}\n${log}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    const guardRows = parseResults(guardText);
    for (const codec of CODECS) {
      const started = Date.now();
      let text = '';
      try {
        text = await fetchText(`http://127.0.0.1:${suitePort}/?codec=${codec}`, RUN_TIMEOUT_MS);
      } catch (error) {
        text = `ERROR ${error.message}`;
      }
      const row = parseResults(text).get(codec);
      const guard = guardRows.get(codec);
      // The guard program without nodejs_compat is one more test of this row.
      const merged = row && guard ? { ...row, passed: row.passed + guard.passed, failed: row.failed + guard.failed } : undefined;
      // workerd's clock stands still while a request computes: time the request from outside.
      report('workerd', 'web', codec, merged ?? row, seconds(Date.now() - started));
      if (!merged || merged.failed > 0) console.log(indent(`${text}\n${guardText}\n${log}`));
    }
  } catch (error) {
    for (const codec of CODECS) report('workerd', 'web', codec, undefined, '');
    console.log(indent(String(error.message)));
  } finally {
    if (child.pid !== undefined) await stop(child, exited);
  }
}

/** SIGTERM to workerd's process group, SIGKILL after 5 s, and wait for it to exit. */
async function stop(child, exited) {
  try {
    process.kill(-child.pid, 'SIGTERM');
  } catch {}
  const killer = setTimeout(() => {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {}
  }, 5_000);
  await exited;
  clearTimeout(killer);
}

/** A seal+open program per codec, bundled for the web (browser/workerd conditions), minified, gzip -9. */
async function sizes() {
  const work = mkdtempSync(join(tmpdir(), 'mrtr-sizes-'));
  try {
    const nodePaths = [linkFarm(work)];
    const programs = {
      '@mrtr/codec-hmac': `import { KeyRing } from '@mrtr/core';
import { createHmacCodec } from '@mrtr/codec-hmac';
const codec = createHmacCodec(KeyRing.generate());
export const roundTrip = async (claims) => codec.unseal(await codec.seal(claims));`,
      '@mrtr/codec-jwe': `import { KeyRing } from '@mrtr/core';
import { createJweCodec } from '@mrtr/codec-jwe';
const codec = createJweCodec(KeyRing.generate());
export const roundTrip = async (claims) => codec.unseal(await codec.seal(claims));`,
      '@mrtr/codec-aead': `import { KeyRing } from '@mrtr/core';
import { createAeadCodec } from '@mrtr/codec-aead';
const codec = createAeadCodec(KeyRing.generate());
export const roundTrip = async (claims) => codec.unseal(await codec.seal(claims));`,
      'jose (JWE alone, for scale)': `import { CompactEncrypt, compactDecrypt } from 'jose';
export const roundTrip = async (key, text) =>
  compactDecrypt(await new CompactEncrypt(new TextEncoder().encode(text)).setProtectedHeader({ alg: 'dir', enc: 'A256GCM' }).encrypt(key), key);`,
    };
    const rows = [];
    for (const [name, source] of Object.entries(programs)) {
      const result = await esbuild.build({
        stdin: { contents: source, resolveDir: work, loader: 'js' },
        bundle: true,
        minify: true,
        format: 'esm',
        platform: 'browser',
        conditions: WEB_CONDITIONS,
        target: 'es2022',
        legalComments: 'none',
        write: false,
        nodePaths,
        logLevel: 'error',
        metafile: true,
      });
      const code = result.outputFiles[0].contents;
      // The bytes of the codec package's own files in the bundle (minified, before gzip).
      const inputs = Object.values(result.metafile.outputs)[0].inputs;
      const own = Object.entries(inputs)
        .filter(([path]) => path.includes(`${name.replace('@mrtr/', '')}/dist/`))
        .reduce((sum, [, input]) => sum + input.bytesInOutput, 0);
      rows.push([name, code.length, gzipSync(code, { level: 9 }).length, own]);
    }
    const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
    console.log('| seal + open program, web build | min | min + gzip -9 |');
    console.log('| --- | ---: | ---: |');
    for (const [name, min, gz] of rows) console.log(`| ${name} | ${kb(min)} | ${kb(gz)} |`);
    const aead = rows.find(([name]) => name === '@mrtr/codec-aead');
    // Two budgets. The whole program, 13.0 KB min+gzip: every web program carries @mrtr/core's KeyRing, its error
    // classes (one message per code) and its option checks, which grew with deliberate features (key schedules and
    // refreshing rings, +0.2 KB; the store contract's and idempotency's error codes, +0.07 KB; unknown options refused
    // with the closest known name, +0.29 KB: 12.38 → 12.73 KB). And the codec's own part, 7.6 KB minified (7,462 bytes
    // since it was last changed), which no core change moves: codec bloat fails here even when core shrinks.
    if (aead[2] > 13 * 1024) {
      console.log(`codec-aead web bundle is ${kb(aead[2])} min+gzip, over the 13.0 KB budget`);
      return false;
    }
    if (aead[3] > 7.6 * 1024) {
      console.log(`codec-aead's own part of its web bundle is ${kb(aead[3])} minified, over the 7.6 KB budget`);
      return false;
    }
    return true;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const [command, arg] = process.argv.slice(2);
let ok;
if (command === 'matrix') ok = await matrix(arg);
else if (command === 'sizes') ok = await sizes();
else {
  console.error('usage: run.mjs matrix <bin dir> | run.mjs sizes');
  ok = false;
}
process.exitCode = ok ? 0 : 1;

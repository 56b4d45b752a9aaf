#!/usr/bin/env node
// Copies an example out of the repository into a standalone project of its own.
//
//   node scripts/eject-example.mjs <example> <dir> [--tarballs <dir> [--pack]]
//
// <example>: a folder of examples/ (`aws-lambda`, `cloudflare-worker`, `vercel-next`) or its package name. <dir>
// must not exist or be empty. What the copy gets:
// - the example's files, without what only works inside the repository: test/ and vitest.config.ts (they use the
//   repository's test harness and vitest config) and the `test` script; nothing git-ignored (node_modules, dist,
//   .next, .wrangler, .dev.vars, .env.local);
// - the shared scripts its scripts/*.mjs import from the repository's scripts/ (example-harness.mjs,
//   upstash-rest-shim.mjs), copied next to them, the imports rewritten to `./<name>.mjs`;
// - package.json: every `workspace:*` range becomes `^<version>`, the version in the workspace package's
//   package.json, which is the published one (a release publishes the versions `changeset version` wrote); with
//   `--tarballs <dir>`, a `file:` path to `<dir>/mrtr-<name>-<version>.tgz` instead (what `pnpm pack` writes), and
//   every other @mrtr package those depend on, directly or as a peer, pinned to its tarball too (npm `overrides`,
//   pnpm `pnpm.overrides`). `--pack` runs `pnpm pack` for each of those packages into that directory first
//   (their dist/ must be built: `pnpm build`). `typescript` and `@types/node` are added as devDependencies (the
//   repository's root provides them) when the example has a `typecheck` script;
// - tsconfig.json: the repository's tsconfig.base.json folded in (without the workspace-only `@mrtr/source`
//   condition);
// - next.config.mjs (vercel-next): Turbopack's root is the project itself.
// Then: `cd <dir> && npm install && npm run dev` (or pnpm).
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const usage = 'usage: node scripts/eject-example.mjs <example> <dir> [--tarballs <dir> [--pack]]';

const argv = process.argv.slice(2);
const flag = (name) => {
  const i = argv.indexOf(`--${name}`);
  if (i < 0) return undefined;
  const [value] = argv.splice(i, 2).slice(1);
  if (value === undefined || value.startsWith('--')) fail(`--${name} needs a value\n${usage}`);
  return value;
};
function fail(message) {
  console.error(message);
  process.exit(1);
}
const tarballs = flag('tarballs');
const pack = argv.includes('--pack');
if (pack) argv.splice(argv.indexOf('--pack'), 1);
if (pack && tarballs === undefined) fail(`--pack needs --tarballs <dir>\n${usage}`);
const [exampleArg, dirArg, ...extra] = argv;
if (exampleArg === undefined || dirArg === undefined || extra.length > 0) fail(usage);

const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));
const examples = readdirSync(join(repo, 'examples')).filter((name) => existsSync(join(repo, 'examples', name, 'package.json')));
const exampleName = examples.find(
  (name) => name === exampleArg || readJson(join(repo, 'examples', name, 'package.json')).name === exampleArg,
);
if (exampleName === undefined) fail(`no example "${exampleArg}": one of ${examples.join(', ')}`);
const source = join(repo, 'examples', exampleName);
const target = resolve(dirArg);
if (existsSync(target) && readdirSync(target).length > 0) fail(`${target} exists and is not empty`);

/** The workspace's packages by name: their folder and package.json. */
const workspace = new Map(
  readdirSync(join(repo, 'packages'))
    .filter((name) => existsSync(join(repo, 'packages', name, 'package.json')))
    .map((name) => {
      const manifest = readJson(join(repo, 'packages', name, 'package.json'));
      return [manifest.name, { dir: join(repo, 'packages', name), manifest }];
    }),
);

// 1. The files: everything tracked or untracked-but-not-ignored, less the repository-only test setup.
const listed = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z', '--', '.'], {
  cwd: source,
  encoding: 'utf8',
})
  .split('\0')
  .filter((file) => file !== '' && existsSync(join(source, file)));
const repoOnly = (file) => file === 'vitest.config.ts' || file.startsWith('test/');
mkdirSync(target, { recursive: true });
for (const file of listed.filter((f) => !repoOnly(f))) {
  mkdirSync(dirname(join(target, file)), { recursive: true });
  cpSync(join(source, file), join(target, file));
}

// 2. Shared scripts imported from the repository's scripts/: copied next to the example's scripts.
const shared = /(['"])\.\.\/\.\.\/\.\.\/scripts\/([\w.-]+\.mjs)\1/g;
const copied = new Set();
for (const file of listed.filter((f) => /^scripts\/[^/]+\.mjs$/.test(f))) {
  const path = join(target, file);
  const text = readFileSync(path, 'utf8');
  writeFileSync(
    path,
    text.replace(shared, (_all, quote, name) => {
      copied.add(name);
      return `${quote}./${name}${quote}`;
    }),
  );
}
for (const name of copied) {
  cpSync(join(repo, 'scripts', name), join(target, 'scripts', name));
  const types = name.replace(/\.mjs$/, '.d.mts');
  if (existsSync(join(repo, 'scripts', types))) cpSync(join(repo, 'scripts', types), join(target, 'scripts', types));
}

// 3. package.json: workspace ranges → published versions or tarballs.
const manifest = readJson(join(source, 'package.json'));
const direct = new Set();
for (const field of ['dependencies', 'devDependencies']) {
  for (const [name, range] of Object.entries(manifest[field] ?? {})) if (String(range).startsWith('workspace:')) direct.add(name);
}
/** The @mrtr packages needed: the direct ones and every workspace package they depend on or peer on. */
const needed = new Set();
const visit = (name) => {
  if (needed.has(name)) return;
  const entry = workspace.get(name);
  if (entry === undefined) fail(`${name} is a workspace dependency of ${manifest.name} but not a package in packages/`);
  needed.add(name);
  for (const field of ['dependencies', 'peerDependencies']) {
    for (const [dep, range] of Object.entries(entry.manifest[field] ?? {})) if (String(range).startsWith('workspace:')) visit(dep);
  }
};
for (const name of direct) visit(name);

const tarballOf = new Map();
if (tarballs !== undefined) {
  const dir = resolve(tarballs);
  mkdirSync(dir, { recursive: true });
  for (const name of needed) {
    const { dir: packageDir, manifest: m } = workspace.get(name);
    const file = join(dir, `${name.replace(/^@/, '').replace('/', '-')}-${m.version}.tgz`);
    if (pack) {
      rmSync(file, { force: true });
      execFileSync('pnpm', ['pack', '--pack-destination', dir], { cwd: packageDir, stdio: ['ignore', 'ignore', 'inherit'] });
    }
    if (!existsSync(file)) fail(`no tarball for ${name}@${m.version}: ${file} (pack it with \`pnpm pack\`, or pass --pack)`);
    tarballOf.set(name, `file:${file}`);
  }
}
const versionOf = (name) => tarballOf.get(name) ?? `^${workspace.get(name).manifest.version}`;
for (const field of ['dependencies', 'devDependencies']) {
  for (const [name, range] of Object.entries(manifest[field] ?? {}))
    if (String(range).startsWith('workspace:')) manifest[field][name] = versionOf(name);
}
if (tarballOf.size > 0) {
  const overrides = Object.fromEntries([...tarballOf].filter(([name]) => !direct.has(name)));
  if (Object.keys(overrides).length > 0) {
    manifest.overrides = { ...manifest.overrides, ...overrides };
    manifest.pnpm = { ...manifest.pnpm, overrides: { ...manifest.pnpm?.overrides, ...overrides } };
  }
}
if (manifest.scripts) delete manifest.scripts.test;
const root = readJson(join(repo, 'package.json'));
if (manifest.scripts?.typecheck) {
  manifest.devDependencies ??= {};
  for (const name of ['typescript', '@types/node']) manifest.devDependencies[name] ??= root.devDependencies[name];
  manifest.devDependencies = Object.fromEntries(Object.entries(manifest.devDependencies).sort(([a], [b]) => a.localeCompare(b)));
}
writeFileSync(join(target, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);

// 4. tsconfig.json: the base folded in, repository-only settings out, test/ no longer included.
const tsconfigPath = join(source, 'tsconfig.json');
if (existsSync(tsconfigPath)) {
  const own = readJson(tsconfigPath);
  let compilerOptions = own.compilerOptions ?? {};
  if (typeof own.extends === 'string') {
    const base = readJson(resolve(source, own.extends));
    compilerOptions = { ...base.compilerOptions, ...compilerOptions };
  }
  delete compilerOptions.customConditions;
  const include = (own.include ?? []).filter((entry) => entry !== 'test' && existsSync(join(target, entry)));
  const { extends: _extends, ...rest } = own;
  writeFileSync(join(target, 'tsconfig.json'), `${JSON.stringify({ ...rest, compilerOptions, include }, null, 2)}\n`);
}

// 5. Next.js: the project is its own Turbopack root.
const nextConfig = join(target, 'next.config.mjs');
if (existsSync(nextConfig)) {
  const text = readFileSync(nextConfig, 'utf8');
  const rewritten = text.replace(/^const root = .*$/m, 'const root = here; // copied out of the mrtr repository: its own root');
  if (rewritten === text) fail('next.config.mjs: no `const root = …` line to rewrite');
  writeFileSync(nextConfig, rewritten);
}

// 6. .gitignore: what the repository's root .gitignore covered for it.
const ignore = join(target, '.gitignore');
const lines = existsSync(ignore) ? readFileSync(ignore, 'utf8').split('\n').filter(Boolean) : [];
for (const line of ['node_modules/', 'dist/', '*.tsbuildinfo', '.dev.vars']) if (!lines.includes(line)) lines.push(line);
writeFileSync(ignore, `${lines.join('\n')}\n`);

console.log(`${manifest.name} → ${relative(process.cwd(), target) || '.'}`);
for (const name of needed)
  console.log(`  ${name}: ${tarballOf.get(name) ?? versionOf(name)}${direct.has(name) || !tarballOf.has(name) ? '' : ' (override)'}`);
if (copied.size > 0) console.log(`  scripts: ${[...copied].join(', ')} copied from the repository`);
console.log(`next: cd ${relative(process.cwd(), target) || '.'} && npm install && npm run dev`);

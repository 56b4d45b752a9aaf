// The published artefact works: `pnpm pack` the CLI and the workspace packages it depends on, install the
// tarballs with npm in a fresh project (the rest comes from the registry), and run `npx mrtr`. The stores and
// their drivers are optional peers, not installed here: keygen and the memory store work without them, and a
// store that needs them names what to install.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS } from './helpers.js';

const run = promisify(execFile);
const PACKAGES = fileURLToPath(new URL('../../', import.meta.url));
const WORKSPACE_DEPS = ['cli', 'core', 'codec-hmac', 'codec-jwe', 'codec-aead', 'store-memory'];
const OPTIONAL = [
  '@mrtr/store-redis',
  '@mrtr/store-sql',
  '@mrtr/store-upstash',
  '@mrtr/store-dynamodb',
  'ioredis',
  'pg',
  'better-sqlite3',
  '@upstash/redis',
  '@aws-sdk/client-dynamodb',
];

describe('the packed tarball in a fresh project', () => {
  const root = mkdtempSync(join(tmpdir(), 'mrtr-cli-pack-'));
  const tarballs = join(root, 'tarballs');
  const project = join(root, 'project');
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? root,
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
  };

  beforeAll(async () => {
    for (const name of WORKSPACE_DEPS) {
      await run('pnpm', ['pack', '--pack-destination', tarballs], { cwd: join(PACKAGES, name), env, timeout: 60_000 });
    }
    await run('mkdir', ['-p', project]);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'fresh', version: '1.0.0', private: true }));
    const files = readdirSync(tarballs).map((f) => join(tarballs, f));
    await run('npm', ['install', '--no-package-lock', '--ignore-scripts', ...files], { cwd: project, env, timeout: 240_000 });
  }, 300_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('npm installs none of the optional store packages and drivers', () => {
    for (const name of OPTIONAL) expect(existsSync(join(project, 'node_modules', name)), name).toBe(false);
  });

  it('npx mrtr keygen prints an entry', async () => {
    const { stdout } = await run('npx', ['--no-install', 'mrtr', 'keygen', '--kid', 'fresh'], { cwd: project, env, timeout: 60_000 });
    expect(stdout).toMatch(/^fresh:[A-Za-z0-9_-]{43}\n$/);
  });

  it('npx mrtr doctor loads every codec from the installed packages', async () => {
    const { stdout } = await run('npx', ['--no-install', 'mrtr', 'doctor', '--store', 'memory'], {
      cwd: project,
      env: { ...env, MRTR_KEYS: KEYS },
      timeout: 60_000,
    });
    expect(stdout).toMatch(/^ok {4}codec hmac/m);
    expect(stdout).toMatch(/^ok {4}codec jwe/m);
    expect(stdout).toMatch(/^ok {4}codec aead/m);
  });

  it.each([
    ['redis', { REDIS_URL: 'redis://127.0.0.1:1' }, '@mrtr/store-redis and ioredis', '@mrtr/store-redis'],
    ['postgres', { DATABASE_URL: 'postgres://127.0.0.1:1/db' }, '@mrtr/store-sql and pg', 'pg'],
    ['sqlite', { MRTR_SQLITE_FILE: 'replay.sqlite' }, '@mrtr/store-sql and better-sqlite3', 'better-sqlite3'],
    [
      'upstash',
      { UPSTASH_REDIS_REST_URL: 'http://127.0.0.1:1', UPSTASH_REDIS_REST_TOKEN: 't' },
      '@mrtr/store-upstash and @upstash/redis',
      '@mrtr/store-upstash',
    ],
    ['dynamodb', { MRTR_DYNAMODB_TABLE: 'mrtr' }, '@mrtr/store-dynamodb and @aws-sdk/client-dynamodb', '@aws-sdk/client-dynamodb'],
  ])('npx mrtr doctor --store %s names the packages to install', async (store, storeEnv, needs, missing) => {
    const r = await run('npx', ['--no-install', 'mrtr', 'doctor', '--store', store, '--codec', 'hmac'], {
      cwd: project,
      env: { ...env, MRTR_KEYS: KEYS, ...storeEnv },
      timeout: 60_000,
    }).catch((error: { code: number; stdout: string }) => error);
    expect('code' in r ? r.code : 0).toBe(1);
    expect(r.stdout).toContain(
      `doctor --store ${store} needs ${needs} installed next to @mrtr/cli, and ${missing} was not found: npm i -D ${needs.replace(' and ', ' ')}`,
    );
  });

  it('the tarball holds the built CLI, the README and package.json only', async () => {
    const cli = readdirSync(tarballs).find((f) => f.startsWith('mrtr-cli-'))!;
    const { stdout } = await run('tar', ['-tzf', join(tarballs, cli)], { env });
    expect(stdout.trim().split('\n').sort()).toEqual([
      'package/CHANGELOG.md',
      'package/LICENSE',
      'package/README.md',
      'package/dist/cli.js',
      'package/dist/cli.js.map',
      'package/package.json',
    ]);
  });
});

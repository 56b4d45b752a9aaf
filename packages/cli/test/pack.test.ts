// The published artefact works: `pnpm pack` the CLI and the workspace packages it depends on, install the
// tarballs with npm in a fresh project (the rest comes from the registry), and run `npx mrtr`.
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEYS } from './helpers.js';

const run = promisify(execFile);
const PACKAGES = fileURLToPath(new URL('../../', import.meta.url));
const WORKSPACE_DEPS = ['cli', 'core', 'codec-hmac', 'codec-jwe', 'codec-aead', 'store-memory', 'store-redis', 'store-sql'];

describe('the packed tarball in a fresh project', () => {
  const root = mkdtempSync(join(tmpdir(), 'mrtr-cli-pack-'));
  const tarballs = join(root, 'tarballs');
  const project = join(root, 'project');
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? root, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };

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

  it('npx mrtr keygen prints an entry', async () => {
    const { stdout } = await run('npx', ['--no-install', 'mrtr', 'keygen', '--kid', 'fresh'], { cwd: project, env, timeout: 60_000 });
    expect(stdout).toMatch(/^fresh:[A-Za-z0-9_-]{43}\n$/);
  });

  it('npx mrtr doctor loads every codec from the installed packages', async () => {
    const { stdout } = await run('npx', ['--no-install', 'mrtr', 'doctor', '--store', 'memory'], { cwd: project, env: { ...env, MRTR_KEYS: KEYS }, timeout: 60_000 });
    expect(stdout).toMatch(/^ok {4}codec hmac/m);
    expect(stdout).toMatch(/^ok {4}codec jwe/m);
    expect(stdout).toMatch(/^ok {4}codec aead/m);
  });

  it('the tarball holds the built CLI, the README and package.json only', async () => {
    const cli = readdirSync(tarballs).find((f) => f.startsWith('mrtr-cli-'))!;
    const { stdout } = await run('tar', ['-tzf', join(tarballs, cli)], { env });
    expect(stdout.trim().split('\n').sort()).toEqual(['package/CHANGELOG.md', 'package/LICENSE', 'package/README.md', 'package/dist/cli.js', 'package/dist/cli.js.map', 'package/package.json']);
  });
});

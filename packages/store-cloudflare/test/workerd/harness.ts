// Runs Workers under the real runtime: bundles an entry with esbuild for workerd, writes a capnp config, starts
// `workerd serve` (npm `workerd`, a dev dependency) on loopback ports, and stops it. Every wait is bounded.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
export const REQUIRE_SERVICES: boolean = process.env.MRTR_REQUIRE_SERVICES === '1';

/** The workerd binary of the `workerd` package, or why it cannot run here. */
export function findWorkerd(): { bin: string } | { problem: string } {
  let bin: string;
  try {
    // The package's main export is the path of its platform's native binary (an optional dependency).
    bin = (require('workerd') as { default: string }).default;
  } catch (error) {
    return { problem: `the workerd package has no binary for this platform: ${(error as Error).message.split('\n')[0]}` };
  }
  const probe = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 30_000 });
  if (probe.status !== 0)
    return { problem: `workerd does not run here: ${(probe.stderr || probe.error?.message || '').trim().slice(0, 300)}` };
  return { bin };
}

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });

/**
 * Bundles `entry` (a module Worker) for workerd: the packages from source (the workspace's "@mrtr/source"
 * condition), their web builds (`workerd`, `worker`, `browser` conditions), Node built-ins left to nodejs_compat.
 */
export async function bundleWorker(entry: string, outfile: string, conditions: string[] = ['@mrtr/source']): Promise<void> {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    conditions: [...conditions, 'workerd', 'worker', 'browser'],
    external: ['node:*', 'cloudflare:*'],
    logLevel: 'error',
    legalComments: 'none',
  });
}

export interface Workerd {
  readonly dir: string;
  /** Everything workerd printed so far (for failure messages). */
  log(): string;
  /** SIGTERM to its process group, SIGKILL after 5 s; removes its folder. Idempotent. */
  stop(): Promise<void>;
}

/** A folder for a workerd run (the bundle, the config, any on-disk storage). */
export const workDir = (): string => mkdtempSync(join(tmpdir(), 'mrtr-workerd-'));

/**
 * Starts `workerd serve <config>` in `dir` and waits until `readyUrl` answers (bounded: 60 s, or at once when
 * workerd exits).
 */
export async function startWorkerd(bin: string, dir: string, config: string, readyUrl: string, keepDir = false): Promise<Workerd> {
  writeFileSync(join(dir, 'config.capnp'), config);
  const child: ChildProcess = spawn(bin, ['serve', join(dir, 'config.capnp'), '--verbose'], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let log = '';
  child.stdout?.on('data', (d) => (log += d));
  child.stderr?.on('data', (d) => (log += d));
  child.on('error', (error) => (log += `\n${error.message}`));
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    if (child.pid !== undefined && child.exitCode === null) {
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {}
      const killer = setTimeout(() => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {}
      }, 5_000);
      await exited;
      clearTimeout(killer);
    }
    if (!keepDir) rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (let attempt = 0; attempt < 1_200; attempt++) {
    if (child.exitCode !== null) break;
    try {
      const response = await fetch(readyUrl, { signal: AbortSignal.timeout(5_000) });
      await response.text();
      return { dir, log: () => log, stop };
    } catch {}
    if (Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await stop();
  throw new Error(`workerd did not start:\n${log.slice(-4000)}`);
}

export const fixture = (name: string): string => join(here, name);

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import * as net from 'node:net';
import { MrtrError } from '@mrtr/core';
import { Redis } from 'ioredis';
import { it } from 'vitest';

// Redis availability: REDIS_URL unset → the Redis tests skip with a printed reason, unless
// MRTR_REQUIRE_SERVICES=1, where a missing or unreachable Redis fails.
export const REDIS_URL: string | undefined = process.env.REDIS_URL === '' ? undefined : process.env.REDIS_URL;
export const REQUIRE_SERVICES: boolean = process.env.MRTR_REQUIRE_SERVICES === '1';
export const skipRedis: boolean = REDIS_URL === undefined;

/** Call at the top of a test file: prints why it skips, or registers a failing test when Redis is required. */
export function gateRedis(file: string): void {
  if (!skipRedis) return;
  if (REQUIRE_SERVICES) {
    it('Redis is required (MRTR_REQUIRE_SERVICES=1) but REDIS_URL is not set', () => {
      throw new Error('REDIS_URL must be set when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn(`[store-redis] ${file}: Redis tests skipped because REDIS_URL is not set`);
  }
}

/** Fails with a clear message when the configured Redis does not answer (set but unreachable is an error). */
export async function assertRedisReachable(url: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, connectTimeout: 3000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    const pong = await client.ping();
    if (pong !== 'PONG') throw new Error(`unexpected PING reply ${pong}`);
  } catch (error) {
    throw new Error(`Redis at REDIS_URL is unreachable: ${(error as Error).message}`, { cause: error });
  } finally {
    client.disconnect();
  }
}

export const sleep = (ms: number): Promise<void> => new Promise<void>((resolve) => setTimeout(resolve, ms));

let sequence = 0;
export const uniqueId = (tag: string): string =>
  `${tag}:${process.pid}:${Date.now().toString(36)}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;

/** Resolves the outcome of a consume as `true`, `false` or the MrtrError code (anything else is re-thrown). */
export async function outcome<T>(promise: Promise<T>): Promise<T | string> {
  try {
    return await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// A throwaway redis-server under the test's control (the shared Redis is never stopped).

export function redisServerBinary(): string | undefined {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore', timeout: 5000 });
    return 'redis-server';
  } catch {
    return undefined;
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === 'object') resolve(address.port);
        else reject(new Error('no port'));
      });
    });
  });
}

export interface ThrowawayRedis {
  readonly port: number;
  readonly url: string;
  readonly running: boolean;
  /** Starts redis-server on `port` and waits (≤ 10 s) until it accepts connections. */
  start(): Promise<void>;
  /** SIGKILLs the server and waits until the process has exited. */
  kill(): Promise<void>;
  /** SIGSTOP / SIGCONT: the server keeps its socket open but stops answering. */
  pause(): void;
  resume(): void;
}

export function throwawayRedis(port: number, extraArgs: readonly string[] = []): ThrowawayRedis {
  let child: ChildProcess | undefined;
  let exited: Promise<void> | undefined;
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get running() {
      return child !== undefined;
    },
    async start() {
      if (child !== undefined) throw new Error('already running');
      const proc = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--save',
          '',
          '--appendonly',
          'no',
          '--daemonize',
          'no',
          '--loglevel',
          'notice',
          ...extraArgs,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      child = proc;
      exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      let output = '';
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => finish(new Error(`redis-server did not start in 10 s:\n${output}`)), 10_000);
        const onData = (chunk: Buffer) => {
          output += chunk.toString();
          if (output.includes('Ready to accept connections')) finish();
        };
        const onExit = (code: number | null) => finish(new Error(`redis-server exited (${code}) at start:\n${output}`));
        function finish(error?: Error) {
          clearTimeout(timer);
          proc.stdout?.off('data', onData);
          proc.off('exit', onExit);
          if (error) reject(error);
          else resolve();
        }
        proc.stdout?.on('data', onData);
        proc.stderr?.on('data', (chunk: Buffer) => {
          output += chunk.toString();
        });
        proc.once('exit', onExit);
      });
      proc.stdout?.resume();
    },
    async kill() {
      if (child === undefined) return;
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await exited;
      child = undefined;
    },
    pause() {
      child?.kill('SIGSTOP');
    },
    resume() {
      child?.kill('SIGCONT');
    },
  };
}

/** Blocks the event loop for `ms` (a slow, CPU-starved process): timers and socket reads wait behind it. */
export function blockEventLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spin
  }
}

/** Gates a test file on the redis-server binary (throwaway servers), like the outage tests. */
export function gateRedisServer(file: string): boolean {
  const present = redisServerBinary() !== undefined;
  if (present) return true;
  if (REQUIRE_SERVICES) {
    it('redis-server is required (MRTR_REQUIRE_SERVICES=1) but is not on PATH', () => {
      throw new Error('redis-server must be on PATH when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn(`[store-redis] ${file}: tests skipped because redis-server is not on PATH`);
  }
  return false;
}

/** Polls until `check` holds: bounded in count and time; waits for a state, never for a fixed time. */
export async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 0; attempt < 3000 && Date.now() < deadline; attempt++) {
    if (await check().catch(() => false)) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

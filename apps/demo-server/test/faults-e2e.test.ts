import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { accept, freshKeys, type Json, type RunningDemo, rawRpc, serviceUrl, startDemo } from './helpers.js';

/**
 * Exactly once under the faults production brings, over HTTP between real instances sharing one store: an instance
 * whose clock drifted refuses (and says so) instead of accepting spent states again; an instance that dies between a
 * tool's effect and its record leaves "outcome unknown" to the retry, never "invalid"; a Redis restarted without
 * persistence refuses the states it forgot. The store is Redis (the default local one, or a private redis-server this
 * test starts and restarts); PostgreSQL when DATABASE_URL is set.
 */
const TOKENS = 'alice:alice-token-faults-0123456789ab';
const ALICE = 'alice-token-faults-0123456789ab';
const FORM = { elicitation: { form: {} } };
const running: RunningDemo[] = [];

afterAll(async () => {
  await Promise.all(running.splice(0).map((demo) => demo.stop('SIGKILL')));
});

const start = async (args: string[], env: Record<string, string>): Promise<RunningDemo> => {
  const demo = await startDemo(args, { env: { MRTR_DEMO_TOKENS: TOKENS, ...env } });
  running.push(demo);
  return demo;
};

const call = async (demo: RunningDemo, args: Json, extra: Json = {}) => {
  const r = await rawRpc(demo.url, 'tools/call', { name: 'deploy', arguments: args, ...extra }, { token: ALICE, capabilities: FORM });
  expect(r.status).toBe(200);
  return r.body!;
};

/** The deploy flow on `demo` up to its last round: the params that confirm it (state and answers). */
async function lastRound(demo: RunningDemo, service: string): Promise<Json> {
  const r1 = await call(demo, { service });
  const r2 = await call(
    demo,
    { service },
    { requestState: (r1.result as Json).requestState, inputResponses: { environment: accept({ environment: 'staging' }) } },
  );
  return { requestState: (r2.result as Json).requestState, inputResponses: { confirm: accept({ confirm: true }) } };
}

/** A sample of `name{…labels}` from `demo`'s /metrics (the first line whose labels include `labels`). */
async function metric(demo: RunningDemo, name: string, labels = ''): Promise<number | undefined> {
  const text = await (await fetch(new URL('/metrics', demo.url), { headers: { authorization: `Bearer ${ALICE}` } })).text();
  const line = text.split('\n').find((l) => l.startsWith(name) && (l[name.length] === ' ' || l[name.length] === '{') && l.includes(labels));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** A free TCP port on 127.0.0.1. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A private redis-server without persistence on `port`, once it answers. */
async function privateRedis(port: number, extra: string[] = []): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`redis-server did not start: ${out}`)), 15_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('Ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => reject(new Error(`redis-server exited with ${code}: ${out}`)));
  });
  return child;
}

/**
 * Two instances on one store, B `seconds` behind, states living 2 s: a flow completed on A is refused on B with the skew
 * reason (same answers or others), B mints nothing, runs nothing, and its gauge shows the offset.
 */
async function skewRun(args: string[], env: Record<string, string>, seconds: number): Promise<void> {
  const a = await start([...args, '--ttl-ms', '2000'], env);
  const b = await start([...args, '--ttl-ms', '2000'], { ...env, MRTR_DEMO_CLOCK_OFFSET_MS: String(-seconds * 1000) });
  expect(b.stderr()).toMatch(new RegExp(`clock is \\+(${seconds - 1}|${seconds})\\d{3} ms off the store's`));
  const last = await lastRound(a, 'web');
  const done = (await call(a, { service: 'web' }, last)).result as Json;
  expect(done.structuredContent).toMatchObject({ service: 'web', environment: 'staging' });
  // The spent state on the skewed instance, with the same answers and with others: refused, never run.
  for (const extra of [last, { ...last, inputResponses: { confirm: accept({ confirm: false }) } }]) {
    const refused = await call(b, { service: 'web' }, extra);
    expect(refused.error).toMatchObject({ code: -32603, data: { reason: 'clock_skew' } });
  }
  // And a new flow there: nothing is minted by a skewed instance.
  expect((await call(b, { service: 'api' })).error).toMatchObject({ code: -32603, data: { reason: 'clock_skew' } });
  expect(await metric(b, 'mrtr_demo_effects_total', 'tool="deploy"')).toBe(0);
  expect(await metric(a, 'mrtr_demo_effects_total', 'tool="deploy"')).toBe(1);
  const offset = await metric(b, 'mrtr_clock_skew');
  expect(offset).toBeGreaterThan(seconds - 1);
  expect(offset).toBeLessThan(seconds + 1);
  expect(Math.abs((await metric(a, 'mrtr_clock_skew')) ?? 99)).toBeLessThan(1);
}

const redis = serviceUrl('REDIS_URL');
const postgres = serviceUrl('DATABASE_URL');
const hasRedisServer = await new Promise<boolean>((resolve) => {
  const probe = spawn('redis-server', ['--version'], { stdio: 'ignore' });
  probe.once('error', () => resolve(false));
  probe.once('exit', (code) => resolve(code === 0));
});

describe.skipIf(redis.skip !== undefined)('faults between instances on Redis', () => {
  if (redis.error !== undefined) {
    it('needs REDIS_URL', () => {
      throw new Error(redis.error);
    });
    return;
  }
  const shared = (namespace: string) => ({ MRTR_KEYS: keys, MRTR_DEMO_NAMESPACE: namespace, REDIS_URL: redis.url! });
  const keys = freshKeys();

  it('an instance 30 s behind refuses every state (ERR_CLOCK_SKEW), shows its offset, and never accepts a spent one again', async () => {
    await skewRun(['--store', 'redis'], shared(`skew-${process.pid}-${Date.now()}`), 30);
  });

  it('an instance killed between the effect and its record: the retry elsewhere gets "outcome unknown", never a second run', async () => {
    const namespace = `crash-${process.pid}-${Date.now()}`;
    const lease = { MRTR_DEMO_LEASE_MS: '600' };
    const a = await start(['--store', 'redis'], { ...shared(namespace), ...lease, MRTR_DEMO_CRASH_AFTER_EFFECT: 'deploy' });
    const b = await start(['--store', 'redis'], { ...shared(namespace), ...lease });
    const last = await lastRound(a, 'web');
    await expect(call(a, { service: 'web' }, last)).rejects.toThrow();
    expect(await a.exited).toBe('SIGKILL');
    expect(a.stderr()).toContain('deploy effect done; crashing before its outcome is recorded');
    // The identical retry on B: "in progress" (with when to come back) while A's lease runs, then "outcome unknown".
    let answer: Json | undefined;
    for (let i = 0; i < 200; i++) {
      answer = await call(b, { service: 'web' }, last);
      const reason = ((answer.error as Json | undefined)?.data as Json | undefined)?.reason;
      if (reason !== 'round_in_progress') break;
      await new Promise((resolve) => setTimeout(resolve, Number(((answer!.error as Json).data as Json).retryAfterMs)));
    }
    expect(answer!.error).toMatchObject({ code: -32600, data: { reason: 'outcome_unknown' } });
    expect((answer!.error as Json).message).toMatch(/may have run/);
    expect(await metric(b, 'mrtr_rounds_unknown_total', 'gen_ai_tool_name="deploy"')).toBe(1);
    expect(await metric(b, 'mrtr_demo_effects_total', 'tool="deploy"')).toBe(0);
  });

  it.skipIf(!hasRedisServer)(
    'a Redis restarted without persistence refuses the states it forgot (ERR_LEDGER_LOST), and serves new flows',
    async () => {
      const port = await freePort();
      let server = await privateRedis(port);
      try {
        const env = { MRTR_KEYS: keys, REDIS_URL: `redis://127.0.0.1:${port}` };
        const a = await start(['--store', 'redis'], env);
        expect(a.stderr()).toMatch(/persist/i);
        const last = await lastRound(a, 'web');
        expect(((await call(a, { service: 'web' }, last)).result as Json).structuredContent).toMatchObject({ service: 'web' });
        const pending = await lastRound(a, 'db');
        server.kill('SIGKILL');
        await new Promise((resolve) => server.once('exit', resolve));
        server = await privateRedis(port);
        // Both the spent state and the one minted before the restart: refused, whatever the answers.
        for (const extra of [last, pending]) {
          // The store's connection comes back first (store_unavailable, retried as a client would), then the refusal.
          let refused = await call(a, { service: extra === last ? 'web' : 'db' }, extra);
          for (let i = 0; i < 50 && ((refused.error as Json)?.data as Json)?.reason === 'store_unavailable'; i++) {
            await new Promise((resolve) => setTimeout(resolve, 100));
            refused = await call(a, { service: extra === last ? 'web' : 'db' }, extra);
          }
          expect(refused.error).toMatchObject({ code: -32602, data: { reason: 'ledger_lost' } });
        }
        expect(await metric(a, 'mrtr_demo_effects_total', 'tool="deploy"')).toBe(1);
        // A flow started after the restart runs.
        const fresh = await lastRound(a, 'cache');
        expect(((await call(a, { service: 'cache' }, fresh)).result as Json).structuredContent).toMatchObject({ service: 'cache' });
      } finally {
        server.kill('SIGKILL');
      }
    },
  );

  it.skipIf(!hasRedisServer)(
    'a managed-style Redis (CONFIG refused) that evicts: the policy is read from INFO and the instance refuses to serve',
    async () => {
      const port = await freePort();
      const evicting = ['--rename-command', 'CONFIG', '', '--maxmemory', '64mb', '--maxmemory-policy', 'volatile-lru'];
      const server = await privateRedis(port, evicting);
      try {
        // An evicted id would let a spent state in again: the store refuses every spend, and the demo will not start on it.
        const started = start(['--store', 'redis'], { MRTR_KEYS: keys, REDIS_URL: `redis://127.0.0.1:${port}` });
        await expect(started).rejects.toThrow(/exited with 1 before listening[\s\S]*maxmemory-policy is "volatile-lru"/);
      } finally {
        server.kill('SIGKILL');
      }
    },
  );
});

describe.skipIf(postgres.skip !== undefined)('faults between instances on PostgreSQL', () => {
  it('an instance 120 s behind refuses every state (ERR_CLOCK_SKEW), shows its offset, and never accepts a spent one again', async () => {
    if (postgres.error !== undefined) throw new Error(postgres.error);
    const env = { MRTR_KEYS: freshKeys(), MRTR_DEMO_NAMESPACE: `skew-${process.pid}-${Date.now()}`, DATABASE_URL: postgres.url! };
    await skewRun(['--store', 'postgres'], env, 120);
  });
});

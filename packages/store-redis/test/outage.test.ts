import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisReplayStore } from '../src/index.js';
import { freePort, outcome, REQUIRE_SERVICES, redisServerBinary, sleep, type ThrowawayRedis, throwawayRedis, uniqueId } from './helpers.js';

// These tests start their own redis-server on a free port (never the shared one), so they need the
// redis-server binary rather than REDIS_URL.
const binary = redisServerBinary();
if (binary === undefined) {
  if (REQUIRE_SERVICES) {
    it('redis-server is required (MRTR_REQUIRE_SERVICES=1) for the outage tests but is not on PATH', () => {
      throw new Error('redis-server must be on PATH when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn('[store-redis] outage.test.ts: outage tests skipped because redis-server is not on PATH');
  }
}

const COMMAND_TIMEOUT_MS = 400;

describe.skipIf(binary === undefined)('Redis outage and recovery (throwaway redis-server)', () => {
  let server: ThrowawayRedis;
  let store: RedisReplayStore;

  beforeAll(async () => {
    server = throwawayRedis(await freePort());
    await server.start();
    store = createRedisStore({
      url: server.url,
      namespace: 'outage',
      commandTimeoutMs: COMMAND_TIMEOUT_MS,
      connectTimeoutMs: 1000,
      maxReconnectDelayMs: 200,
    });
  });

  afterAll(async () => {
    await store?.close();
    await server?.kill();
  });

  /** Consumes fresh ids until one succeeds (bounded in count and time), without recreating the store. */
  async function waitForRecovery(): Promise<number> {
    const deadline = Date.now() + 15_000;
    for (let attempt = 1; attempt <= 1000 && Date.now() < deadline; attempt++) {
      const result = await outcome(store.consume(uniqueId('probe'), Date.now() + 60_000));
      if (result === true) return attempt;
      expect(result).toBe('ERR_STORE_UNAVAILABLE');
      await sleep(20);
    }
    throw new Error('the store did not recover within 15 s');
  }

  it('server killed mid-loop: every consume during the outage rejects ERR_STORE_UNAVAILABLE; restart → consumes succeed again', async () => {
    const client = store.client as Redis;
    const before: string[] = [];
    const during: (boolean | string)[] = [];
    const causes: string[] = [];
    let killedAt = -1;
    const deadline = Date.now() + 20_000;
    // One loop: 150 consumes against a live server, kill it, then 150 more while it is down.
    for (let i = 0; i < 300 && Date.now() < deadline; i++) {
      if (i === 150) {
        await server.kill();
        killedAt = i;
      }
      const id = uniqueId('loop');
      const result = await store.consume(id, Date.now() + 60_000).then(
        (value) => value as boolean | string,
        (error: { code?: string; cause?: unknown }) => {
          causes.push(String(error.cause));
          return error.code ?? String(error);
        },
      );
      if (killedAt < 0) {
        expect(result).toBe(true);
        before.push(id);
      } else {
        during.push(result);
        // Spread the outage over several reconnect attempts.
        if (i % 10 === 0) await sleep(20);
      }
    }
    expect(before).toHaveLength(150);
    expect(during).toHaveLength(150);
    // A fresh id can only be true (first use) or an outage error: false would mean "replayed", true
    // would mean a server that is not there recorded it. Every one must be the outage error.
    expect(during.filter((r) => r !== 'ERR_STORE_UNAVAILABLE')).toEqual([]);
    // Failing fast: every consume was refused at once (connection closed, offline queue disabled);
    // none waited out the command timeout. Asserted on the causes, not on elapsed time, so a loaded
    // machine cannot fail it.
    expect(causes).toHaveLength(150);
    expect(causes.filter((cause) => /timed out/i.test(cause))).toEqual([]);
    expect(client.status).not.toBe('ready');

    // A burst of parallel consumes during the outage: all rejected too.
    const burst = await Promise.all(Array.from({ length: 64 }, () => outcome(store.consume(uniqueId('burst'), Date.now() + 60_000))));
    expect(burst.every((r) => r === 'ERR_STORE_UNAVAILABLE')).toBe(true);

    await server.start();
    const attempts = await waitForRecovery();
    expect(attempts).toBeGreaterThanOrEqual(1);
    expect(store.client).toBe(client);
    for (let i = 0; i < 100; i++) {
      const id = uniqueId('after');
      expect(await store.consume(id, Date.now() + 60_000)).toBe(true);
      expect(await store.consume(id, Date.now() + 60_000)).toBe(false);
    }
  });

  it('in-flight consumes when the server dies never resolve true or false wrongly', async () => {
    await waitForRecovery();
    // Fire a wave of consumes and kill the server while they are on the wire.
    const ids = Array.from({ length: 500 }, () => uniqueId('inflight'));
    const pending = ids.map((id) => outcome(store.consume(id, Date.now() + 60_000)));
    const killing = server.kill();
    const results = await Promise.all(pending);
    await killing;
    // Any id that resolved true was first use (the server took it before dying); false is impossible
    // for fresh ids; everything else is the outage error.
    expect(results.filter((r) => r !== true && r !== 'ERR_STORE_UNAVAILABLE')).toEqual([]);
    await server.start();
    await waitForRecovery();
  });

  it('a server that stops answering (SIGSTOP) → ERR_STORE_UNAVAILABLE within the command timeout; SIGCONT → recovers', async () => {
    await waitForRecovery();
    server.pause();
    try {
      const started = performance.now();
      const errors = await Promise.all(
        Array.from({ length: 32 }, () => store.consume(uniqueId('stalled'), Date.now() + 60_000).catch((error: unknown) => error)),
      );
      const elapsed = performance.now() - started;
      expect(errors.every((e) => (e as { code?: string }).code === 'ERR_STORE_UNAVAILABLE')).toBe(true);
      // Ended by the command timeout (the bound), and not before it. The upper side is asserted on the
      // cause, not on elapsed time.
      for (const error of errors) expect(String((error as { cause?: unknown }).cause)).toMatch(/timed out/i);
      expect(elapsed).toBeGreaterThanOrEqual(COMMAND_TIMEOUT_MS - 5);
    } finally {
      server.resume();
    }
    await waitForRecovery();
  });

  it('start-up against a server that accepts connections but never answers is bounded by connectTimeoutMs', async () => {
    await waitForRecovery();
    server.pause();
    const fresh = createRedisStore({ url: server.url, namespace: 'startup', connectTimeoutMs: 500, commandTimeoutMs: 500 });
    try {
      const errors = await Promise.all(
        Array.from({ length: 16 }, () => fresh.consume(uniqueId('s'), Date.now() + 60_000).catch((error: unknown) => error)),
      );
      expect(errors.every((e) => (e as { code?: string }).code === 'ERR_STORE_UNAVAILABLE')).toBe(true);
      // Bounded by the start-up wait (connectTimeoutMs), asserted on the cause rather than on elapsed time.
      for (const error of errors) expect(String((error as { cause?: unknown }).cause)).toMatch(/timed out|ETIMEDOUT/i);
    } finally {
      server.resume();
    }
    // The same store connects once the server answers again.
    const deadline = Date.now() + 15_000;
    let result: boolean | string = 'none';
    for (let i = 0; i < 500 && Date.now() < deadline && result !== true; i++) {
      result = await outcome(fresh.consume(uniqueId('s2'), Date.now() + 60_000));
      if (result !== true) await sleep(30);
    }
    expect(result).toBe(true);
    await fresh.close();
  });

  it('Redis refusing writes (OOM under maxmemory, READONLY replica) → ERR_STORE_UNAVAILABLE, then recovers', async () => {
    await waitForRecovery();
    const adminClient = new Redis(server.url);
    try {
      await adminClient.config('SET', 'maxmemory', '1');
      await adminClient.config('SET', 'maxmemory-policy', 'noeviction');
      for (let i = 0; i < 5; i++) {
        const error = await store.consume(uniqueId('oom'), Date.now() + 60_000).catch((e: unknown) => e);
        expect((error as { code?: string }).code).toBe('ERR_STORE_UNAVAILABLE');
        expect(String((error as { cause?: unknown }).cause)).toMatch(/OOM/);
      }
      await adminClient.config('SET', 'maxmemory', '0');
      expect(await store.consume(uniqueId('oom-over'), Date.now() + 60_000)).toBe(true);

      // A failover can leave the connection on a replica: writes fail READONLY, never true.
      await adminClient.call('REPLICAOF', '127.0.0.1', '1');
      for (let i = 0; i < 5; i++) {
        expect(await outcome(store.consume(uniqueId('ro'), Date.now() + 60_000))).toBe('ERR_STORE_UNAVAILABLE');
      }
      await adminClient.call('REPLICAOF', 'NO', 'ONE');
      await waitForRecovery();
    } finally {
      await adminClient.call('REPLICAOF', 'NO', 'ONE').catch(() => {});
      await adminClient.config('SET', 'maxmemory', '0').catch(() => {});
      await adminClient.quit().catch(() => adminClient.disconnect());
    }
  });
});

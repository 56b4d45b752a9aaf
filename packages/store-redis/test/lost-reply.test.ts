// A consume whose SET ran but whose reply came too late (a slow event loop) or never came (a connection
// cut in flight): the store asks once whether the key holds its own owner value. Reproduced
// deterministically: the event loop is blocked for longer than the command timeout right after the SET
// is sent (timers run before socket reads, so the timeout fires first, as under CPU load), or a proxy
// holds the reply back / drops it.
import { startReplyLosingProxy } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisReplayStore } from '../src/index.js';
import { assertRedisReachable, blockEventLoop, gateRedis, outcome, REDIS_URL, skipRedis, uniqueId } from './helpers.js';

gateRedis('lost-reply.test.ts');

const TIMEOUT_MS = 300;

describe.skipIf(skipRedis)('a SET whose reply is late or lost', () => {
  const url = REDIS_URL as string;
  let admin: Redis;
  const injected: Redis[] = [];
  beforeAll(async () => {
    await assertRedisReachable(url);
    admin = new Redis(url);
  });
  afterAll(async () => {
    for (const client of injected) client.disconnect();
    await admin?.quit();
  });

  const stores: Record<string, () => RedisReplayStore> = {
    owned: () => createRedisStore({ url, namespace: uniqueId('stall'), commandTimeoutMs: TIMEOUT_MS }),
    injected: () => {
      const client = new Redis(url);
      injected.push(client);
      return createRedisStore({ client, namespace: uniqueId('stall'), commandTimeoutMs: TIMEOUT_MS });
    },
  };

  for (const [kind, make] of Object.entries(stores)) {
    it(`${kind}: a stalled event loop (reply late past the timeout) → true for the writer; its retry → false`, async () => {
      const store = make();
      try {
        expect(await store.consume(uniqueId('warm'), Date.now() + 60_000)).toBe(true);
        const id = uniqueId('late');
        const exp = Date.now() + 60_000;
        const pending = outcome(store.consume(id, exp));
        blockEventLoop(TIMEOUT_MS * 2); // the command timer is due before the reply is read
        expect(await pending).toBe(true);
        const stored = await admin.get(store.keyPrefix + id);
        expect(stored).toMatch(/^[A-Za-z0-9_-]{22}$/); // 16 random bytes, base64url
        expect(await store.consume(id, exp)).toBe(false);
      } finally {
        await store.close();
      }
    });

    it(`${kind}: 50 parallel retries of one state on a stalled event loop → exactly one true (issue: 0 in 5 of 10 trials)`, async () => {
      const store = make();
      try {
        expect(await store.consume(uniqueId('warm'), Date.now() + 60_000)).toBe(true);
        for (let trial = 0; trial < 10; trial++) {
          const id = uniqueId('retries');
          const exp = Date.now() + 60_000;
          const pending = Array.from({ length: 50 }, () => outcome(store.consume(id, exp)));
          blockEventLoop(TIMEOUT_MS * 2);
          const results = await Promise.all(pending);
          expect(results.filter((r) => r === true)).toHaveLength(1);
          expect(results.filter((r) => r === false)).toHaveLength(49);
          expect(await store.consume(id, exp)).toBe(false);
        }
      } finally {
        await store.close();
      }
    });
  }

  it('a key written by someone else: the late consume resolves false, never true', async () => {
    const store = stores.owned!();
    try {
      expect(await store.consume(uniqueId('warm'), Date.now() + 60_000)).toBe(true);
      const id = uniqueId('theirs');
      await admin.set(store.keyPrefix + id, 'someone-else', 'PX', 60_000);
      const pending = outcome(store.consume(id, Date.now() + 60_000));
      blockEventLoop(TIMEOUT_MS * 2);
      expect(await pending).toBe(false);
    } finally {
      await store.close();
    }
  });

  it('the connection is cut after Redis ran the SET: unknown → ERR_STORE_UNAVAILABLE; once reconnected the retry → false', async () => {
    const target = new URL(url);
    const proxy = await startReplyLosingProxy({ host: target.hostname, port: Number(target.port || 6379) });
    const proxied = new URL(url);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(proxy.port);
    const store = createRedisStore({
      url: proxied.toString(),
      namespace: uniqueId('cut'),
      commandTimeoutMs: 1000,
      maxReconnectDelayMs: 100,
    });
    try {
      expect(await store.consume(uniqueId('warm'), Date.now() + 60_000)).toBe(true);
      const id = uniqueId('cut');
      const exp = Date.now() + 60_000;
      proxy.loseNextReply('lost');
      const pending = outcome(store.consume(id, exp));
      // Wait until Redis has the key (the write ran), then cut the connection with the reply unsent.
      for (let i = 0; i < 1000 && (await admin.exists(store.keyPrefix + id)) === 0; i++) await new Promise((r) => setTimeout(r, 5));
      expect(await admin.exists(store.keyPrefix + id)).toBe(1);
      proxy.restore(); // cuts every connection through the proxy
      expect(await pending).toBe('ERR_STORE_UNAVAILABLE');
      let retry: boolean | string = 'none';
      for (let i = 0; i < 300 && retry !== false; i++) {
        retry = await outcome(store.consume(id, exp));
        expect(retry).not.toBe(true);
        if (retry !== false) await new Promise((r) => setTimeout(r, 50));
      }
      expect(retry).toBe(false);
    } finally {
      await store.close();
      await proxy.close();
    }
  });
});

import { type LossyStore, startReplyLosingProxy, storeCompliance } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { createRedisStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, REDIS_URL, skipRedis } from './helpers.js';

gateRedis('compliance.test.ts');

/** A store on a connection through a proxy that can lose the reply to one SET (see storeCompliance's lostReply). */
async function lossyRedis(url: string, make: (proxiedUrl: string) => { store: LossyStore['store']; close(): Promise<void> }): Promise<LossyStore> {
  const target = new URL(url);
  const proxy = await startReplyLosingProxy({ host: target.hostname, port: Number(target.port || 6379) });
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  const { store, close } = make(proxied.toString());
  return {
    store,
    loseNextReply: (mode) => proxy.loseNextReply(mode),
    restore: () => proxy.restore(),
    async close() {
      await close();
      await proxy.close();
    },
  };
}

describe.skipIf(skipRedis)('Redis store (owned connection per store)', () => {
  const url = REDIS_URL as string;
  beforeAll(() => assertRedisReachable(url));

  storeCompliance(it, ({ namespace }) => createRedisStore({ url, namespace }), {
    name: 'redis',
    ttlMs: 400,
    unreachable: () => createRedisStore({ url: 'redis://127.0.0.1:1', connectTimeoutMs: 500, commandTimeoutMs: 500 }),
    lostReply: ({ namespace }) =>
      lossyRedis(url, (proxied) => {
        const store = createRedisStore({ url: proxied, namespace, commandTimeoutMs: 1500, maxReconnectDelayMs: 100 });
        return { store, close: () => store.close() };
      }),
  });
});

describe.skipIf(skipRedis)('Redis store (injected client, not owned)', () => {
  const url = REDIS_URL as string;
  const clients: Redis[] = [];
  let shared: Redis | undefined;
  beforeAll(() => assertRedisReachable(url));
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await shared?.quit();
  });

  storeCompliance(
    it,
    ({ namespace }) => {
      shared ??= new Redis(url);
      return createRedisStore({ client: shared, namespace });
    },
    {
      name: 'redis injected',
      ttlMs: 400,
      // A client left on ioredis defaults (offline queue, 20 retries per request) at a dead port: the
      // store's own timeout must still bound every consume.
      unreachable: () => {
        const dead = new Redis('redis://127.0.0.1:1', { lazyConnect: true });
        dead.on('error', () => {});
        clients.push(dead);
        return createRedisStore({ client: dead, commandTimeoutMs: 300 });
      },
      lostReply: ({ namespace }) =>
        lossyRedis(url, (proxied) => {
          const client = new Redis(proxied);
          client.on('error', () => {});
          const store = createRedisStore({ client, namespace, commandTimeoutMs: 1500 });
          return {
            store,
            async close() {
              await store.close();
              client.disconnect();
            },
          };
        }),
    },
  );
});

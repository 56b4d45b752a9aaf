import { lossyStoreThroughProxy, storeCompliance } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { createRedisStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, REDIS_URL, skipRedis } from './helpers.js';

gateRedis('compliance.test.ts');

describe.skipIf(skipRedis)('Redis store (owned connection per store)', () => {
  const url = REDIS_URL as string;
  beforeAll(() => assertRedisReachable(url));

  storeCompliance(it, (options) => createRedisStore({ ...options, url }), {
    name: 'redis',
    outcomes: true,
    keyFingerprints: true,
    ttlMs: 400,
    unreachable: () => createRedisStore({ url: 'redis://127.0.0.1:1', connectTimeoutMs: 500, commandTimeoutMs: 500 }),
    lostReply: ({ namespace }) =>
      lossyStoreThroughProxy(url, 6379, (proxied) => {
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
    (options) => {
      shared ??= new Redis(url);
      return createRedisStore({ ...options, client: shared });
    },
    {
      name: 'redis injected',
      outcomes: true,
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
        lossyStoreThroughProxy(url, 6379, (proxied) => {
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

import { type LossyStore, startReplyLosingProxy, storeCompliance } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisReplayStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, REDIS_URL, skipRedis } from './helpers.js';

gateRedis('compliance.test.ts');

/** A store on a connection through a proxy that can lose the reply to one SET (see storeCompliance's lostReply). */
async function lossyRedis(
  url: string,
  make: (proxiedUrl: string) => { store: LossyStore['store']; close(): Promise<void> },
): Promise<LossyStore> {
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

/**
 * The suite's outcome tests return early for a store without `claim`/`record`: this wrapper notes which tests
 * called them, so that a test after the suite can check that every outcome test really ran against Redis.
 */
function outcomeCalls() {
  const tests = new Set<string>();
  const note = () => tests.add(expect.getState().currentTestName ?? '');
  const watch = (store: RedisReplayStore): RedisReplayStore => ({
    ...store,
    claim: (...args) => {
      note();
      return store.claim(...args);
    },
    record: (...args) => {
      note();
      return store.record(...args);
    },
  });
  const expectEveryOutcomeTest = (label: string): void => {
    it(`${label}: every outcome test of the suite called claim and record on this store`, () => {
      const expected = [
        'claim: first, then pending for the same fingerprint',
        'claim and consume share one ledger',
        '64 parallel claims of one id: one first',
        'a claimed id with its outcome expires with the id',
        'record keeps no outcome longer than maxOutcomeBytes',
        'the outcomes held never pass outcomeBudgetBytes',
        'a state is no oracle: the third claim with another fingerprint',
        '64 parallel claims of one id with other fingerprints',
        'two instances on one namespace share claims and outcomes',
        'under two state guards, 50 identical retries run the round once',
      ];
      for (const name of expected)
        expect(
          [...tests].some((test) => test.includes(`${label} compliance: ${name}`)),
          name,
        ).toBe(true);
    });
  };
  return { watch, expectEveryOutcomeTest };
}

describe.skipIf(skipRedis)('Redis store (owned connection per store)', () => {
  const url = REDIS_URL as string;
  beforeAll(() => assertRedisReachable(url));
  const calls = outcomeCalls();

  storeCompliance(it, (options) => calls.watch(createRedisStore({ ...options, url })), {
    name: 'redis',
    outcomes: true,
    keyFingerprints: true,
    ttlMs: 400,
    unreachable: () => createRedisStore({ url: 'redis://127.0.0.1:1', connectTimeoutMs: 500, commandTimeoutMs: 500 }),
    lostReply: ({ namespace }) =>
      lossyRedis(url, (proxied) => {
        const store = createRedisStore({ url: proxied, namespace, commandTimeoutMs: 1500, maxReconnectDelayMs: 100 });
        return { store, close: () => store.close() };
      }),
  });
  calls.expectEveryOutcomeTest('redis');
});

describe.skipIf(skipRedis)('Redis store (injected client, not owned)', () => {
  const url = REDIS_URL as string;
  const clients: Redis[] = [];
  let shared: Redis | undefined;
  beforeAll(() => assertRedisReachable(url));
  const calls = outcomeCalls();
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await shared?.quit();
  });

  storeCompliance(
    it,
    (options) => {
      shared ??= new Redis(url);
      return calls.watch(createRedisStore({ ...options, client: shared }));
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
  calls.expectEveryOutcomeTest('redis injected');
});

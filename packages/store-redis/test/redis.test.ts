import { StoreUnavailableError } from '@mrtr/core/errors';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, outcome, REDIS_URL, skipRedis, sleep, uniqueId } from './helpers.js';

gateRedis('redis.test.ts');

describe('createRedisStore options (no server needed)', () => {
  it('rejects misuse at construction', () => {
    const client = new Redis({ lazyConnect: true });
    try {
      expect(() => createRedisStore({ url: 'redis://127.0.0.1:6379', client })).toThrow(TypeError);
      expect(() => createRedisStore({ url: 42 as unknown as string })).toThrow(TypeError);
      expect(() => createRedisStore({ client: {} as unknown as Redis })).toThrow(TypeError);
      expect(() => createRedisStore({ client, namespace: 1 as unknown as string })).toThrow(
        new TypeError('createRedisStore: namespace must be a string'),
      );
      expect(() => createRedisStore({ client, prefix: 1 as unknown as string })).toThrow(TypeError);
      expect(() => createRedisStore({ client, commandTimeoutMs: 0 })).toThrow(RangeError);
      expect(() => createRedisStore({ client, connectTimeoutMs: 1.5 })).toThrow(
        new TypeError('createRedisStore: connectTimeoutMs must be an integer'),
      );
      expect(() => createRedisStore({ client, connectTimeoutMs: 2 ** 31 })).toThrow(
        new RangeError('createRedisStore: connectTimeoutMs must be between 1 and 2147483647'),
      );
      expect(() => createRedisStore({ client, maxReconnectDelayMs: -1 })).toThrow(RangeError);
      expect(() => createRedisStore({ client, extraRetentionMs: -1 })).toThrow(RangeError);
      expect(() => createRedisStore({ client, extraRetentionMs: 0.5 })).toThrow(
        new TypeError('createRedisStore: extraRetentionMs must be an integer'),
      );
      expect(() => createRedisStore(null as unknown as object)).toThrow(TypeError);
    } finally {
      client.disconnect();
    }
  });

  it('derives an unambiguous key prefix: namespaces with ":" or "%" cannot collide', () => {
    const client = new Redis({ lazyConnect: true });
    try {
      expect(createRedisStore({ client }).keyPrefix).toBe('mrtr:replay:default:');
      expect(createRedisStore({ client, prefix: 'app:', namespace: 'a:b' }).keyPrefix).toBe('app:a%3Ab:');
      expect(createRedisStore({ client, prefix: 'app:', namespace: 'a%3Ab' }).keyPrefix).toBe('app:a%253Ab:');
    } finally {
      client.disconnect();
    }
  });
});

describe.skipIf(skipRedis)('Redis store against a real server', () => {
  const url = REDIS_URL as string;
  let admin: Redis;
  beforeAll(async () => {
    await assertRedisReachable(url);
    admin = new Redis(url);
  });
  afterAll(async () => {
    await admin?.quit();
  });

  it('writes one key per id with the expiry given as PXAT (rounded up)', async () => {
    const store = createRedisStore({ url, prefix: 'mrtr:test:', namespace: uniqueId('keys') });
    try {
      const id = uniqueId('id');
      // A minute ahead: the PTTL check below cannot be outrun by a loaded machine.
      const exp = Date.now() + 60_000.25;
      expect(await store.consume(id, exp)).toBe(true);
      const key = store.keyPrefix + id;
      // The value is this consume's owner value: 16 random bytes, base64url.
      expect(await admin.get(key)).toMatch(/^[A-Za-z0-9_-]{22}$/);
      const pexpiretime = Number(await admin.call('PEXPIRETIME', key));
      expect(pexpiretime).toBe(Math.ceil(exp));
      const pttl = await admin.pttl(key);
      expect(pttl).toBeGreaterThan(0);
      expect(pttl).toBeLessThanOrEqual(60_001);
      // A replay does not extend or change the record.
      expect(await store.consume(id, exp + 60_000)).toBe(false);
      expect(Number(await admin.call('PEXPIRETIME', key))).toBe(Math.ceil(exp));
    } finally {
      await store.close();
    }
  });

  it('extraRetentionMs keeps the record that much longer than expiresAtMs', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('margin'), extraRetentionMs: 30_000 });
    try {
      const id = uniqueId('id');
      const exp = Date.now() + 1_000;
      expect(await store.consume(id, exp)).toBe(true);
      expect(Number(await admin.call('PEXPIRETIME', store.keyPrefix + id))).toBe(exp + 30_000);
    } finally {
      await store.close();
    }
  });

  it('an expiresAtMs that is not in the future rejects ERR_STATE_EXPIRED and writes nothing', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('past') });
    try {
      const id = uniqueId('id');
      expect(await outcome(store.consume(id, Date.now() - 1))).toBe('ERR_STATE_EXPIRED');
      expect(await outcome(store.consume(id, Date.now() - 60_000))).toBe('ERR_STATE_EXPIRED');
      expect(await admin.exists(store.keyPrefix + id)).toBe(0);
      expect(await store.consume(id, Date.now() + 5_000)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('short real TTL: refused until expiresAtMs, accepted again after it', async () => {
    // Redis expires keys by its own clock, so this runs in real time; but nothing is asserted about a
    // moment a loaded machine may have overslept. A refusal is required only of a consume that finished
    // before expiresAtMs (Redis ran it earlier still); a round that saw none repeats with twice the TTL.
    const store = createRedisStore({ url, namespace: uniqueId('ttl') });
    try {
      let refusals = 0;
      for (let round = 0, ttl = 300; round < 5 && refusals === 0; round++, ttl *= 2) {
        const id = uniqueId('id');
        const exp = Date.now() + ttl;
        expect(await store.consume(id, exp)).toBe(true);
        for (let i = 0; i < 100 && Date.now() < exp; i++) {
          // Redis judges expiresAtMs by its own clock (this machine's): a consume that reaches it after exp is refused
          // as expired, which a loaded machine may cause however early it was sent.
          const result = await outcome(store.consume(id, exp));
          if (Date.now() < exp) {
            expect(result).toBe(false);
            refusals++;
          } else {
            expect([false, 'ERR_STATE_EXPIRED']).toContain(result);
          }
          await sleep(20);
        }
        // Wait (however long it takes) until past expiresAtMs; then the id is accepted again, once.
        while (Date.now() <= exp) await sleep(exp - Date.now() + 1);
        await sleep(100);
        expect(await store.consume(id, Date.now() + 60_000)).toBe(true);
        expect(await store.consume(id, Date.now() + 60_000)).toBe(false);
      }
      expect(refusals).toBeGreaterThan(0);
    } finally {
      await store.close();
    }
  });

  it('namespaces "a" + id "b:c" and "a:b" + id "c" are different keys', async () => {
    const base = uniqueId('nsx');
    const a = createRedisStore({ url, namespace: `${base}a` });
    const ab = createRedisStore({ url, namespace: `${base}a:b` });
    try {
      const exp = Date.now() + 10_000;
      expect(await a.consume('b:c', exp)).toBe(true);
      expect(await ab.consume('c', exp)).toBe(true);
      expect(await a.consume('b:c', exp)).toBe(false);
      expect(await ab.consume('c', exp)).toBe(false);
    } finally {
      await a.close();
      await ab.close();
    }
  });

  it('a consume right after construction waits (bounded) for the first connection', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('startup') });
    try {
      expect((store.client as Redis).status).not.toBe('ready');
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => store.consume(`id${i}`, Date.now() + 10_000)));
      expect(results.every((r) => r === true)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('close() quits an owned client, and is idempotent', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('own') });
    expect(await store.consume('x', Date.now() + 10_000)).toBe(true);
    const client = store.client as Redis;
    await Promise.all([store.close(), store.close()]);
    await store.close();
    expect(client.status).toBe('end');
    await expect(store.consume('y', Date.now() + 10_000)).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  it('close() leaves an injected client open (the caller owns it)', async () => {
    const client = new Redis(url);
    try {
      const store = createRedisStore({ client, namespace: uniqueId('inj') });
      expect(await store.consume('x', Date.now() + 10_000)).toBe(true);
      await store.close();
      expect(await outcome(store.consume('y', Date.now() + 10_000))).toBe('ERR_STORE_UNAVAILABLE');
      expect(client.status).toBe('ready');
      expect(await client.ping()).toBe('PONG');
    } finally {
      await client.quit();
    }
  });

  it('an injected client keeps its own key prefix under the store prefix', async () => {
    const tag = uniqueId('kp');
    const client = new Redis(url, { keyPrefix: `${tag}:` });
    try {
      const store = createRedisStore({ client, namespace: 'n' });
      expect(await store.consume('x', Date.now() + 10_000)).toBe(true);
      expect(await admin.exists(`${tag}:mrtr:replay:n:x`)).toBe(1);
      await store.close();
    } finally {
      await client.quit();
    }
  });

  it('race: 64 concurrent consumers of the same 1,000 ids over two connections → exactly 1,000 trues', async () => {
    const namespace = uniqueId('race');
    const a = createRedisStore({ url, namespace });
    const b = createRedisStore({ url, namespace });
    try {
      // Two distinct server-side connections.
      await Promise.all([a.consume(uniqueId('warm'), Date.now() + 10_000), b.consume(uniqueId('warm'), Date.now() + 10_000)]);
      const idA = await (a.client as Redis).client('ID');
      const idB = await (b.client as Redis).client('ID');
      expect(idA).not.toBe(idB);

      const ids = Array.from({ length: 1000 }, (_, i) => `id-${i}`);
      const exp = Date.now() + 120_000;
      const wins = new Map<string, number>();
      const workers = 64;
      let falses = 0;
      await Promise.all(
        Array.from({ length: workers }, async (_, w) => {
          const store = w % 2 === 0 ? a : b;
          // Every worker walks the ids in the same order: at each step all 64 (32 per connection)
          // consume the same id at the same moment.
          for (let k = 0; k < ids.length; k++) {
            const id = ids[k]!;
            if (await store.consume(id, exp)) wins.set(id, (wins.get(id) ?? 0) + 1);
            else falses++;
          }
        }),
      );
      const trues = [...wins.values()].reduce((sum, n) => sum + n, 0);
      expect(trues).toBe(1000);
      expect(wins.size).toBe(1000);
      expect([...wins.values()].every((n) => n === 1)).toBe(true);
      expect(falses).toBe(workers * ids.length - 1000);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

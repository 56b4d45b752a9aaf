// Batching: a consume that finds nothing in flight is sent at once, alone; consumes that arrive while a batch is in
// flight go together into one EVALSHA of the consume script (Redis's TIME, the ledger epoch, then one SET NX PXAT per
// key), each with its own answer.
// Batches are made by starting consumes in one tick, never by timing. These tests use a throwaway
// redis-server (SCRIPT FLUSH and maxmemory must not touch the shared one).
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, hashSlot, type RedisReplayStore } from '../src/index.js';
import { freePort, outcome, REQUIRE_SERVICES, redisServerBinary, type ThrowawayRedis, throwawayRedis, uniqueId } from './helpers.js';

const binary = redisServerBinary();
if (binary === undefined) {
  if (REQUIRE_SERVICES) {
    it('redis-server is required (MRTR_REQUIRE_SERVICES=1) for the batch tests but is not on PATH', () => {
      throw new Error('redis-server must be on PATH when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn('[store-redis] batch.test.ts: batch tests skipped because redis-server is not on PATH');
  }
}

describe('hashSlot (Redis Cluster key hash)', () => {
  it('matches the Redis Cluster specification', () => {
    expect(hashSlot('123456789')).toBe(0x31c3 % 16384); // CRC16/XMODEM check value
    expect(hashSlot('foo')).toBe(12182);
    expect(hashSlot('{user1000}.following')).toBe(hashSlot('{user1000}.followers'));
    expect(hashSlot('{user1000}.following')).toBe(hashSlot('user1000'));
    // An empty tag does not count: the whole key is hashed.
    expect(hashSlot('foo{}{bar}')).not.toBe(hashSlot('bar'));
    expect(hashSlot('foo{{bar}}zap')).toBe(hashSlot('{bar'));
    expect(hashSlot('ü{ñ}')).toBe(hashSlot('ñ'));
  });
});

type Call = { name: string; args: unknown[] };

/** A client whose commands are recorded; `afterNext(name)` makes the next such command's reply "lost" after it ran. */
function recording(inner: Redis) {
  const calls: Call[] = [];
  let lose: string | undefined;
  const client = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || typeof prop !== 'string') return value;
      if (!['set', 'get', 'mget', 'evalsha', 'eval', 'time'].includes(prop)) return value.bind(target);
      return async (...args: unknown[]) => {
        calls.push({ name: prop, args });
        const reply = await value.apply(target, args);
        if (lose === prop) {
          lose = undefined;
          throw new Error('Connection is closed.');
        }
        return reply;
      };
    },
  });
  return {
    client,
    calls,
    loseReplyOf(name: string) {
      lose = name;
    },
    count: (name: string) => calls.filter((call) => call.name === name).length,
    /** The ids per call of the consume script (its keys: the epoch key, then the ids; the epoch's start-up script has one key). */
    consumeCalls: (name = 'evalsha') =>
      calls.filter((call) => call.name === name && Number(call.args[1]) >= 2).map((call) => Number(call.args[1]) - 1),
  };
}

describe.skipIf(binary === undefined)('Redis batching (throwaway redis-server)', () => {
  let server: ThrowawayRedis;
  let admin: Redis;
  const clients: Redis[] = [];
  beforeAll(async () => {
    server = throwawayRedis(await freePort());
    await server.start();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    admin?.disconnect();
    await server?.kill();
  });
  const make = (extra: Parameters<typeof createRedisStore>[0] = {}) => {
    const inner = new Redis(server.url);
    clients.push(inner);
    const recorder = recording(inner);
    const store = createRedisStore({ client: recorder.client, namespace: uniqueId('batch'), evictionPolicyCheck: 'off', ...extra });
    return { store, ...recorder };
  };
  const exp = () => Date.now() + 60_000;

  /**
   * Once the store is idle (every pending callback has run), starts `first` (sent at once, alone) and `ids`
   * in the same tick: `ids` form the next batch.
   */
  const burst = async (store: RedisReplayStore, ids: string[]) => {
    await new Promise<void>((resolve) => setImmediate(resolve));
    const first = store.consume(uniqueId('first'), exp());
    return Promise.all([first, ...ids.map((id) => store.consume(id, exp()))]).then(([head, ...rest]) => {
      expect(head).toBe(true);
      return rest;
    });
  };

  it('a lone consume is one call of the consume script with one id (no plain SET: the clock of Redis decides)', async () => {
    const { store, count, consumeCalls } = make();
    expect(await store.consume(uniqueId('alone'), exp())).toBe(true);
    expect(count('set')).toBe(0);
    expect(consumeCalls()).toEqual([1]);
    await store.close();
  });

  it('one batch holding the same id twice (and three times): exactly one true per id, each waiter its own answer', async () => {
    const { store, calls, consumeCalls } = make();
    const live = uniqueId('live');
    expect(await store.consume(live, exp())).toBe(true);
    const [a, b, c] = [uniqueId('a'), uniqueId('b'), uniqueId('c')];
    const results = await burst(store, [a, b, a, live, c, a]);
    expect(results).toEqual([true, true, false, false, true, false]);
    expect(consumeCalls()).toEqual([1, 1, 6]); // live, the burst's head, the batch
    const script = calls.find((call) => call.name === 'evalsha' && call.args[1] === 7) as Call;
    // Each key's owner value is its own, in the 22-character form of a single consume (ARGV: retention, then owner,
    // expiresAtMs, mintedAtMs per key).
    const owners = script.args.slice(2 + 7 + 1).filter((_, i) => i % 3 === 0) as string[];
    expect(new Set(owners).size).toBe(6);
    for (const owner of owners) expect(owner).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(await admin.get(store.keyPrefix + a)).toBe(owners[0]);
    // Written with their expiry, and single use holds afterwards.
    expect(Number(await admin.call('PEXPIRETIME', store.keyPrefix + c))).toBeGreaterThan(Date.now());
    expect(await Promise.all([a, b, c].map((id) => store.consume(id, exp())))).toEqual([false, false, false]);
    await store.close();
  });

  it('a batch holds at most maxBatchSize consumes; the rest follow', async () => {
    const { store, consumeCalls } = make({ maxBatchSize: 4 });
    const ids = Array.from({ length: 10 }, (_, i) => uniqueId(`bound${i}`));
    expect((await burst(store, ids)).every((r) => r === true)).toBe(true);
    // The first consume went alone; the ten queued behind it went as 4 + 4 + 2.
    expect(consumeCalls()).toEqual([1, 4, 4, 2]);
    await store.close();
  });

  it('the script is loaded with EVAL when the server does not have it (NOSCRIPT), and answers the same', async () => {
    const { store, consumeCalls } = make();
    await admin.call('SCRIPT', 'FLUSH');
    const [x, y] = [uniqueId('x'), uniqueId('y')];
    expect(await burst(store, [x, y, x])).toEqual([true, true, false]);
    // The lone head and the batch were both sent before the first NOSCRIPT came back: both loaded it.
    expect(consumeCalls('eval')).toEqual([1, 3]);
    expect(await burst(store, [uniqueId('z'), y])).toEqual([true, false]);
    expect(consumeCalls('eval')).toEqual([1, 3]); // cached from now on
    await store.close();
  });

  it('a batch whose reply is lost is resolved per consume from the owners (own → true, repeated → false, live → false)', async () => {
    const { store, loseReplyOf, count } = make();
    const live = uniqueId('live');
    expect(await store.consume(live, exp())).toBe(true);
    const [m, n] = [uniqueId('m'), uniqueId('n')];
    loseReplyOf('evalsha');
    expect(await burst(store, [m, n, m, live])).toEqual([true, true, false, false]);
    expect(count('mget')).toBe(1);
    await store.close();
  });

  it('a batch Redis refuses (OOM) fails every waiter closed; nothing is written; it recovers', async () => {
    const { store } = make();
    expect(await store.consume(uniqueId('warm'), exp())).toBe(true);
    const o1 = uniqueId('o1');
    const ids = [o1, uniqueId('o2'), o1];
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '1');
    try {
      const pending = [store.consume(uniqueId('oomfirst'), exp()), ...ids.map((id) => store.consume(id, exp()))].map(outcome);
      for (const result of await Promise.all(pending)) expect(result).toBe('ERR_STORE_UNAVAILABLE');
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    expect(await burst(store, ids)).toEqual([true, true, false]);
    await store.close();
  });

  it('close() fails the consumes still queued closed; the one in flight settles by itself', async () => {
    const { store } = make();
    const sent = outcome(store.consume(uniqueId('sent'), exp()));
    const queued = [uniqueId('q1'), uniqueId('q2')].map((id) => outcome(store.consume(id, exp())));
    await store.close();
    expect(await Promise.all(queued)).toEqual(['ERR_STORE_UNAVAILABLE', 'ERR_STORE_UNAVAILABLE']);
    expect(await sent).toBe(true);
  });

  it('maxQueued bounds the queue: one more consume fails closed at once', async () => {
    const { store } = make({ maxQueued: 2 });
    const results = await Promise.all(
      [uniqueId('m0'), uniqueId('m1'), uniqueId('m2'), uniqueId('m3')].map((id) => outcome(store.consume(id, exp()))),
    );
    expect(results).toEqual([true, true, true, 'ERR_STORE_UNAVAILABLE']);
    await store.close();
  });

  it('an ACL user without EVALSHA/EVAL (NOPERM): the batch is sent as single SETs, and every later one too', async () => {
    const user = uniqueId('noscript').replaceAll(':', '-');
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '+@all', '-evalsha', '-eval');
    const url = new URL(server.url);
    url.username = user;
    url.password = 'pw';
    const inner = new Redis(url.toString());
    clients.push(inner);
    const recorder = recording(inner);
    const store = createRedisStore({ client: recorder.client, namespace: uniqueId('acl'), evictionPolicyCheck: 'off' });
    try {
      const [a, b] = [uniqueId('a'), uniqueId('b')];
      expect(await burst(store, [a, b, a])).toEqual([true, true, false]);
      expect(await burst(store, [uniqueId('c'), b])).toEqual([true, false]);
      // The lone head and the batch were both sent before the first NOPERM came back; never again after it.
      expect(recorder.consumeCalls()).toEqual([1, 3]);
      expect(recorder.consumeCalls('eval')).toEqual([]);
    } finally {
      await store.close();
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('batch: false sends one script call per consume', async () => {
    const { store, count, consumeCalls } = make({ batch: false });
    const id = uniqueId('p');
    expect(await Promise.all([id, uniqueId('q'), id].map((x) => store.consume(x, exp())))).toEqual([true, true, false]);
    expect(consumeCalls()).toEqual([1, 1, 1]);
    expect(count('set')).toBe(0);
    await store.close();
  });

  it('rejects bad batching options', () => {
    expect(() => createRedisStore({ url: server.url, batch: 'yes' as unknown as boolean })).toThrow(TypeError);
    expect(() => createRedisStore({ url: server.url, maxBatchSize: 0 })).toThrow(RangeError);
    expect(() => createRedisStore({ url: server.url, maxQueued: 1.5 })).toThrow(
      new TypeError('createRedisStore: maxQueued must be an integer'),
    );
    expect(() => createRedisStore({ url: server.url, maxQueued: 1_000_001 })).toThrow(
      new RangeError('createRedisStore: maxQueued must be between 1 and 1000000'),
    );
  });
});

// Outcome recording on Redis (issue 20): `claim` and `record` are one Lua script each on the id's one key,
// the key `consume` uses. What is stored and for how long, the outcome size cap, races, and replies that are
// late (the event loop blocked past the command timeout right after the script is sent: timers run before
// socket reads) or lost (a proxy drops them). The shared compliance suite runs the contract itself
// (compliance.test.ts); ACL, NOSCRIPT and OOM cases use a throwaway redis-server.
import { MrtrError } from '@mrtr/core';
import type { ClaimResult } from '@mrtr/core/store';
import { startReplyLosingProxy } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisReplayStore } from '../src/index.js';
import {
  assertRedisReachable,
  blockEventLoop,
  freePort,
  gateRedis,
  REDIS_URL,
  redisServerBinary,
  skipRedis,
  type ThrowawayRedis,
  throwawayRedis,
  uniqueId,
  until,
} from './helpers.js';

gateRedis('outcomes.test.ts');

const TIMEOUT_MS = 300;

/** A claim's status (`recorded:<outcome>`), or the MrtrError code it rejected with. */
async function claimed(promise: Promise<ClaimResult>): Promise<string> {
  try {
    const result = await promise;
    return result.status === 'recorded' ? `recorded:${result.outcome}` : result.status;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
}

/** A record's result, or the MrtrError code it rejected with. */
async function recorded(promise: Promise<boolean>): Promise<boolean | string> {
  try {
    return await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
}

describe('outcome options and misuse (no Redis needed)', () => {
  it("maxOutcomeBytes: default 16384 (core's DEFAULT_MAX_OUTCOME_BYTES), outcomeBudgetBytes 64 MiB, 0 allowed; out of range → labelled RangeError, not an integer → labelled TypeError", async () => {
    for (const bad of [-1, 2 ** 29 + 1]) {
      expect(() => createRedisStore({ url: 'redis://127.0.0.1:1', maxOutcomeBytes: bad })).toThrow(
        new RangeError('createRedisStore: maxOutcomeBytes must be between 0 and 536870912'),
      );
    }
    for (const bad of [1.5, Number.NaN, '1' as unknown as number]) {
      expect(() => createRedisStore({ url: 'redis://127.0.0.1:1', maxOutcomeBytes: bad })).toThrow(
        new TypeError('createRedisStore: maxOutcomeBytes must be an integer'),
      );
    }
    for (const bad of [-1, -1024]) {
      expect(() => createRedisStore({ url: 'redis://127.0.0.1:1', outcomeBudgetBytes: bad })).toThrow(
        new RangeError('createRedisStore: outcomeBudgetBytes must be between 0 and 9007199254740991'),
      );
    }
    for (const bad of [0.5, 2 ** 53, '1' as unknown as number]) {
      expect(() => createRedisStore({ url: 'redis://127.0.0.1:1', outcomeBudgetBytes: bad })).toThrow(
        new TypeError('createRedisStore: outcomeBudgetBytes must be an integer'),
      );
    }
    const store = createRedisStore({ url: 'redis://127.0.0.1:1', onError: () => {}, maxOutcomeBytes: 0 });
    expect(store.maxOutcomeBytes).toBe(0);
    await store.close();
    const defaults = createRedisStore({ url: 'redis://127.0.0.1:1', onError: () => {} });
    expect(defaults.maxOutcomeBytes).toBe(16_384);
    expect(defaults.outcomeBudgetBytes).toBe(64 * 1024 * 1024);
    await defaults.close();
  });

  it('claim and record reject misuse with labelled TypeError/RangeError before any command', async () => {
    const store = createRedisStore({ url: 'redis://127.0.0.1:1', onError: () => {} });
    try {
      const exp = Date.now() + 60_000;
      await expect(store.claim('', exp, 'fp')).rejects.toThrow(new TypeError('claim: id must be a non-empty string'));
      await expect(store.claim('id', Number.NaN, 'fp')).rejects.toThrow(new TypeError('claim: expiresAtMs must be a finite number'));
      for (const fp of ['', 'a:b', 42 as unknown as string]) {
        await expect(store.claim('id', exp, fp)).rejects.toThrow(
          new TypeError('claim: fingerprint must be a non-empty string without ":"'),
        );
        await expect(store.record('id', fp, 'x')).rejects.toThrow(
          new TypeError('record: fingerprint must be a non-empty string without ":"'),
        );
      }
      await expect(store.claim('id', exp, 'f'.repeat(257))).rejects.toThrow(
        new RangeError('claim: fingerprint must be at most 256 characters'),
      );
      await expect(store.record('', 'fp', 'x')).rejects.toThrow(new TypeError('record: id must be a non-empty string'));
      await expect(store.record('id', 'fp', 7 as unknown as string)).rejects.toThrow(new TypeError('record: outcome must be a string'));
    } finally {
      await store.close();
    }
    // Closed: both fail closed.
    expect(await claimed(store.claim('id', Date.now() + 60_000, 'fp'))).toBe('ERR_STORE_UNAVAILABLE');
    expect(await recorded(store.record('id', 'fp', 'x'))).toBe('ERR_STORE_UNAVAILABLE');
  });
});

describe.skipIf(skipRedis)('outcome recording against Redis', () => {
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
  const exp = () => Date.now() + 60_000;

  const stores: Record<string, (namespace?: string) => RedisReplayStore> = {
    owned: (namespace = uniqueId('out')) => createRedisStore({ url, namespace, commandTimeoutMs: TIMEOUT_MS }),
    injected: (namespace = uniqueId('out')) => {
      const client = new Redis(url);
      injected.push(client);
      return createRedisStore({ client, namespace, commandTimeoutMs: TIMEOUT_MS });
    },
  };
  /** A store whose connection is up and whose scripts are loaded: the next claim or record is sent at once. */
  const warm = async (store: RedisReplayStore): Promise<void> => {
    const id = uniqueId('warm');
    expect(await store.claim(id, exp(), 'warm')).toEqual({ status: 'first', fence: 0 });
    expect(await store.record(id, 'warm', 'w')).toBe(true);
  };

  it('claim writes p:<fp>:<owner> on the key consume uses, expiring at ceil(exp) + extraRetentionMs; record keeps that expiry (KEEPTTL)', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('ttl'), extraRetentionMs: 5000 });
    try {
      const id = uniqueId('ttl');
      const expiresAtMs = Date.now() + 60_000.5;
      const key = store.keyPrefix + id;
      expect(await store.claim(id, expiresAtMs, 'fpA')).toEqual({ status: 'first', fence: 0 });
      expect(await admin.get(key)).toMatch(/^p:fpA:[A-Za-z0-9_-]{22}$/);
      const at = Math.ceil(expiresAtMs) + 5000;
      expect(Number(await admin.call('PEXPIRETIME', key))).toBe(at);
      const pttlBefore = await admin.pttl(key);
      expect(await store.record(id, 'fpA', 'sealed.outcome:with:colons')).toBe(true);
      expect(await admin.get(key)).toBe('d:fpA:sealed.outcome:with:colons');
      expect(Number(await admin.call('PEXPIRETIME', key))).toBe(at); // unchanged, to the millisecond
      expect(await admin.pttl(key)).toBeLessThanOrEqual(pttlBefore);
      expect(await store.claim(id, expiresAtMs, 'fpA')).toEqual({ status: 'recorded', outcome: 'sealed.outcome:with:colons' });
      expect(await store.claim(id, expiresAtMs, 'fpB')).toEqual({ status: 'replayed' });
      // A claim with another fingerprint is a miss, counted in the value (d<misses>:), the expiry kept.
      expect(await admin.get(key)).toBe('d1:fpA:sealed.outcome:with:colons');
      expect(Number(await admin.call('PEXPIRETIME', key))).toBe(at);
      // A refused record writes nothing.
      expect(await store.record(id, 'fpA', 'again')).toBe(false);
      expect(await admin.get(key)).toBe('d1:fpA:sealed.outcome:with:colons');
      expect(await store.claim(id, expiresAtMs, 'fpA')).toEqual({ status: 'recorded', outcome: 'sealed.outcome:with:colons' });
    } finally {
      await store.close();
    }
  });

  it('consume and claim share one key both ways, across two stores', async () => {
    const namespace = uniqueId('shared');
    const a = stores.owned!(namespace);
    const b = stores.injected!(namespace);
    try {
      const consumed = uniqueId('consumed');
      expect(await a.consume(consumed, exp())).toBe(true);
      expect(await b.claim(consumed, exp(), 'fp')).toEqual({ status: 'replayed' });
      expect(await b.record(consumed, 'fp', 'x')).toBe(false);
      expect(await admin.get(a.keyPrefix + consumed)).toMatch(/^[A-Za-z0-9_-]{22}$/); // still the consume's value
      const claimedId = uniqueId('claimed');
      expect(await b.claim(claimedId, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await a.consume(claimedId, exp())).toBe(false);
      expect(await a.claim(claimedId, exp(), 'fp')).toEqual({ status: 'pending' });
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('an outcome over maxOutcomeBytes (UTF-8 bytes) is recorded as not kept: record false, identical retries replayed', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('cap'), maxOutcomeBytes: 100 });
    try {
      const cases: [string, boolean][] = [
        ['x'.repeat(100), true], // exactly the cap
        ['x'.repeat(101), false],
        ['é'.repeat(50), true], // 100 bytes
        ['é'.repeat(51), false], // 51 characters, 102 bytes
      ];
      for (const [outcome, kept] of cases) {
        const id = uniqueId('cap');
        expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
        expect(await store.record(id, 'fp', outcome)).toBe(kept);
        expect(await admin.get(store.keyPrefix + id)).toBe(kept ? `d:fp:${outcome}` : 'd:fp:');
        expect(await store.claim(id, exp(), 'fp')).toEqual(kept ? { status: 'recorded', outcome } : { status: 'replayed' });
        expect(await store.record(id, 'fp', 'small')).toBe(false); // done either way
      }
    } finally {
      await store.close();
    }
    const none = createRedisStore({ url, namespace: uniqueId('cap0'), maxOutcomeBytes: 0 });
    try {
      const id = uniqueId('cap0');
      expect(await none.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await none.record(id, 'fp', 'x')).toBe(false);
      expect(await none.claim(id, exp(), 'fp')).toEqual({ status: 'replayed' });
    } finally {
      await none.close();
    }
  });

  it('the budget counts every byte of large outcomes exactly: 3,000,000 bytes kept and counted, 6,000,000 more refused', async () => {
    const store = createRedisStore({ url, namespace: uniqueId('big'), maxOutcomeBytes: 8_000_000, outcomeBudgetBytes: 8_000_000 });
    try {
      const budgetHash = `${store.keyPrefix.slice(0, -1)}%o{${store.keyPrefix.slice(0, -1)}}:h`;
      const [a, b] = [uniqueId('big'), uniqueId('big')];
      expect(await store.claim(a, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record(a, 'fp', 'a'.repeat(3_000_000))).toBe(true);
      expect(await admin.hget(budgetHash, 't')).toBe('3000000');
      expect(await store.claim(b, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record(b, 'fp', 'b'.repeat(6_000_000))).toBe(false);
      expect(await admin.hget(budgetHash, 't')).toBe('3000000');
      expect(await store.claim(b, exp(), 'fp')).toEqual({ status: 'replayed' });
      expect(await admin.get(store.keyPrefix + b)).toBe('d:fp:');
    } finally {
      await store.close();
    }
  });

  it('50 concurrent identical claims over two stores → one first, 49 pending; after record, 50 times the outcome', async () => {
    const namespace = uniqueId('race');
    // A generous command timeout: this test is about who wins, not how fast (the machine may be busy).
    const client = new Redis(url);
    injected.push(client);
    const pair = [
      createRedisStore({ url, namespace, commandTimeoutMs: 30_000 }),
      createRedisStore({ client, namespace, commandTimeoutMs: 30_000 }),
    ];
    try {
      for (let trial = 0; trial < 5; trial++) {
        const id = uniqueId('race');
        const at = exp();
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => claimed(pair[i % 2]!.claim(id, at, 'same'))));
        expect(results.filter((r) => r === 'first')).toHaveLength(1);
        expect(results.filter((r) => r === 'pending')).toHaveLength(49);
        const winner = pair[results.indexOf('first') % 2]!;
        expect(await winner.record(id, 'same', `outcome-${trial}`)).toBe(true);
        const after = await Promise.all(Array.from({ length: 50 }, (_, i) => claimed(pair[i % 2]!.claim(id, at, 'same'))));
        expect(after).toEqual(Array.from({ length: 50 }, () => `recorded:outcome-${trial}`));
      }
    } finally {
      await Promise.all(pair.map((store) => store.close()));
    }
  });

  for (const [kind, make] of Object.entries(stores)) {
    it(`${kind}: a claim whose reply is late (stalled event loop) → first for the writer; its retry → pending`, async () => {
      const store = make();
      try {
        await warm(store);
        const id = uniqueId('late');
        const pending = claimed(store.claim(id, exp(), 'fp'));
        blockEventLoop(TIMEOUT_MS * 2); // the command timer is due before the reply is read
        expect(await pending).toBe('first');
        expect(await admin.get(store.keyPrefix + id)).toMatch(/^p:fp:[A-Za-z0-9_-]{22}$/);
        expect(await claimed(store.claim(id, exp(), 'fp'))).toBe('pending');
      } finally {
        await store.close();
      }
    });

    it(`${kind}: 50 identical claims on a stalled event loop → exactly one first, 49 pending`, async () => {
      const store = make();
      try {
        await warm(store);
        for (let trial = 0; trial < 5; trial++) {
          const id = uniqueId('stall');
          const at = exp();
          const pending = Array.from({ length: 50 }, () => claimed(store.claim(id, at, 'same')));
          blockEventLoop(TIMEOUT_MS * 2);
          const results = await Promise.all(pending);
          expect(results.filter((r) => r === 'first')).toHaveLength(1);
          expect(results.filter((r) => r === 'pending')).toHaveLength(49);
        }
      } finally {
        await store.close();
      }
    });

    it(`${kind}: a record whose reply is late → true when the key holds its own value; a second record → false`, async () => {
      const store = make();
      try {
        await warm(store);
        const id = uniqueId('late-record');
        expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
        const pending = recorded(store.record(id, 'fp', 'the-outcome'));
        blockEventLoop(TIMEOUT_MS * 2);
        expect(await pending).toBe(true);
        expect(await store.record(id, 'fp', 'the-outcome')).toBe(false);
        expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'recorded', outcome: 'the-outcome' });
      } finally {
        await store.close();
      }
    });
  }

  it('a late claim on a key someone else holds resolves from its value, never first', async () => {
    const store = stores.owned!();
    try {
      await warm(store);
      // [stored, answer, stored after]: a claim with another fingerprint counts a miss; nothing else is written.
      const held: [string, string, string][] = [
        ['someone-else-consumed', 'replayed', 'someone-else-consumed'],
        ['p:fp:another-owner', 'pending', 'p:fp:another-owner'],
        ['p1:fp:another-owner', 'pending', 'p1:fp:another-owner'],
        ['p:other:owner', 'replayed', 'p1:other:owner'],
        ['p2:other:owner', 'replayed', 'd:other:'],
        ['d:fp:their-outcome', 'recorded:their-outcome', 'd:fp:their-outcome'],
        ['d2:fp:their-outcome', 'recorded:their-outcome', 'd2:fp:their-outcome'],
        ['d:fp:', 'replayed', 'd:fp:'], // done, not kept
        ['d:other:x', 'replayed', 'd1:other:x'],
      ];
      for (const [value, expected, after] of held) {
        const id = uniqueId('theirs');
        await admin.set(store.keyPrefix + id, value, 'PX', 60_000);
        const pending = claimed(store.claim(id, exp(), 'fp'));
        blockEventLoop(TIMEOUT_MS * 2);
        expect(await pending, value).toBe(expected);
        expect(await admin.get(store.keyPrefix + id), value).toBe(after);
      }
    } finally {
      await store.close();
    }
  });

  it('a late record when another value is stored resolves false', async () => {
    const store = stores.owned!();
    try {
      await warm(store);
      const id = uniqueId('late-theirs');
      expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      await admin.set(store.keyPrefix + id, 'd:fp:someone-else', 'KEEPTTL');
      const pending = recorded(store.record(id, 'fp', 'mine'));
      blockEventLoop(TIMEOUT_MS * 2);
      expect(await pending).toBe(false);
      expect(await admin.get(store.keyPrefix + id)).toBe('d:fp:someone-else');
    } finally {
      await store.close();
    }
  });

  describe('through a proxy that drops the reply and everything after it', () => {
    const setUp = async () => {
      const target = new URL(url);
      const proxy = await startReplyLosingProxy({ host: target.hostname, port: Number(target.port || 6379) });
      const proxied = new URL(url);
      proxied.hostname = '127.0.0.1';
      proxied.port = String(proxy.port);
      const namespace = uniqueId('cut');
      const store = createRedisStore({ url: proxied.toString(), namespace, commandTimeoutMs: 500, maxReconnectDelayMs: 100 });
      const peer = createRedisStore({ url, namespace });
      await warm(store);
      return { proxy, store, peer };
    };
    /** Retries `call` until the store is reconnected (bounded): every answer before that is ERR_STORE_UNAVAILABLE. */
    const afterRecovery = async <T>(call: () => Promise<T>, none: T): Promise<T> => {
      let result: T = none;
      for (let i = 0; i < 300; i++) {
        result = await call();
        if (result !== 'ERR_STORE_UNAVAILABLE') return result;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return result;
    };

    it('a claim whose reply and check are lost → ERR_STORE_UNAVAILABLE; its retry → pending, never first', async () => {
      const { proxy, store, peer } = await setUp();
      try {
        const id = uniqueId('cut-claim');
        const at = exp();
        proxy.loseNextReply('lost');
        const pending = claimed(store.claim(id, at, 'fp'));
        await until('the script to run', async () => (await admin.exists(store.keyPrefix + id)) === 1);
        expect(await pending).toBe('ERR_STORE_UNAVAILABLE');
        proxy.restore(); // cuts the connection: the store reconnects
        expect(await claimed(peer.claim(id, at, 'fp'))).toBe('pending');
        expect(await afterRecovery(() => claimed(store.claim(id, at, 'fp')), 'none')).toBe('pending');
      } finally {
        proxy.restore();
        await Promise.all([store.close(), peer.close()]);
        await proxy.close();
      }
    });

    for (const mode of ['late', 'lost'] as const) {
      it(`a batch of claims and records whose reply is ${mode}: never two firsts for an id, never a record true that did not land`, async () => {
        const { proxy, store, peer } = await setUp();
        try {
          const at = exp();
          const recordIds = Array.from({ length: 10 }, (_, i) => uniqueId(`batch-rec${i}`));
          for (const id of recordIds) expect(await store.claim(id, at, 'fp')).toEqual({ status: 'first', fence: 0 });
          const claimIds = Array.from({ length: 20 }, (_, i) => uniqueId(`batch-claim${i}`));
          proxy.loseNextReply(mode);
          // One tick: a lone call goes at once (its reply is the one held back or dropped), the rest as batches behind it.
          const claims = claimIds.flatMap((id) => [claimed(store.claim(id, at, 'fp')), claimed(store.claim(id, at, 'fp'))]);
          const records = recordIds.map((id) => recorded(store.record(id, 'fp', `out-${id}`)));
          const claimResults = await Promise.all(claims);
          const recordResults = await Promise.all(records);
          proxy.restore();
          for (const [i, id] of claimIds.entries()) {
            const mine = [claimResults[2 * i], claimResults[2 * i + 1]];
            expect(
              mine.every((r) => ['first', 'pending', 'ERR_STORE_UNAVAILABLE'].includes(r as string)),
              id,
            ).toBe(true);
            const firsts = mine.filter((r) => r === 'first').length;
            expect(firsts, id).toBeLessThanOrEqual(1);
            // Whoever claims it now: never first when the script ran (the key is held), whatever the store answered.
            const now = await claimed(peer.claim(id, at, 'fp'));
            if (now === 'first') expect(firsts, `${id} was first before`).toBe(0);
            else expect(now).toBe('pending');
            if (mode === 'late') expect(firsts, `${id}: a late reply is read back from the owner`).toBe(1);
          }
          for (const [i, id] of recordIds.entries()) {
            const result = recordResults[i];
            expect([true, false, 'ERR_STORE_UNAVAILABLE']).toContain(result);
            const now = await claimed(peer.claim(id, at, 'fp'));
            if (result === true) expect(now).toBe(`recorded:out-${id}`);
            if (mode === 'late') expect(result).toBe(true);
          }
        } finally {
          proxy.restore();
          await Promise.all([store.close(), peer.close()]);
          await proxy.close();
        }
      });
    }

    it('a record whose reply and check are lost → ERR_STORE_UNAVAILABLE; the write landed: identical claims get the outcome', async () => {
      const { proxy, store, peer } = await setUp();
      try {
        const id = uniqueId('cut-record');
        const at = exp();
        expect(await store.claim(id, at, 'fp')).toEqual({ status: 'first', fence: 0 });
        proxy.loseNextReply('lost');
        const pending = recorded(store.record(id, 'fp', 'landed'));
        await until('the record to land', async () => (await admin.get(store.keyPrefix + id)) === 'd:fp:landed');
        expect(await pending).toBe('ERR_STORE_UNAVAILABLE');
        proxy.restore();
        expect(await claimed(peer.claim(id, at, 'fp'))).toBe('recorded:landed');
        expect(await afterRecovery(() => claimed(store.claim(id, at, 'fp')), 'none')).toBe('recorded:landed');
      } finally {
        proxy.restore();
        await Promise.all([store.close(), peer.close()]);
        await proxy.close();
      }
    });
  });
});

// NOSCRIPT, ACLs and OOM change server state: a throwaway redis-server, never the shared one.
const binary = redisServerBinary();
describe.skipIf(binary === undefined)('outcome recording on a throwaway redis-server', () => {
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
  const exp = () => Date.now() + 60_000;

  /** A store on an injected client whose script calls are counted. */
  const make = (url = server.url) => {
    const inner = new Redis(url);
    clients.push(inner);
    const counts = { evalsha: 0, eval: 0 };
    /** numkeys of every script call (the batch script carries several keys, claim and record one). */
    const batches: number[] = [];
    const client = new Proxy(inner, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        if (prop !== 'evalsha' && prop !== 'eval') return value.bind(target);
        return (...args: unknown[]) => {
          counts[prop]++;
          batches.push(Number(args[1]));
          return value.apply(target, args);
        };
      },
    });
    return { store: createRedisStore({ client, namespace: uniqueId('tw'), evictionPolicyCheck: 'off' }), counts, batches };
  };

  it('claims interleaved with a burst of consumes: every id has exactly one winner, consumes still batched', async () => {
    const { store, batches } = make();
    try {
      expect(await store.claim(uniqueId('warm'), exp(), 'warm')).toEqual({ status: 'first', fence: 0 });
      const ids = Array.from({ length: 20 }, (_, i) => uniqueId(`mix${i}`));
      const calls = ids.flatMap((id, i) => [
        i % 2 === 0 ? store.consume(id, exp()).then((won) => (won ? 'won' : 'lost')) : claimed(store.claim(id, exp(), 'fp')),
        i % 2 === 0 ? claimed(store.claim(id, exp(), 'fp')) : store.consume(id, exp()).then((won) => (won ? 'won' : 'lost')),
      ]);
      const results = await Promise.all(calls);
      for (let i = 0; i < ids.length; i++) {
        const pair = [results[2 * i], results[2 * i + 1]];
        const winners = pair.filter((r) => r === 'won' || r === 'first').length;
        expect(winners, `${ids[i]}: ${JSON.stringify(pair)}`).toBe(1);
        // The loser saw the winner: a consume → false; a claim → replayed (held by a consume).
        expect(pair.every((r) => ['won', 'first', 'lost', 'replayed'].includes(r as string))).toBe(true);
      }
      expect(batches.some((numkeys) => numkeys > 1)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('NOSCRIPT (first use, SCRIPT FLUSH): claim and record (one script) load it with EVAL once, then EVALSHA', async () => {
    const { store, counts } = make();
    try {
      await admin.call('SCRIPT', 'FLUSH');
      const id = uniqueId('noscript');
      expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record(id, 'fp', 'out')).toBe(true);
      // The epoch's start-up script (before the first write of an injected client) was flushed too.
      expect(counts).toEqual({ evalsha: 3, eval: 2 });
      expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'recorded', outcome: 'out' });
      expect(counts).toEqual({ evalsha: 4, eval: 2 });
    } finally {
      await store.close();
    }
  });

  it('an ACL user without EVALSHA/EVAL: claim and record fail closed (ERR_STORE_UNAVAILABLE, NOPERM as cause); consume still works', async () => {
    const user = uniqueId('noscript').replaceAll(':', '-');
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '+@all', '-evalsha', '-eval');
    const url = new URL(server.url);
    url.username = user;
    url.password = 'pw';
    const { store } = make(url.toString());
    try {
      const id = uniqueId('acl');
      const error = await store.claim(id, exp(), 'fp').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(MrtrError.is(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
      expect(String(((error as Error).cause as Error).message)).toMatch(/^NOPERM/);
      expect(await admin.exists(store.keyPrefix + id)).toBe(0);
      expect(await recorded(store.record(id, 'fp', 'x'))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await store.consume(id, exp())).toBe(true);
    } finally {
      await store.close();
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('a byte flood by one namespace against its outcome budget leaves every other round working (noeviction, 32 MB)', async () => {
    // The review finding: records of 16 KiB outcomes from one namespace filled a 32 MB noeviction Redis, and every
    // other round got -32603 (OOM). 3,000 × 16 KiB = 48 MiB: without a budget this OOMs; with 1 MiB it cannot.
    const size = 16 * 1024;
    const budget = 1024 * 1024;
    const flood = createRedisStore({
      url: server.url,
      namespace: uniqueId('flood'),
      outcomeBudgetBytes: budget,
      evictionPolicyCheck: 'off',
    });
    const other = createRedisStore({ url: server.url, namespace: uniqueId('other'), evictionPolicyCheck: 'off' });
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '32mb');
    try {
      let kept = 0;
      for (let wave = 0; wave < 30; wave++) {
        const ids = Array.from({ length: 100 }, (_, i) => uniqueId(`flood${wave}-${i}`));
        const claims = await Promise.all(ids.map((id) => claimed(flood.claim(id, exp(), 'fp'))));
        expect(claims.every((c) => c === 'first')).toBe(true);
        const records = await Promise.all(ids.map((id, i) => recorded(flood.record(id, 'fp', `${i}`.padEnd(size, 'f')))));
        expect(records.every((r) => r === true || r === false)).toBe(true); // never ERR_STORE_UNAVAILABLE (OOM)
        kept += records.filter((r) => r === true).length;
      }
      // Never more than the budget, and it was used (the first outcomes were kept).
      expect(kept).toBeGreaterThan(0);
      expect(kept * size).toBeLessThanOrEqual(budget);
      // Everyone else's rounds still work: claim, record, consume.
      const id = uniqueId('after-flood');
      expect(await other.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await other.record(id, 'fp', 'y'.repeat(1000))).toBe(true);
      expect(await other.claim(id, exp(), 'fp')).toEqual({ status: 'recorded', outcome: 'y'.repeat(1000) });
      expect(await other.consume(uniqueId('after-flood'), exp())).toBe(true);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
      await Promise.all([flood.close(), other.close()]);
    }
  });

  it("the budget is the namespace's, shared by its instances: two stores together keep no more than it", async () => {
    const namespace = uniqueId('shared-budget');
    const size = 1000;
    const pair = [0, 1].map(() =>
      createRedisStore({ url: server.url, namespace, outcomeBudgetBytes: 5 * size, evictionPolicyCheck: 'off' }),
    );
    try {
      const ids = Array.from({ length: 40 }, (_, i) => uniqueId(`sb${i}`));
      await Promise.all(ids.map((id, i) => pair[i % 2]!.claim(id, exp(), 'fp')));
      const records = await Promise.all(ids.map((id, i) => pair[i % 2]!.record(id, 'fp', 'z'.repeat(size))));
      expect(records.filter((r) => r === true)).toHaveLength(5);
      const keys = await admin.keys(`${pair[0]!.keyPrefix.slice(0, -1)}%o*`);
      expect(keys.sort()).toEqual([
        `${pair[0]!.keyPrefix.slice(0, -1)}%o{${pair[0]!.keyPrefix.slice(0, -1)}}:h`,
        `${pair[0]!.keyPrefix.slice(0, -1)}%o{${pair[0]!.keyPrefix.slice(0, -1)}}:z`,
      ]);
      for (const key of keys) expect(await admin.pttl(key)).toBeGreaterThan(0);
    } finally {
      await Promise.all(pair.map((store) => store.close()));
    }
  });

  it('OOM (noeviction, maxmemory reached): claim and record fail closed and write nothing; both work again after', async () => {
    const { store } = make();
    try {
      const id = uniqueId('oom');
      const before = uniqueId('oom-before');
      expect(await store.claim(before, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await admin.config('SET', 'maxmemory', '1');
      try {
        expect(await claimed(store.claim(id, exp(), 'fp'))).toBe('ERR_STORE_UNAVAILABLE');
        expect(await recorded(store.record(before, 'fp', 'out'))).toBe('ERR_STORE_UNAVAILABLE');
      } finally {
        await admin.config('SET', 'maxmemory', '0');
      }
      expect(await admin.exists(store.keyPrefix + id)).toBe(0);
      expect(await admin.get(store.keyPrefix + before)).toMatch(/^p:fp:/);
      expect(await store.claim(id, exp(), 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record(before, 'fp', 'out')).toBe(true);
    } finally {
      await store.close();
    }
  });
});

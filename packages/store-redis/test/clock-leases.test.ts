// Redis's clock decides (clock: true) and claims hold leases on it (leases: true), against the shared Redis with a
// namespace per store. Nothing here compares against this process's Date.now(): every expiry is placed relative to
// Redis's TIME, as an instance whose clock is behind or ahead of Redis's would place it.
import { storeCapabilities } from '@mrtr/core/store';
import { startReplyLosingProxy } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisReplayStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, outcome, REDIS_URL, skipRedis, uniqueId, until } from './helpers.js';

gateRedis('clock-leases.test.ts');

/** A fresh owner value (16 to 64 base64url characters). */
const owner = (tag: string): string =>
  `${tag}${Math.random().toString(36).slice(2)}xxxxxxxxxxxxxxxx`.slice(0, 24).replace(/[^A-Za-z0-9_-]/g, 'x');

/** The claim's answer, or the MrtrError code it rejected with. */
const claimed = (promise: Promise<unknown>): Promise<unknown> => outcome(promise);

/** Stores on the shared Redis, one namespace each (closed after the file's tests), and an admin client. */
function storesOnSharedRedis(tag: string): { make: () => RedisReplayStore; admin: () => Redis } {
  const url = REDIS_URL as string;
  let admin: Redis | undefined;
  const stores: RedisReplayStore[] = [];
  beforeAll(async () => {
    await assertRedisReachable(url);
    admin = new Redis(url);
  });
  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
    admin?.disconnect();
  });
  const make = (): RedisReplayStore => {
    const store = createRedisStore({ url, namespace: uniqueId(tag), onError: () => {} });
    stores.push(store);
    return store;
  };
  return { make, admin: () => admin as Redis };
}

describe.skipIf(skipRedis)("Redis's clock decides (clock: true)", () => {
  const { make, admin } = storesOnSharedRedis('clock');
  const redisNow = async (): Promise<number> => {
    const [seconds, micros] = (await admin().time()) as [string | number, string | number];
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  };

  it('declares clock, leases and epoch, with their methods', () => {
    const caps = storeCapabilities(make());
    expect([caps.clock, caps.leases, caps.epoch]).toEqual([true, true, true]);
  });

  it("time() answers Redis's TIME in epoch ms", async () => {
    const store = make();
    const before = await redisNow();
    const t = await store.time();
    const after = await redisNow();
    expect(t).toBeGreaterThanOrEqual(before);
    expect(t).toBeLessThanOrEqual(after);
  });

  it("an instance 30 s behind Redis: its expiresAtMs (Redis's past) is refused ERR_STATE_EXPIRED, nothing written, never true", async () => {
    const store = make();
    const id = uniqueId('behind');
    // The fault of faults.md: the instance's clock is 30 s behind, its state TTL 2 s, so the expiry it passes is 28 s
    // in Redis's past. Before, the store wrote PXAT in Redis's past and Redis dropped the key at once: every retry won.
    for (let attempt = 0; attempt < 3; attempt++) {
      const exp = (await store.time()) - 28_000;
      expect(await outcome(store.consume(id, exp))).toBe('ERR_STATE_EXPIRED');
      expect(await claimed(store.claim(id, exp, 'fp'))).toBe('ERR_STATE_EXPIRED');
      expect(await admin().exists(store.keyPrefix + id)).toBe(0);
    }
    // At Redis's now exactly: refused too.
    const edge = uniqueId('edge');
    const batch = await Promise.all([0, 1, 2].map(async () => outcome(store.consume(edge, await store.time()))));
    expect(batch).toEqual(['ERR_STATE_EXPIRED', 'ERR_STATE_EXPIRED', 'ERR_STATE_EXPIRED']);
  });

  it("an instance ahead of Redis: an expiry in Redis's future is held until then (PXAT = expiresAtMs), once", async () => {
    const store = make();
    const id = uniqueId('ahead');
    const exp = (await store.time()) + 120_000;
    expect(await store.consume(id, exp)).toBe(true);
    expect(await store.consume(id, exp)).toBe(false);
    expect(Number(await admin().call('PEXPIRETIME', store.keyPrefix + id))).toBe(exp);
  });

  it('a batch mixes refusals and answers, each consume its own', async () => {
    const store = make();
    const now = await store.time();
    const [a, b] = [uniqueId('a'), uniqueId('b')];
    const results = await Promise.all([
      outcome(store.consume(uniqueId('head'), now + 60_000)),
      outcome(store.consume(a, now + 60_000)),
      outcome(store.consume(b, now - 1)),
      outcome(store.consume(a, now + 60_000)),
    ]);
    expect(results).toEqual([true, true, 'ERR_STATE_EXPIRED', false]);
  });
});

describe.skipIf(skipRedis)('leases on Redis (leases: true)', () => {
  const { make, admin } = storesOnSharedRedis('lease');
  const exp = async (store: RedisReplayStore): Promise<number> => (await store.time()) + 600_000;
  /** Claims until the lease of `id` has lapsed by Redis's clock (bounded): the answer then. */
  const afterLapse = async (store: RedisReplayStore, id: string, at: number, options: object): Promise<unknown> => {
    let answer: unknown;
    await until('the lease to lapse', async () => {
      answer = await store.claim(id, at, 'fp', options);
      return (answer as { status: string }).status !== 'pending';
    });
    return answer;
  };

  it('a first claim has fence 0; other owners see pending with leaseLeftMs; the same owner again is first', async () => {
    const store = make();
    const id = uniqueId('id');
    const at = await exp(store);
    const [a, b] = [owner('a'), owner('b')];
    expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
    const held = (await store.claim(id, at, 'fp', { owner: b, leaseMs: 60_000 })) as { status: string; leaseLeftMs: number };
    expect(held.status).toBe('pending');
    expect(held.leaseLeftMs).toBeGreaterThan(0);
    expect(held.leaseLeftMs).toBeLessThanOrEqual(60_000);
    expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
    expect(await admin().get(store.keyPrefix + id)).toMatch(new RegExp(`^L:fp:${a}:0:\\d+$`));
    // Without an owner (or a lease): no lease, never lapses (pending without leaseLeftMs).
    const plain = uniqueId('plain');
    expect(await store.claim(plain, at, 'fp')).toEqual({ status: 'first', fence: 0 });
    expect(await store.claim(plain, at, 'fp', { owner: b, leaseMs: 1 })).toEqual({ status: 'pending' });
  });

  it('renew extends the lease of its owner only; release gives back an unrecorded claim of its owner only', async () => {
    const store = make();
    const id = uniqueId('id');
    const at = await exp(store);
    const [a, b] = [owner('a'), owner('b')];
    await store.claim(id, at, 'fp', { owner: a, leaseMs: 10_000 });
    expect(await store.renew(id, a, 500_000)).toBe(true);
    const held = (await store.claim(id, at, 'fp', { owner: b })) as { leaseLeftMs: number };
    expect(held.leaseLeftMs).toBeGreaterThan(10_000);
    expect(await store.renew(id, b, 500_000)).toBe(false);
    expect(await store.release(id, b)).toBe(false);
    expect(await admin().exists(store.keyPrefix + id)).toBe(1);
    expect(await store.release(id, a)).toBe(true);
    expect(await admin().exists(store.keyPrefix + id)).toBe(0);
    expect(await store.release(id, a)).toBe(true); // twice answers as once
    expect(await store.renew(id, a, 1000)).toBe(false);
    expect(await store.claim(id, at, 'fp', { owner: b, leaseMs: 1000 })).toEqual({ status: 'first', fence: 0 });
    // A recorded claim is not released.
    expect(await store.record(id, 'fp', 'out', { owner: b })).toBe(true);
    expect(await store.release(id, b)).toBe(false);
    expect(await store.renew(id, b, 1000)).toBe(false);
  });

  it('a lapsed lease with no outcome is unknown; reclaim takes it over with the next fence; the old owner is fenced off', async () => {
    const store = make();
    const id = uniqueId('id');
    const at = await exp(store);
    const [a, b, c, d] = [owner('a'), owner('b'), owner('c'), owner('d')];
    expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 1 })).toEqual({ status: 'first', fence: 0 });
    expect(await afterLapse(store, id, at, { owner: b, leaseMs: 60_000 })).toEqual({ status: 'unknown' });
    expect(await store.claim(id, at, 'fp', { owner: b, leaseMs: 60_000 })).toEqual({ status: 'unknown' }); // every later one
    expect(await store.claim(id, at, 'fp', { owner: c, leaseMs: 1, reclaim: true })).toEqual({ status: 'first', fence: 1 });
    expect(await afterLapse(store, id, at, { owner: d, leaseMs: 60_000, reclaim: true })).toEqual({ status: 'first', fence: 2 });
    // The former owners hold nothing now.
    expect(await store.renew(id, a, 60_000)).toBe(false);
    expect(await store.release(id, c)).toBe(false);
    expect(await store.record(id, 'fp', 'stale', { owner: a })).toBe(false);
    expect(await store.record(id, 'fp', 'fresh', { owner: d })).toBe(true);
    expect(await store.claim(id, at, 'fp', { owner: b, reclaim: true })).toEqual({ status: 'recorded', outcome: 'fresh' });
  });

  it('renew of a lapsed lease that nobody reclaimed works (its owner was only slow); it still records', async () => {
    const store = make();
    const id = uniqueId('id');
    const at = await exp(store);
    const [a, b] = [owner('a'), owner('b')];
    await store.claim(id, at, 'fp', { owner: a, leaseMs: 1 });
    expect(await afterLapse(store, id, at, { owner: b })).toEqual({ status: 'unknown' });
    expect(await store.renew(id, a, 60_000)).toBe(true);
    expect(((await store.claim(id, at, 'fp', { owner: b })) as { status: string }).status).toBe('pending');
    const other = uniqueId('other');
    await store.claim(other, at, 'fp', { owner: a, leaseMs: 1 });
    expect(await afterLapse(store, other, at, { owner: b })).toEqual({ status: 'unknown' });
    expect(await store.record(other, 'fp', 'late', { owner: a })).toBe(true);
  });

  it('record is idempotent by owner: the second answers as the first (kept, not kept); another fingerprint or owner: false', async () => {
    const store = make();
    const at = await exp(store);
    const a = owner('a');
    const kept = uniqueId('kept');
    await store.claim(kept, at, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await store.record(kept, 'fp', 'out', { owner: a })).toBe(true);
    expect(await store.record(kept, 'fp', 'out', { owner: a })).toBe(true);
    expect(await store.record(kept, 'fp', 'out', { owner: owner('z') })).toBe(false);
    expect(await store.record(kept, 'other', 'out', { owner: a })).toBe(false);
    expect(await store.record(kept, 'fp', 'out')).toBe(false); // no owner: the former rule, recorded once
    expect(await admin().get(store.keyPrefix + kept)).toBe(`R:fp:${a}:out`);
    const dropped = uniqueId('dropped');
    await store.claim(dropped, at, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await store.record(dropped, 'fp', 'x'.repeat(store.maxOutcomeBytes + 1), { owner: a })).toBe(false);
    expect(await store.record(dropped, 'fp', 'x', { owner: a })).toBe(false);
    // Kept, then dropped by the third miss: the owner's second record still answers as its first (true).
    const missed = uniqueId('missed');
    await store.claim(missed, at, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await store.record(missed, 'fp', 'out', { owner: a })).toBe(true);
    for (const fp of ['x1', 'x2', 'x3']) expect(await store.claim(missed, at, fp)).toEqual({ status: 'replayed' });
    expect(await store.claim(missed, at, 'fp')).toEqual({ status: 'replayed' });
    expect(await store.record(missed, 'fp', 'out', { owner: a })).toBe(true);
  });

  it('rejects misused lease arguments with labelled TypeError/RangeError before any command', async () => {
    const store = make();
    const at = await exp(store);
    await expect(store.claim('id', at, 'fp', { owner: 'short' })).rejects.toThrow(
      new RangeError('claim: owner must be 16 to 64 base64url characters'),
    );
    await expect(store.claim('id', at, 'fp', { owner: 42 as never })).rejects.toThrow(new TypeError('claim: owner must be a string'));
    await expect(store.claim('id', at, 'fp', { owner: `${'a'.repeat(20)}:x` })).rejects.toThrow(RangeError);
    await expect(store.claim('id', at, 'fp', { owner: owner('a'), leaseMs: 0 })).rejects.toThrow(
      new RangeError('claim: leaseMs must be an integer from 1 to 2147483647'),
    );
    await expect(store.claim('id', at, 'fp', { reclaim: 'yes' as never })).rejects.toThrow(
      new TypeError('claim: reclaim must be a boolean'),
    );
    await expect(store.claim('id', at, 'fp', { mintedAtMs: Number.NaN })).rejects.toThrow(
      new TypeError('claim: mintedAtMs must be a finite number'),
    );
    await expect(store.renew('id', owner('a'), 1.5)).rejects.toThrow(
      new RangeError('renew: leaseMs must be an integer from 1 to 2147483647'),
    );
    await expect(store.release('id', 'x')).rejects.toThrow(new RangeError('release: owner must be 16 to 64 base64url characters'));
    await expect(store.record('id', 'fp', 'x', { owner: 'x' })).rejects.toThrow(RangeError);
  });
});

describe.skipIf(skipRedis)('lost replies of release, renew and record: retrying is safe', () => {
  const url = REDIS_URL as string;
  beforeAll(() => assertRedisReachable(url));

  /** A store behind a reply-losing proxy, warmed up (start-up reports and checks done), and a direct one. */
  const lossy = async () => {
    const proxy = await startReplyLosingProxy({ host: '127.0.0.1', port: Number(new URL(url).port || 6379) });
    const namespace = uniqueId('lossy');
    const proxied = new URL(url);
    proxied.host = `127.0.0.1:${proxy.port}`;
    const store = createRedisStore({
      url: proxied.toString(),
      namespace,
      commandTimeoutMs: 400,
      maxReconnectDelayMs: 50,
      evictionPolicyCheck: 'off',
      onError: () => {},
    });
    const direct = createRedisStore({ url, namespace, evictionPolicyCheck: 'off', onError: () => {} });
    await store.ready();
    for (let i = 0; i < 3; i++) await store.checkPersistence(); // the start-up reports are answered by now
    const close = async () => {
      await store.close();
      await direct.close();
      await proxy.close();
    };
    /** Runs `op` with its reply (and the store's own check after it) lost, then heals and waits for the store. */
    const lose = async <T>(op: () => Promise<T>): Promise<unknown> => {
      proxy.loseNextReply('lost');
      const result = await outcome(op());
      proxy.restore();
      await until('the store to reconnect', async () => (await store.time()) > 0);
      return result;
    };
    return { store, direct, lose, close };
  };

  it('release: the first ran, its reply was lost; the retry answers true and the id is free', async () => {
    const { store, direct, lose, close } = await lossy();
    try {
      const id = uniqueId('rel');
      const at = (await store.time()) + 600_000;
      const a = owner('a');
      expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
      expect(await lose(() => store.release(id, a))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await direct.renew(id, a, 60_000)).toBe(false); // it ran: a holds nothing
      expect(await store.release(id, a)).toBe(true); // the retry answers as the first would have
      expect(await direct.claim(id, at, 'fp', { owner: owner('b') })).toEqual({ status: 'first', fence: 0 });
    } finally {
      await close();
    }
  });

  it('renew: lost, then retried: true, the lease extended once more', async () => {
    const { store, direct, lose, close } = await lossy();
    try {
      const id = uniqueId('ren');
      const at = (await store.time()) + 600_000;
      const a = owner('a');
      await store.claim(id, at, 'fp', { owner: a, leaseMs: 5_000 });
      expect(await lose(() => store.renew(id, a, 300_000))).toBe('ERR_STORE_UNAVAILABLE');
      expect(((await direct.claim(id, at, 'fp', { owner: owner('b') })) as { leaseLeftMs: number }).leaseLeftMs).toBeGreaterThan(5_000);
      expect(await store.renew(id, a, 300_000)).toBe(true);
    } finally {
      await close();
    }
  });

  it('record by owner: lost, then retried: true (it landed), and identical claims get the outcome', async () => {
    const { store, direct, lose, close } = await lossy();
    try {
      const id = uniqueId('rec');
      const at = (await store.time()) + 600_000;
      const a = owner('a');
      await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 });
      expect(await lose(() => store.record(id, 'fp', 'sealed', { owner: a }))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await store.record(id, 'fp', 'sealed', { owner: a })).toBe(true);
      expect(await direct.claim(id, at, 'fp', { owner: owner('b') })).toEqual({ status: 'recorded', outcome: 'sealed' });
    } finally {
      await close();
    }
  });

  it('claim by owner: lost, then retried by the same owner: first with the same fence (never pending to itself)', async () => {
    const { store, lose, close } = await lossy();
    try {
      const id = uniqueId('cl');
      const at = (await store.time()) + 600_000;
      const a = owner('a');
      expect(await lose(() => store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 }))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
      expect(await store.release(id, a)).toBe(true);
    } finally {
      await close();
    }
  });
});

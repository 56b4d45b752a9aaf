// clock, leases and epoch on Upstash, through the REST shim in front of the local Redis: every expiry placed relative
// to Redis's TIME (never this process's clock), leases judged by it, the ledger epoch key deleted as a flush would.
import { storeCapabilities } from '@mrtr/core/store';
import { Redis as IoRedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type UpstashRestShim as RestShim, startUpstashRestShim as startRestShim } from '../../../scripts/upstash-rest-shim.mjs';
import { createUpstashStore, type UpstashReplayStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, REDIS_URL, skipRedis } from './helpers.js';

gateRedis('clock-leases.test.ts');

let sequence = 0;
const unique = (tag: string): string => `${tag}-${process.pid}-${Date.now().toString(36)}-${(sequence++).toString(36)}`;
const owner = (tag: string): string => `${tag}${'x'.repeat(16)}${(sequence++).toString(36)}`;
const redisMs = ([s, us]: [string, string]): number => Number(s) * 1000 + Math.floor(Number(us) / 1000);
const code = (promise: Promise<unknown>): Promise<unknown> => promise.catch((error: unknown) => (error as { code?: string }).code ?? error);

describe.skipIf(skipRedis)('Upstash: clock, leases and epoch (REST shim)', () => {
  let shim: RestShim;
  let admin: IoRedis;
  beforeAll(async () => {
    await assertRedisReachable(REDIS_URL as string);
    shim = await startRestShim(REDIS_URL as string);
    admin = new IoRedis(REDIS_URL as string);
  });
  afterAll(async () => {
    admin?.disconnect();
    await shim?.close();
  });
  const make = (): UpstashReplayStore => createUpstashStore({ url: shim.url, token: shim.token, namespace: unique('cl') });
  /** Claims until the lease of `id` lapsed by Redis's clock (bounded in count): the answer then. */
  const afterLapse = async (store: UpstashReplayStore, id: string, at: number, options: object) => {
    for (let i = 0; i < 2000; i++) {
      const answer = await store.claim(id, at, 'fp', options);
      if (answer.status !== 'pending') return answer;
    }
    throw new Error('the lease never lapsed');
  };

  it("declares clock, leases and epoch; time() is Redis's TIME", async () => {
    const store = make();
    expect(storeCapabilities(store)).toMatchObject({ clock: true, leases: true, epoch: true });
    const before = redisMs((await admin.time()) as unknown as [string, string]);
    const t = await store.time();
    expect(t).toBeGreaterThanOrEqual(before);
    expect(t).toBeLessThanOrEqual(redisMs((await admin.time()) as unknown as [string, string]));
  });

  it("an expiresAtMs at or before Redis's clock is refused ERR_STATE_EXPIRED, nothing written", async () => {
    const store = make();
    const id = unique('past');
    const exp = (await store.time()) - 28_000;
    expect(await code(store.consume(id, exp))).toBe('ERR_STATE_EXPIRED');
    expect(await code(store.claim(id, exp, 'fp'))).toBe('ERR_STATE_EXPIRED');
    expect(await admin.exists(`${store.keyPrefix}r:${id}`)).toBe(0);
    expect(await store.consume(id, (await store.time()) + 60_000)).toBe(true);
  });

  it('leases: pending with leaseLeftMs, renew and release by owner, unknown once lapsed, reclaim with the next fence', async () => {
    const store = make();
    const id = unique('lease');
    const at = (await store.time()) + 600_000;
    const [a, b, c] = [owner('a'), owner('b'), owner('c')];
    expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
    expect(await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
    const held = await store.claim(id, at, 'fp', { owner: b });
    expect(held.status === 'pending' && held.leaseLeftMs !== undefined && held.leaseLeftMs <= 60_000).toBe(true);
    expect(await store.renew(id, b, 1000)).toBe(false);
    expect(await store.release(id, b)).toBe(false);
    expect(await store.renew(id, a, 1)).toBe(true);
    expect(await afterLapse(store, id, at, { owner: b })).toEqual({ status: 'unknown' });
    expect(await store.claim(id, at, 'fp', { owner: c, leaseMs: 60_000, reclaim: true })).toEqual({ status: 'first', fence: 1 });
    expect(await store.record(id, 'fp', 'stale', { owner: a })).toBe(false);
    expect(await store.record(id, 'fp', 'out', { owner: c })).toBe(true);
    expect(await store.record(id, 'fp', 'out', { owner: c })).toBe(true); // the second answers as the first
    expect(await store.release(id, c)).toBe(false);
    expect(await store.claim(id, at, 'fp', { owner: b })).toEqual({ status: 'recorded', outcome: 'out' });
    const freed = unique('free');
    await store.claim(freed, at, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await store.release(freed, a)).toBe(true);
    expect(await store.release(freed, a)).toBe(true);
    expect(await store.claim(freed, at, 'fp', { owner: b })).toEqual({ status: 'first', fence: 0 });
  });

  it('the epoch key lost (as after a flush): a state minted before the new epoch is refused ERR_LEDGER_LOST', async () => {
    const store = make();
    const minted = await store.time(); // the ledger begins here (time() writes a missing epoch)
    const at = minted + 600_000;
    const spent = unique('spent');
    expect(await store.consume(spent, at, { mintedAtMs: minted })).toBe(true);
    // Redis's clock past minted (read by admin: the store's time() would write the epoch again), then the flush.
    for (let i = 0; i < 2000 && redisMs((await admin.time()) as unknown as [string, string]) <= minted; i++);
    await admin.del(`${store.keyPrefix}r:${spent}`, `${store.keyPrefix}ep`);
    expect(await code(store.consume(spent, at, { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
    expect(await code(store.claim(unique('c'), at, 'fp', { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
    expect(await store.consume(spent, at)).toBe(true); // no mintedAtMs: no epoch check
  });

  it('release, renew and record whose replies are lost are asked again and answer as once', async () => {
    const lossy = await startRestShim(REDIS_URL as string);
    try {
      const store = createUpstashStore({ url: lossy.url, token: lossy.token, namespace: unique('lost') });
      const at = (await store.time()) + 600_000;
      const a = owner('a');
      const [r, n, w] = [unique('r'), unique('n'), unique('w')];
      for (const id of [r, n, w]) await store.claim(id, at, 'fp', { owner: a, leaseMs: 60_000 });
      lossy.loseNextReply('late');
      expect(await store.release(r, a)).toBe(true);
      lossy.loseNextReply('late');
      expect(await store.renew(n, a, 60_000)).toBe(true);
      lossy.loseNextReply('late');
      expect(await store.record(w, 'fp', 'out', { owner: a })).toBe(true);
      expect(await store.claim(w, at, 'fp')).toEqual({ status: 'recorded', outcome: 'out' });
    } finally {
      await lossy.close();
    }
  });
});

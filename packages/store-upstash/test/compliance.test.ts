import { storeCompliance, taskStoreCompliance } from '@mrtr/test-suite';
import { Redis } from '@upstash/redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUpstashStore, createUpstashTaskStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, loseKeys, REDIS_URL, skipRedis } from './helpers.js';
import { type UpstashRestShim as RestShim, startUpstashRestShim as startRestShim } from '../../../scripts/upstash-rest-shim.mjs';

gateRedis('compliance.test.ts');

// A lost reply is a cut connection (an error at once), never a timeout: on a loaded machine, no legitimate reply may
// run into commandTimeoutMs (the unreachable store keeps a short one).
const commandTimeoutMs = 60_000;

describe.skipIf(skipRedis)('Upstash store over the REST shim', () => {
  let shim: RestShim;
  beforeAll(async () => {
    await assertRedisReachable(REDIS_URL as string);
    shim = await startRestShim(REDIS_URL as string);
  });
  afterAll(() => shim?.close());

  storeCompliance(it, (o) => createUpstashStore({ ...o, url: shim.url, token: shim.token, commandTimeoutMs }), {
    name: 'upstash',
    outcomes: true,
    keyFingerprints: true,
    ttlMs: 400,
    timeoutMs: 120_000,
    unreachable: () => createUpstashStore({ url: 'http://127.0.0.1:1', token: 't', commandTimeoutMs: 500 }),
    // A flush of the namespace: every key of its ledger deleted (the epoch with the ids).
    loseLedger: async (namespace) => {
      await loseKeys(REDIS_URL as string, createUpstashStore({ url: shim.url, token: shim.token, namespace }).keyPrefix);
    },
    lostReply: async ({ namespace }) => {
      const lossy = await startRestShim(REDIS_URL as string);
      // The same Redis, another shim (so only this store's replies are lost), its token.
      const store = createUpstashStore({ url: lossy.url, token: lossy.token, namespace, commandTimeoutMs });
      return {
        store,
        loseNextReply: (mode) => lossy.loseNextReply(mode),
        restore: () => lossy.restore(),
        close: async () => {
          await store.close();
          await lossy.close();
        },
      };
    },
  });

  taskStoreCompliance(it, (o) => createUpstashTaskStore({ ...o, url: shim.url, token: shim.token, commandTimeoutMs }), {
    name: 'upstash tasks',
    ttlMs: 400,
    timeoutMs: 120_000,
  });

  it('ledgerEpoch writes the epoch of a new namespace and answers it; a state sealed with it is accepted, refused once the ledger is lost, and one sealed with the later epoch accepted', async () => {
    const store = createUpstashStore({ url: shim.url, token: shim.token, namespace: `epoch-${Date.now()}`, commandTimeoutMs });
    const admin = new Redis({ url: shim.url, token: shim.token, enableTelemetry: false, automaticDeserialization: false });
    const epochKey = `${store.keyPrefix}ep`;
    expect(await admin.get(epochKey)).toBeNull();
    const epoch = await store.ledgerEpoch();
    expect(await admin.get(epochKey)).toBe(String(epoch));
    expect(epoch).toBeLessThanOrEqual(await store.time());
    const [spent, fresh] = [`spent-${epoch}`, `fresh-${epoch}`];
    const exp = (await store.time()) + 600_000;
    expect(await store.consume(spent, exp, { mintedAtMs: epoch })).toBe(true);
    expect(await store.ledgerEpoch()).toBe(epoch); // running it again moves nothing
    // Redis's clock past the epoch (the ledger lives: time() moves nothing), then the namespace is flushed.
    for (let i = 0; i < 1000 && (await store.time()) <= epoch; i++) await new Promise((resolve) => setTimeout(resolve, 2));
    expect(await loseKeys(REDIS_URL as string, store.keyPrefix)).toBeGreaterThan(0);
    await expect(store.consume(spent, exp, { mintedAtMs: epoch })).rejects.toMatchObject({ code: 'ERR_LEDGER_LOST' });
    const since = await store.ledgerEpoch();
    expect(since).toBeGreaterThan(epoch);
    expect(await store.consume(fresh, exp, { mintedAtMs: since })).toBe(true);
    expect(await store.consume(fresh, exp, { mintedAtMs: since })).toBe(false);
  });

  it('an injected @upstash/redis client with its defaults (retries, automatic deserialization) keeps the promises', async () => {
    const client = new Redis({ url: shim.url, token: shim.token, enableTelemetry: false });
    const store = createUpstashStore({ client, namespace: `inj-${Date.now()}`, maxOutcomeBytes: 100 });
    const exp = Date.now() + 60_000;
    expect(await store.consume('a', exp)).toBe(true);
    expect(await store.consume('a', exp)).toBe(false);
    expect(await store.claim('b', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
    // An outcome that JSON.parse would turn into a number must come back as the string it was.
    expect(await store.record('b', 'fp', '12345')).toBe(true);
    expect(await store.claim('b', exp, 'fp')).toEqual({ status: 'recorded', outcome: '12345' });
  });

  it("the client's own retry after a lost reply is no false replay (the Upstash pitfall with a plain SET NX)", async () => {
    const lossy = await startRestShim(REDIS_URL as string);
    try {
      // @upstash/redis retries a request whose connection failed: the retried script finds this call's owner value.
      const client = new Redis({ url: lossy.url, token: lossy.token, enableTelemetry: false, retry: { retries: 2, backoff: () => 1 } });
      const store = createUpstashStore({ client, namespace: `retry-${Date.now()}` });
      const exp = Date.now() + 60_000;
      lossy.loseNextReply('late');
      expect(await store.consume('mine', exp)).toBe(true);
      expect(await store.consume('mine', exp)).toBe(false);
      lossy.loseNextReply('late');
      expect(await store.claim('claimed', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
      lossy.loseNextReply('late');
      expect(await store.record('claimed', 'fp', 'out')).toBe(true);
      expect(await store.claim('claimed', exp, 'fp')).toEqual({ status: 'recorded', outcome: 'out' });
      expect(lossy.requests).toBeGreaterThan(0);
    } finally {
      await lossy.close();
    }
  });

  it('task writes whose replies are lost are asked again and count once (the scripts know their own version)', async () => {
    const lossy = await startRestShim(REDIS_URL as string);
    try {
      const tasks = createUpstashTaskStore({ url: lossy.url, token: lossy.token, namespace: `lost-${Date.now()}`, maxLivePerPrincipal: 2 });
      const now = Date.now();
      const record = (taskId: string) => ({
        taskId,
        principal: 'alice',
        status: 'working' as const,
        createdAt: now,
        lastUpdatedAt: now,
        ttlMs: 60_000,
        inputRequests: {},
        askedKeys: [],
      });
      lossy.loseNextReply('late');
      await tasks.create(record('t1'));
      lossy.loseNextReply('late');
      await tasks.create(record('t2'));
      // Each create ran twice on the server (the reply lost, then asked again) yet holds one slot: a third is refused.
      await expect(tasks.create(record('t3'))).rejects.toMatchObject({ code: 'ERR_TASK_LIMIT', limit: 'live' });
      lossy.loseNextReply('late');
      const updated = await tasks.update('t1', (r) => ({ ...r, askedKeys: [...r.askedKeys, 'k'] }));
      expect(updated?.askedKeys).toEqual(['k']);
      expect((await tasks.get('t1'))?.askedKeys).toEqual(['k']);
    } finally {
      await lossy.close();
    }
  });

  it('outcomes stop counting against the budget once their ids expired (by the Redis clock)', async () => {
    const store = createUpstashStore({
      url: shim.url,
      token: shim.token,
      namespace: `budget-${Date.now()}`,
      maxOutcomeBytes: 100,
      outcomeBudgetBytes: 100,
    });
    const exp = Date.now() + 300;
    expect(await store.claim('a', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
    expect(await store.record('a', 'fp', 'x'.repeat(100))).toBe(true);
    expect(await store.claim('b', Date.now() + 60_000, 'fp')).toEqual({ status: 'first', fence: 0 });
    expect(await store.record('b', 'fp', 'y')).toBe(false); // the budget is full while a is live
    // Only after a's expiry has passed (no assertion about any moment before it): its bytes are given back.
    while (Date.now() <= exp + 5) await new Promise((resolve) => setTimeout(resolve, exp + 6 - Date.now()));
    expect(await store.claim('c', Date.now() + 60_000, 'fp')).toEqual({ status: 'first', fence: 0 });
    expect(await store.record('c', 'fp', 'z'.repeat(100))).toBe(true);
  });

  it('a value that is not a task record fails closed, and a wrong token is ERR_STORE_UNAVAILABLE', async () => {
    const namespace = `corrupt-${Date.now()}`;
    const tasks = createUpstashTaskStore({ url: shim.url, token: shim.token, namespace });
    const key = `${tasks.keyPrefix}t:${Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode('t1'))).toString('base64url')}`;
    await new Redis({ url: shim.url, token: shim.token, enableTelemetry: false }).set(key, 'v'.repeat(23) + '{"not":"a task"}');
    await expect(tasks.get('t1')).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(tasks.update('t1', (r) => r)).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    const wrong = createUpstashStore({ url: shim.url, token: 'wrong', namespace });
    await expect(wrong.consume('x', Date.now() + 60_000)).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
  });

  it('misuse of the options is a labelled TypeError or RangeError', () => {
    expect(() => createUpstashStore({ url: '', token: 't' })).toThrow(/createUpstashStore: url/);
    expect(() => createUpstashStore({ url: 'redis://x', token: 't' })).toThrow(TypeError);
    expect(() => createUpstashStore({ url: shim.url, token: '' })).toThrow(/createUpstashStore: token/);
    expect(() => createUpstashStore({ url: shim.url, token: 't', commandTimeoutMs: 0 })).toThrow(RangeError);
    expect(() => createUpstashStore({ url: shim.url, token: 't', maxOutcomeBytes: -1 })).toThrow(/maxOutcomeBytes/);
    expect(() => createUpstashTaskStore({ url: shim.url, token: 't', maxLivePerPrincipal: 10, maxPerPrincipal: 5 })).toThrow(RangeError);
  });
});

// Batching over the REST shim: calls that arrive while a request is in flight go together as one `POST /pipeline`,
// each answered on its own; a pipeline whose reply is lost is sent once more and every call still gets its first
// answer (its owner value); a claim whose batch got no answer at all is released by its owner.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type UpstashRestShim as RestShim, startUpstashRestShim as startRestShim } from '../../../scripts/upstash-rest-shim.mjs';
import { createUpstashStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, REDIS_URL, skipRedis } from './helpers.js';

gateRedis('batching.test.ts');

let sequence = 0;
const unique = (tag: string): string => `${tag}-${process.pid}-${Date.now().toString(36)}-${(sequence++).toString(36)}`;
const owner = (i: number): string => `owner${'x'.repeat(16)}${i}-${(sequence++).toString(36)}`;
const commandTimeoutMs = 60_000;

describe.skipIf(skipRedis)('Upstash store: batching into pipelines (REST shim)', () => {
  let shim: RestShim;
  beforeAll(async () => {
    await assertRedisReachable(REDIS_URL as string);
    shim = await startRestShim(REDIS_URL as string);
  });
  afterAll(() => shim?.close());

  it('32 concurrent consumes go in pipelines (at most 8 requests, not 32), each answered on its own', async () => {
    const store = createUpstashStore({ url: shim.url, token: shim.token, namespace: unique('batch'), commandTimeoutMs });
    const exp = (await store.time()) + 60_000;
    const ids = Array.from({ length: 32 }, (_, i) => unique(`id${i}`));
    const before = shim.requests;
    const first = await Promise.all(ids.map((id) => store.consume(id, exp)));
    const requests = shim.requests - before;
    expect(first).toEqual(ids.map(() => true));
    expect(requests).toBeLessThanOrEqual(8); // a lone first call (when nothing is in flight), then pipelines of the rest
    // Mixed in one pipeline: replays and first uses, each its own answer.
    const fresh = unique('fresh');
    expect(
      await Promise.all([store.consume(ids[0] as string, exp), store.consume(fresh, exp), store.consume(ids[1] as string, exp)]),
    ).toEqual([false, true, false]);
  });

  it('a pipeline whose reply is lost is sent once more: every consume and claim still gets its first answer', async () => {
    const lossy = await startRestShim(REDIS_URL as string);
    try {
      const namespace = unique('lost');
      const store = createUpstashStore({ url: lossy.url, token: lossy.token, namespace, commandTimeoutMs });
      const exp = (await store.time()) + 60_000;
      lossy.loseNextReply('late', '/pipeline');
      const ids = Array.from({ length: 9 }, (_, i) => unique(`l${i}`));
      const owners = ids.map((_, i) => owner(i));
      const answers = await Promise.all([
        ...ids.map((id) => store.consume(id, exp)),
        ...ids.map((id, i) => store.claim(`${id}-c`, exp, 'fp', { owner: owners[i] as string })),
      ]);
      expect(lossy.lostReplies).toBe(1);
      expect(answers.slice(0, 9)).toEqual(ids.map(() => true));
      expect(answers.slice(9)).toEqual(ids.map(() => ({ status: 'first', fence: 0 })));
      // And they were spent: another store of the ledger sees replays.
      const other = createUpstashStore({ url: shim.url, token: shim.token, namespace, commandTimeoutMs });
      expect(await Promise.all(ids.map((id) => other.consume(id, exp)))).toEqual(ids.map(() => false));
    } finally {
      await lossy.close();
    }
  });

  it('claims whose batch got no reply at all fail ERR_STORE_UNAVAILABLE and are released by their owners', async () => {
    const lossy = await startRestShim(REDIS_URL as string);
    try {
      const namespace = unique('gone');
      const store = createUpstashStore({ url: lossy.url, token: lossy.token, namespace, commandTimeoutMs });
      const exp = (await store.time()) + 60_000;
      const ids = Array.from({ length: 9 }, (_, i) => unique(`g${i}`));
      const owners = ids.map((_, i) => owner(i));
      lossy.loseNextReply('lost');
      const failed = await Promise.allSettled(
        ids.map((id, i) => store.claim(id, exp, 'fp', { owner: owners[i] as string, leaseMs: 60_000 })),
      );
      lossy.restore();
      expect(lossy.lostReplies).toBeGreaterThanOrEqual(4); // the lone call and the pipeline, each asked twice
      expect(failed.map((r) => (r.status === 'rejected' ? (r.reason as { code?: string }).code : r.status))).toEqual(
        ids.map(() => 'ERR_STORE_UNAVAILABLE'),
      );
      // The scripts ran: each id is held by its owner's claim, which that owner releases (and nobody else can).
      const other = createUpstashStore({ url: shim.url, token: shim.token, namespace, commandTimeoutMs });
      expect((await other.claim(ids[0] as string, exp, 'fp', { owner: owner(99) })).status).toBe('pending');
      expect(await other.release(ids[0] as string, owner(98))).toBe(false);
      expect(await Promise.all(ids.map((id, i) => other.release(id, owners[i] as string)))).toEqual(ids.map(() => true));
      expect(await Promise.all(ids.map((id) => other.claim(id, exp, 'fp')))).toEqual(ids.map(() => ({ status: 'first', fence: 0 })));
    } finally {
      await lossy.close();
    }
  });
});

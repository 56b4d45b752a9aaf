import { MrtrError } from '@mrtr/core';
import { StoreFullError, StoreUnavailableError } from '@mrtr/core/errors';
import { describe, expect, it } from 'vitest';
import { createMemoryStore, createMemoryTaskStore } from '../src/index.js';

function fakeClock(start = 1_700_000_000_000) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('createMemoryStore options', () => {
  it('refuses an unknown option, naming it and the closest known name', () => {
    expect(() => createMemoryStore({ maxEntrys: 5 } as never)).toThrow(
      new TypeError('createMemoryStore: unknown option "maxEntrys"; did you mean "maxEntries"?'),
    );
    expect(() => createMemoryStore({ maxOutcomeByte: undefined } as never)).toThrow(
      new TypeError('createMemoryStore: unknown option "maxOutcomeByte"; did you mean "maxOutcomeBytes"?'),
    );
    expect(() => createMemoryTaskStore({ maxTask: 5 } as never)).toThrow(
      new TypeError('createMemoryTaskStore: unknown option "maxTask"; did you mean "maxTasks"?'),
    );
  });

  it('rejects bad options at construction', () => {
    expect(() => createMemoryStore({ maxEntries: 0 })).toThrow(RangeError);
    expect(() => createMemoryStore({ maxEntries: 0 })).toThrow(
      new RangeError(`createMemoryStore: maxEntries must be between 1 and ${Number.MAX_SAFE_INTEGER}`),
    );
    expect(() => createMemoryStore({ maxEntries: 1.5 })).toThrow(new TypeError('createMemoryStore: maxEntries must be an integer'));
    expect(() => createMemoryStore({ maxEntries: Number.NaN })).toThrow(new TypeError('createMemoryStore: maxEntries must be an integer'));
    expect(() => createMemoryStore({ maxOutcomeBytes: -1 })).toThrow(RangeError);
    expect(() => createMemoryStore({ maxOutcomeBytes: 0.5 })).toThrow(TypeError);
    expect(() => createMemoryStore({ namespace: 1 as unknown as string })).toThrow(TypeError);
    expect(() => createMemoryStore({ now: 'x' as unknown as () => number })).toThrow(TypeError);
    expect(() => createMemoryStore(null as unknown as object)).toThrow(TypeError);
  });

  it('defaults to 100,000 entries and reports namespace and size', async () => {
    const store = createMemoryStore({ namespace: 'tenant-a' });
    expect(store.maxEntries).toBe(100_000);
    expect(store.namespace).toBe('tenant-a');
    expect(store.size).toBe(0);
    expect(await store.consume('a', Date.now() + 60_000)).toBe(true);
    expect(store.size).toBe(1);
    await store.close();
    expect(store.size).toBe(0);
  });
});

describe('bounded memory, fail closed', () => {
  it('when full of live ids, a new id is refused with StoreFullError and no live id is evicted', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries: 100, now: clock.now });
    for (let i = 0; i < 100; i++) expect(await store.consume(`live-${i}`, clock.now() + 1000 + i)).toBe(true);
    expect(store.size).toBe(100);
    for (let i = 0; i < 5; i++) {
      const error = await store.consume(`new-${i}`, clock.now() + 1000).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreFullError);
      expect((error as StoreFullError).code).toBe('ERR_STORE_FULL');
    }
    // Every live id is still remembered: a replay of any of them is still refused.
    for (let i = 0; i < 100; i++) expect(await store.consume(`live-${i}`, clock.now() + 1000)).toBe(false);
    expect(store.size).toBe(100);
  });

  it('reclaims an expired id when full, and only expired ones', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries: 10, now: clock.now });
    // ids 0..4 expire at +100, ids 5..9 at +10_000 (inserted interleaved so insertion order != expiry order)
    for (let i = 0; i < 10; i++) {
      const short = i % 2 === 0;
      expect(await store.consume(`id-${i}`, clock.now() + (short ? 100 : 10_000))).toBe(true);
    }
    await expect(store.consume('extra-0', clock.now() + 1000)).rejects.toBeInstanceOf(StoreFullError);
    clock.advance(101);
    // Five short ids have expired: exactly five new ids fit, the sixth is refused.
    for (let i = 0; i < 5; i++) expect(await store.consume(`extra-${i}`, clock.now() + 10_000)).toBe(true);
    await expect(store.consume('extra-5', clock.now() + 1000)).rejects.toBeInstanceOf(StoreFullError);
    for (let i = 1; i < 10; i += 2) expect(await store.consume(`id-${i}`, clock.now() + 1000)).toBe(false);
    for (let i = 0; i < 5; i++) expect(await store.consume(`extra-${i}`, clock.now() + 1000)).toBe(false);
    expect(store.size).toBe(10);
  });

  it('re-consuming an expired id reuses its slot even when full', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries: 2, now: clock.now });
    expect(await store.consume('a', clock.now() + 10)).toBe(true);
    expect(await store.consume('b', clock.now() + 10_000)).toBe(true);
    clock.advance(11);
    expect(await store.consume('a', clock.now() + 10)).toBe(true);
    expect(await store.consume('a', clock.now() + 10)).toBe(false);
    await expect(store.consume('c', clock.now() + 5)).rejects.toBeInstanceOf(StoreFullError);
  });

  it('a full store of long-lived ids refuses in O(1) after one pass and recovers after expiry', async () => {
    const clock = fakeClock();
    const n = 5000;
    const store = createMemoryStore({ maxEntries: n, now: clock.now });
    for (let i = 0; i < n; i++) await store.consume(`k${i}`, clock.now() + 60_000);
    for (let i = 0; i < 1000; i++) {
      await expect(store.consume(`over${i}`, clock.now() + 60_000)).rejects.toBeInstanceOf(StoreFullError);
    }
    expect(store.size).toBe(n);
    clock.advance(60_001);
    for (let i = 0; i < n; i++) expect(await store.consume(`fresh${i}`, clock.now() + 60_000)).toBe(true);
    expect(store.size).toBe(n);
  });
});

describe('incremental sweep', () => {
  it('drops expired ids as consumes happen, without a timer', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries: 1_000_000, now: clock.now });
    for (let i = 0; i < 10_000; i++) await store.consume(`old${i}`, clock.now() + 1000);
    expect(store.size).toBe(10_000);
    clock.advance(1001);
    // Each consume examines a couple of entries: 10,000 fresh consumes walk the whole map at least once.
    for (let i = 0; i < 10_000; i++) await store.consume(`new${i}`, clock.now() + 1000);
    expect(store.size).toBeLessThanOrEqual(10_000 + 10);
    for (let i = 0; i < 10_000; i++) expect(await store.consume(`new${i}`, clock.now() + 1000)).toBe(false);
  });

  it('keeps the map bounded under a steady stream of short-lived ids', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries: 1_000_000, now: clock.now });
    // 100 ids per ms, 50 ms lifetime: about 5,000 live at any time.
    let peak = 0;
    for (let i = 0; i < 200_000; i++) {
      if (i % 100 === 0) clock.advance(1);
      await store.consume(`s${i}`, clock.now() + 50);
      if (store.size > peak) peak = store.size;
    }
    expect(peak).toBeLessThan(15_000);
  });

  it('does not keep the event loop alive (no timers are created)', async () => {
    const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const store = createMemoryStore();
    for (let i = 0; i < 100; i++) await store.consume(`t${i}`, Date.now() + 60_000);
    const after = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    expect(after).toBe(before);
    await store.close();
  });
});

describe('expiry edge cases', () => {
  it('an id is live through expiresAtMs inclusive and free one millisecond after', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ now: clock.now });
    const exp = clock.now() + 100;
    expect(await store.consume('x', exp)).toBe(true);
    clock.advance(100);
    expect(clock.now()).toBe(exp);
    expect(await store.consume('x', exp + 100)).toBe(false);
    clock.advance(1);
    expect(await store.consume('x', exp + 100)).toBe(true);
  });

  it('an expiresAtMs at or before the clock is refused with StateExpiredError and records nothing', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ now: clock.now });
    expect(await codeOf(store.consume('past', clock.now() - 1))).toBe('ERR_STATE_EXPIRED');
    expect(await codeOf(store.consume('past', clock.now()))).toBe('ERR_STATE_EXPIRED');
    expect(await codeOf(store.claim('past', clock.now(), 'fp'))).toBe('ERR_STATE_EXPIRED');
    expect(store.size).toBe(0);
    expect(await store.consume('past', clock.now() + 1)).toBe(true);
    // A live id too: the refusal comes before the ledger is read (the caller's clock is behind the store's).
    expect(await codeOf(store.consume('past', clock.now()))).toBe('ERR_STATE_EXPIRED');
    expect(await store.time()).toBe(clock.now());
  });
});

describe('close', () => {
  it('consume after close rejects with ERR_STORE_UNAVAILABLE, also for ids consumed before', async () => {
    const store = createMemoryStore();
    expect(await store.consume('a', Date.now() + 60_000)).toBe(true);
    await store.close();
    expect(await codeOf(store.consume('a', Date.now() + 60_000))).toBe('ERR_STORE_UNAVAILABLE');
    await expect(store.consume('b', Date.now() + 60_000)).rejects.toBeInstanceOf(StoreUnavailableError);
  });
});

describe('sizing (README: maxEntries ≥ rate × window)', () => {
  // 100 consumes/s (one every 10 ms), each id held for a 10 s window: at any moment the live ids are
  // those consumed in [now − 10 s, now], i.e. 100 × 10 + 1 = 1,001. Fake clock: no real time involved.
  const run = async (maxEntries: number) => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries, now: clock.now });
    let full = 0;
    for (let i = 0; i < 5_000; i++) {
      const result = await store.consume(`id${i}`, clock.now() + 10_000).catch((error: unknown) => (error as MrtrError).code);
      if (result === 'ERR_STORE_FULL') full++;
      else expect(result).toBe(true);
      clock.advance(10);
    }
    return full;
  };

  it('a store sized at rate × window (+1 for the inclusive end) never refuses at that rate over 5 windows', async () => {
    expect(await run(1_001)).toBe(0);
  });

  it('one percent smaller and it refuses (fails closed) once the window fills', async () => {
    expect(await run(990)).toBeGreaterThan(0);
  });
});

describe('leases and the ledger epoch', () => {
  const owner = (n: number) => `owner-${String(n).padStart(10, '0')}`;

  it('release gives the slot back: a full store takes a new id after it', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ maxEntries: 2, now: clock.now });
    const exp = clock.now() + 60_000;
    expect(await store.claim('a', exp, 'fp', { owner: owner(1), leaseMs: 1000 })).toEqual({ status: 'first', fence: 0 });
    expect(await store.consume('b', exp)).toBe(true);
    expect(await codeOf(store.consume('c', exp))).toBe('ERR_STORE_FULL');
    expect(await store.release('a', owner(1))).toBe(true);
    expect(store.size).toBe(1);
    expect(await store.consume('c', exp)).toBe(true);
  });

  it('a reclaimed claim keeps the state’s expiry, and its outcome counts against the budget once', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ now: clock.now });
    const exp = clock.now() + 10_000;
    await store.claim('a', exp, 'fp', { owner: owner(1), leaseMs: 1000 });
    clock.advance(1001);
    expect(await store.claim('a', exp, 'fp', { owner: owner(2), leaseMs: 1000, reclaim: true })).toEqual({ status: 'first', fence: 1 });
    expect(await store.record('a', 'fp', 'out', { owner: owner(2) })).toBe(true);
    expect(await store.record('a', 'fp', 'out', { owner: owner(2) })).toBe(true);
    expect(store.outcomeBytes).toBe(3);
    clock.advance(9000);
    expect(await store.consume('a', clock.now() + 1000)).toBe(true);
  });

  it('the ledger begins when the store is created: a store made later (a restart) refuses states minted before it', async () => {
    const clock = fakeClock();
    const first = createMemoryStore({ now: clock.now });
    expect(first.epochMs).toBe(clock.now());
    const minted = clock.now();
    expect(await first.consume('s', minted + 60_000, { mintedAtMs: minted })).toBe(true);
    clock.advance(1);
    const restarted = createMemoryStore({ now: clock.now });
    expect(await codeOf(restarted.consume('s', minted + 60_000, { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
    expect(await codeOf(restarted.claim('s', minted + 60_000, 'fp', { mintedAtMs: minted - 1 }))).toBe('ERR_LEDGER_LOST');
    expect(await restarted.consume('t', minted + 60_000, { mintedAtMs: clock.now() })).toBe(true);
    await expect(restarted.consume('u', minted + 60_000, { mintedAtMs: Number.NaN })).rejects.toBeInstanceOf(TypeError);
  });

  it('every operation rejects ERR_STORE_UNAVAILABLE after close', async () => {
    const store = createMemoryStore();
    await store.close();
    for (const call of [store.time(), store.renew('a', owner(1), 10), store.release('a', owner(1)), store.record('a', 'fp', 'x')]) {
      expect(await codeOf(call)).toBe('ERR_STORE_UNAVAILABLE');
    }
  });
});

import { MrtrError } from '@mrtr/core';
import { expect, it } from 'vitest';
import { createMemoryStore } from '../src/index.js';

/** Deterministic PRNG (mulberry32) so a failure is reproducible from its seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The store must behave exactly like the naive model: an expiry not in the future is refused (ERR_STATE_EXPIRED),
 * an id is refused while live (`now <= exp`), and a new id is rejected with ERR_STORE_FULL exactly when
 * `maxEntries` ids are live — expired ones never count, live ones are never dropped.
 */
it.each([1, 2, 3, 4, 5, 6, 7, 8])('matches the reference model on a random workload (seed %i)', async (seed) => {
  const random = prng(seed);
  let t = 1_000_000;
  const maxEntries = 1 + Math.floor(random() * 64);
  const store = createMemoryStore({ maxEntries, now: () => t });
  const model = new Map<string, number>();
  const idSpace = maxEntries * 3;
  const seen = { true: 0, false: 0, full: 0, expired: 0 };
  for (let step = 0; step < 20_000; step++) {
    if (random() < 0.2) t += Math.floor(random() * 20);
    const id = `id${Math.floor(random() * idSpace)}`;
    const exp = t + Math.floor(random() * 200) - 5;

    let expected: boolean | 'ERR_STORE_FULL' | 'ERR_STATE_EXPIRED';
    const held = model.get(id);
    if (exp <= t) expected = 'ERR_STATE_EXPIRED';
    else if (held !== undefined && held >= t) expected = false;
    else {
      let live = 0;
      for (const [key, e] of model) if (e >= t && key !== id) live++;
      if (live >= maxEntries) expected = 'ERR_STORE_FULL';
      else {
        model.set(id, exp);
        expected = true;
      }
    }

    let actual: boolean | string;
    try {
      actual = await store.consume(id, exp);
    } catch (error) {
      if (!MrtrError.is(error)) throw error;
      actual = error.code;
    }
    if (actual !== expected) {
      expect.fail(`seed ${seed} step ${step}: consume(${id}, t+${exp - t}) gave ${String(actual)}, model ${String(expected)}`);
    }
    expect(store.size).toBeLessThanOrEqual(maxEntries);
    if (actual === true) seen.true++;
    else if (actual === false) seen.false++;
    else if (actual === 'ERR_STORE_FULL') seen.full++;
    else seen.expired++;
  }
  // The workload must exercise all four outcomes, or the comparison proves little.
  expect(seen.true).toBeGreaterThan(100);
  expect(seen.false).toBeGreaterThan(100);
  expect(seen.full).toBeGreaterThan(100);
  expect(seen.expired).toBeGreaterThan(100);
});

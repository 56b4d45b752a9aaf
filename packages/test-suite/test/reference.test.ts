// The reference implementations that docs/writing-a-codec.md and docs/writing-a-store.md show, certified
// by the compliance suites in the normal test run.
import { MrtrError } from '@mrtr/core';
import { describe, expect, it } from 'vitest';
import { createExampleHmacCodec } from '../reference/hmac-codec.js';
import { createExampleMemoryStore } from '../reference/memory-store.js';
import { codecCompliance, storeCompliance } from '../src/index.js';

describe('reference codec (docs/writing-a-codec.md)', () => {
  codecCompliance(it, (keys) => createExampleHmacCodec(keys), {
    name: 'example-hmac',
    factoryWithCap: (keys, maxTokenBytes) => createExampleHmacCodec(keys, { maxTokenBytes }),
    report: () => {},
  });
});

describe('reference store (docs/writing-a-store.md)', () => {
  let t = 1_000_000;
  const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
  storeCompliance(it, ({ namespace: _one, ...o }) => createExampleMemoryStore({ ...o, now: clock.now }), {
    name: 'example-memory',
    clock,
    sharedBackend: false,
  });

  it('reports a closed store as unavailable and a full one as full, never true', async () => {
    const store = createExampleMemoryStore({ maxEntries: 2, now: clock.now });
    expect(await store.consume('a', clock.now() + 10)).toBe(true);
    expect(await store.consume('b', clock.now() + 1000)).toBe(true);
    await expect(store.consume('c', clock.now() + 1000)).rejects.toMatchObject({ code: 'ERR_STORE_FULL' });
    clock.advance(11); // 'a' has expired: its room is reclaimed
    expect(await store.consume('c', clock.now() + 1000)).toBe(true);
    await store.close();
    const closed = await store.consume('d', clock.now() + 1000).catch((error: unknown) => error);
    expect(MrtrError.is(closed) && closed.code).toBe('ERR_STORE_UNAVAILABLE');
  });
});

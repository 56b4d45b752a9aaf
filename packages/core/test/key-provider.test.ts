// The refreshing ring: a KeyProvider loads a key set, follows each key's schedule (publish, then seal from notBefore,
// then gone at notAfter), refreshes on a timer and on demand, keeps the last good ring when a refresh fails, and
// refuses a known kid that comes back with another secret. The guard reads the ring in force per operation.
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createStateGuard, KeyProvider, type KeyRing, MrtrError } from '../src/index.js';
import type { KeySetInput, ScheduledKey } from '../src/entry-keys.js';
import { fakeClock, req, testCodec, testStore } from './helpers.js';

const key = (kid: string, schedule: Partial<ScheduledKey> = {}): ScheduledKey => ({ kid, secret: randomBytes(32), ...schedule });
const codeOf = (e: unknown) => (MrtrError.is(e) ? e.code : e);

/** A source whose answer the test sets (or makes fail). */
function source(initial: KeySetInput) {
  let value: KeySetInput | Error = initial;
  let reads = 0;
  return {
    set: (v: KeySetInput | Error) => void (value = v),
    get reads() {
      return reads;
    },
    load: async () => {
      reads++;
      if (value instanceof Error) throw value;
      return value;
    },
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('KeyProvider', () => {
  it('refuses to start on a failing source, an invalid set or a set with no key that may seal now', async () => {
    const clock = fakeClock();
    const failing = KeyProvider.create({ load: () => Promise.reject(new Error('AccessDenied')), refreshMs: 0 });
    await expect(failing).rejects.toMatchObject({ code: 'ERR_KEY_SOURCE', cause: { message: 'AccessDenied' } });
    await expect(KeyProvider.create({ load: () => '', refreshMs: 0 })).rejects.toMatchObject({ code: 'ERR_KEY_SOURCE' });
    await expect(KeyProvider.create({ load: () => 'k1:short', refreshMs: 0 })).rejects.toMatchObject({ code: 'ERR_KEY_SOURCE' });
    const later = [key('k1', { notBefore: clock.now() + 1 })];
    await expect(KeyProvider.create({ load: () => later, refreshMs: 0, now: clock.now })).rejects.toMatchObject({
      code: 'ERR_KEYS_UNAVAILABLE',
    });
    await expect(KeyProvider.create({ load: 'k1' as never })).rejects.toThrow(TypeError);
    await expect(KeyProvider.create({ load: () => [key('k1')], refreshMs: -1 })).rejects.toThrow(RangeError);
  });

  it('follows the schedule: a published key opens before its notBefore, seals from it, and is gone at its notAfter', async () => {
    const clock = fakeClock();
    const t0 = clock.now();
    const provider = await KeyProvider.create({
      load: () => [key('k1', { notAfter: t0 + 2_000 }), key('k2', { notBefore: t0 + 1_000 })],
      refreshMs: 0,
      now: clock.now,
    });
    const ring = provider.keys;
    expect([ring.refreshing, ring.primaryKid, ring.kids]).toEqual([true, 'k1', ['k1', 'k2']]);
    const before = ring.current();
    expect(ring.current()).toBe(before); // the same object while nothing changes: nothing allocated per operation
    expect(before.refreshing).toBe(false);
    clock.advance(999);
    expect(ring.current()).toBe(before);
    clock.advance(1);
    expect([ring.primaryKid, ring.kids]).toEqual(['k2', ['k2', 'k1']]);
    clock.advance(1_000);
    expect([ring.primaryKid, ring.kids, ring.has('k1')]).toEqual(['k2', ['k2'], false]);
    expect(ring.subkey('k1', 'x')).toBeUndefined();
    // A clock that goes back is read again, not trusted to the last window.
    clock.set(t0);
    expect(ring.primaryKid).toBe('k1');
  });

  it('with every key gone, refuses to seal or open (ERR_KEYS_UNAVAILABLE), never falls back', async () => {
    const clock = fakeClock();
    const provider = await KeyProvider.create({ load: () => [key('k1', { notAfter: clock.now() + 10 })], refreshMs: 0, now: clock.now });
    const guard = createStateGuard({ keys: provider.keys, codec: testCodec, audience: 'a', now: clock.now });
    const token = await guard.mint({ x: 1 }, req());
    clock.advance(10);
    expect(() => provider.keys.current()).toThrow(expect.objectContaining({ code: 'ERR_KEYS_UNAVAILABLE' }));
    await expect(guard.verify(token, req())).rejects.toMatchObject({ code: 'ERR_KEYS_UNAVAILABLE' });
    // A guard is not even built on such a ring.
    expect(() => createStateGuard({ keys: provider.keys, codec: testCodec, audience: 'a' })).toThrow(
      expect.objectContaining({ code: 'ERR_KEYS_UNAVAILABLE' }),
    );
    await expect(guard.mint({ x: 1 }, req())).rejects.toMatchObject({ code: 'ERR_KEYS_UNAVAILABLE' });
    await expect(guard.open('k1.e30.x', req())).rejects.toMatchObject({ code: 'ERR_KEYS_UNAVAILABLE' });
  });

  it('refreshes on demand: reports a change, keeps the last good ring on a failure and tells onError', async () => {
    const k1 = key('k1');
    const src = source([k1]);
    const errors: unknown[] = [];
    const changes: string[][] = [];
    const provider = await KeyProvider.create({
      load: src.load,
      refreshMs: 0,
      onError: (e) => errors.push(codeOf(e)),
      onChange: (keys) => changes.push([...keys.kids]),
    });
    const guard = createStateGuard({ keys: provider.keys, codec: testCodec, audience: 'a' });
    const token = await guard.mint({ n: 1 }, req());
    expect(await provider.refresh()).toBe(false);

    const k2 = key('k2');
    src.set([k2, k1]);
    expect(await provider.refresh()).toBe(true);
    expect(changes).toEqual([['k2', 'k1']]);
    expect((await guard.mint({ n: 2 }, req())).startsWith('k2.')).toBe(true);

    // Failures: each keeps k2 + k1 in force.
    const failures: [KeySetInput | Error, string][] = [
      [new Error('throttled'), 'ERR_KEY_SOURCE'],
      ['k3:not-base64!', 'ERR_KEY_SOURCE'],
      ['', 'ERR_KEY_SOURCE'],
      [[key('k3', { notBefore: Date.now() + 3_600_000 })], 'ERR_KEYS_UNAVAILABLE'],
      [[{ kid: 'k1', secret: randomBytes(32) }, k2], 'ERR_KEY_CONFLICT'],
    ];
    for (const [value, code] of failures) {
      src.set(value);
      await expect(provider.refresh()).rejects.toMatchObject({ code });
    }
    expect(errors).toEqual(failures.map(([, code]) => code));
    expect(provider.keys.kids).toEqual(['k2', 'k1']);
    expect(await guard.open(token, req())).toMatchObject({ kid: 'k1' });

    // A kid that left keeps its secret for good: coming back with another one is refused too, naming the kid.
    src.set([k2]);
    expect(await provider.refresh()).toBe(true);
    src.set([k2, { kid: 'k1', secret: randomBytes(32) }]);
    await expect(provider.refresh()).rejects.toMatchObject({ code: 'ERR_KEY_CONFLICT', kid: 'k1' });
    src.set([k2, k1]);
    expect(await provider.refresh()).toBe(true);
    provider.close();
    await expect(provider.refresh()).rejects.toThrow(TypeError);
  });

  it('refreshes on its timer, concurrent refreshes share one read, and close stops the timer', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const src = source([key('k1')]);
    const provider = await KeyProvider.create({ load: src.load, refreshMs: 60_000 });
    expect(src.reads).toBe(1);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(src.reads).toBe(2);
    src.set([key('k2'), key('k1')]);
    await expect(provider.refresh()).rejects.toMatchObject({ code: 'ERR_KEY_CONFLICT' }); // k1 with a new secret
    const reads = src.reads;
    await Promise.all([provider.refresh().catch(() => {}), provider.refresh().catch(() => {})]);
    expect(src.reads).toBe(reads + 1);
    provider.close();
    provider.close();
    await vi.advanceTimersByTimeAsync(600_000);
    expect(src.reads).toBe(reads + 1);
  });
});

describe('the guard on a refreshing ring', () => {
  it('takes only a codec factory, and rebuilds the codec only when the ring in force changes', async () => {
    const clock = fakeClock();
    const src = source([key('k1')]);
    const provider = await KeyProvider.create({ load: src.load, refreshMs: 0, now: clock.now });
    expect(() => createStateGuard({ keys: provider.keys, codec: testCodec(provider.keys.current()), audience: 'a' })).toThrow(
      /codec factory/,
    );
    const built: KeyRing[] = [];
    const factory = (ring: KeyRing) => {
      built.push(ring);
      return testCodec(ring);
    };
    const guard = createStateGuard({ keys: provider.keys, codec: factory, audience: 'a', now: clock.now, store: testStore(clock.now) });
    for (let i = 0; i < 20; i++) await guard.open(await guard.mint({ i }, req()), req());
    expect(built.length).toBe(1);
    src.set([key('k2', { notBefore: clock.now() + 1_000 }), ...((await src.load()) as ScheduledKey[])]);
    await provider.refresh();
    const published = await guard.mint({ n: 1 }, req());
    expect(built.length).toBe(2);
    expect(published.startsWith('k1.')).toBe(true); // k2 opens, but does not seal before its notBefore
    clock.advance(1_000);
    const rotated = await guard.mint({ n: 2 }, req());
    expect(rotated.startsWith('k2.')).toBe(true);
    expect(built.length).toBe(3);
    expect(await guard.open(published, req())).toMatchObject({ kid: 'k1' });
    expect(guard.codec.keys).toBe(provider.keys);
  });
});

import { describe, expect, it } from 'vitest';
import { createStateGuard, generateKey, KeyRing, MrtrError, type StateCodec, type StateGuardOptions } from '../src/index.js';
import { andThen, isPromiseLike } from '../src/entry-codec.js';
import { fakeClock, req, testCodec, testStore } from './helpers.js';

// Issue 22: one Awaitable-typed surface. A codec (and core's crypto) may answer now or later; the branching between the
// two lives in core/src/crypto/awaitable.ts, and the guard behaves the same either way.
/** An object with a `then` member (built with defineProperty: a thenable on purpose). */
const withThen = (then: unknown): object => Object.defineProperty({}, 'then', { value: then, enumerable: true });

describe('andThen / isPromiseLike', () => {
  it('runs the continuation now on a plain value, with no microtask', () => {
    let ran = false;
    const out = andThen(2, (n) => {
      ran = true;
      return n * 3;
    });
    expect(ran).toBe(true);
    expect(out).toBe(6);
  });

  it('chains a promise, and any thenable, and leaves errors of the continuation alone', async () => {
    await expect(andThen(Promise.resolve(2), (n) => n * 3)).resolves.toBe(6);
    const thenable = withThen((ok: (v: number) => void) => ok(5));
    await expect(andThen(thenable as PromiseLike<number>, (n) => n + 1)).resolves.toBe(6);
    const seen: unknown[] = [];
    const failing = andThen(
      Promise.resolve(1),
      () => {
        throw new Error('continuation');
      },
      (error) => {
        seen.push(error);
        return 0;
      },
    );
    await expect(failing).rejects.toThrow('continuation');
    expect(seen).toEqual([]);
    await expect(
      andThen(
        Promise.reject(new Error('source')),
        (n) => n,
        () => 'recovered',
      ),
    ).resolves.toBe('recovered');
  });

  it('tells promises and thenables from plain values', () => {
    expect(isPromiseLike(Promise.resolve(1))).toBe(true);
    expect(isPromiseLike(withThen(() => {}))).toBe(true);
    for (const value of [null, undefined, 0, 'then', withThen(1), { claims: {}, kid: 'k1' }]) expect(isPromiseLike(value)).toBe(false);
  });
});

function guardWith(codec: StateGuardOptions['codec'], keys: KeyRing) {
  const clock = fakeClock();
  return createStateGuard({ codec, keys, store: testStore(clock.now), audience: 'aud-1', now: clock.now });
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
  return 'accepted';
}

describe('the codec contract: sync or async, unseal', () => {
  const asyncCodec = (keys: KeyRing): StateCodec => {
    const inner = testCodec(keys);
    return { ...inner, seal: async (claims) => inner.seal(claims), unseal: async (token) => inner.unseal(token) };
  };

  for (const [name, factory] of [
    ['synchronous', testCodec],
    ['promise-returning', asyncCodec],
  ] as const) {
    it(`a ${name} codec: mint, verify, open, replay and a tampered token answer alike`, async () => {
      const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
      const guard = guardWith(factory, keys);
      const token = await guard.mint({ step: 1 }, req());
      expect((await guard.verify(token, req())).data).toEqual({ step: 1 });
      expect((await guard.open(token, req())).data).toEqual({ step: 1 });
      expect(await codeOf(guard.open(token, req()))).toBe('ERR_STATE_REPLAYED');
      expect(await codeOf(guard.verify(`${token.slice(0, -2)}AA`, req()))).toBe('ERR_STATE_INTEGRITY');
      expect(await codeOf(guard.verify(token, { ...req(), principal: 'mallory' }))).toBe('ERR_STATE_PRINCIPAL');
    });
  }

  it('a codec failure that is not an MrtrError is ERR_STATE_MALFORMED, thrown or rejected', async () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const minted = await guardWith(testCodec, keys).mint({ step: 1 }, req());
    const throwing = (ring: KeyRing): StateCodec => ({
      ...testCodec(ring),
      unseal: () => {
        throw new Error('boom');
      },
    });
    const rejecting = (ring: KeyRing): StateCodec => ({
      ...testCodec(ring),
      unseal: async () => {
        throw new Error('boom');
      },
    });
    expect(await codeOf(guardWith(throwing, keys).verify(minted, req()))).toBe('ERR_STATE_MALFORMED');
    expect(await codeOf(guardWith(rejecting, keys).verify(minted, req()))).toBe('ERR_STATE_MALFORMED');
    const sealThrows = (ring: KeyRing): StateCodec => ({
      ...testCodec(ring),
      seal: () => {
        throw new Error('boom');
      },
    });
    const sealRejects = (ring: KeyRing): StateCodec => ({
      ...testCodec(ring),
      seal: async () => {
        throw new Error('boom');
      },
    });
    expect(await codeOf(guardWith(sealThrows, keys).mint({}, req()))).toBe('ERR_SEAL_FAILED');
    expect(await codeOf(guardWith(sealRejects, keys).mint({}, req()))).toBe('ERR_SEAL_FAILED');
  });

  it('uses a codec with unseal as it is, and refuses one without unseal at construction', () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const current = testCodec(keys);
    expect(guardWith(current, keys).codec).toBe(current);
    const { unseal, ...rest } = testCodec(keys);
    const openOnly = { ...rest, open: (token: string) => unseal(token) };
    expect(() => guardWith(openOnly as unknown as StateCodec, keys)).toThrow(/codec must be a codec factory or a StateCodec/);
    expect(() => guardWith(rest as unknown as StateCodec, keys)).toThrow(/codec must be a codec factory or a StateCodec/);
  });
});

import { generateKey, KeyRing, MrtrError } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { describe, expect, it } from 'vitest';
import { JWE_LIMITS, type JweCodecOptions, createCodecWithEngine } from '../src/codec.js';
import { engine as nodeEngine } from '../src/engine/node.js';
import type { JweEngine } from '../src/engine/types.js';
import { engine as webEngine } from '../src/engine/web.js';
import { createJweCodec } from '../src/index.js';
import { b64, cekOf, claimsOf, countingEngine, handToken, jwtOf, mrtrErrorOf } from './helpers.js';

const engines: [string, JweEngine<unknown>][] = [
  ['node', nodeEngine as JweEngine<unknown>],
  ['web (jose)', webEngine as JweEngine<unknown>],
];

describe('createJweCodec options', () => {
  const keys = KeyRing.generate();

  it('declares id, confidentiality and the default size cap', () => {
    const codec = createJweCodec(keys);
    expect(codec.id).toBe('jwe');
    expect(codec.confidential).toBe(true);
    expect(codec.maxTokenBytes).toBe(JWE_LIMITS.defaultMaxTokenBytes);
    expect(createJweCodec(keys, { maxTokenBytes: JWE_LIMITS.minMaxTokenBytes }).maxTokenBytes).toBe(JWE_LIMITS.minMaxTokenBytes);
    expect(createJweCodec(keys, { maxTokenBytes: JWE_LIMITS.maxMaxTokenBytes }).maxTokenBytes).toBe(JWE_LIMITS.maxMaxTokenBytes);
  });

  it('throws labelled TypeErrors and RangeErrors for bad options at construction', () => {
    const bad = (ring: unknown, options?: unknown) => () => createJweCodec(ring as KeyRing, options as JweCodecOptions);
    expect(bad(undefined)).toThrow(/the first argument must be a KeyRing/);
    expect(bad({ keys })).toThrow(/the first argument must be a KeyRing/);
    expect(bad({})).toThrow(TypeError);
    expect(bad('k1:abc')).toThrow(TypeError);
    expect(bad(keys, null)).toThrow(TypeError);
    expect(bad(keys, { maxTokenByte: 100 })).toThrow(
      new TypeError('createJweCodec: unknown option "maxTokenByte"; did you mean "maxTokenBytes"?'),
    );
    expect(bad(keys, { maxTokenBytes: '16k' })).toThrow(TypeError);
    expect(bad(keys, { maxTokenBytes: 1000.5 })).toThrow(TypeError);
    expect(bad(keys, { maxTokenBytes: Number.NaN })).toThrow(TypeError);
    expect(bad(keys, { maxTokenBytes: JWE_LIMITS.minMaxTokenBytes - 1 })).toThrow(RangeError);
    expect(bad(keys, { maxTokenBytes: JWE_LIMITS.maxMaxTokenBytes + 1 })).toThrow(RangeError);
    expect(bad(keys, { maxTokenBytes: -1 })).toThrow(RangeError);
    for (const make of [bad(null), bad(keys, { maxTokenBytes: 1 })]) {
      try {
        make();
      } catch (error) {
        expect((error as Error).message).toMatch(/^createJweCodec: /);
      }
    }
  });
});

describe.each(engines)('JWE codec (%s engine)', (_name, engine) => {
  const make = (keys: KeyRing, maxTokenBytes?: number) =>
    createCodecWithEngine(engine, keys, maxTokenBytes === undefined ? undefined : { maxTokenBytes });

  it('round-trips times exactly as fractional NumericDates, and refuses times it cannot carry exactly', async () => {
    const codec = make(KeyRing.generate());
    const times = [0, 1, 7, 999, 1000, 1001, Date.now(), 253_402_300_799_999, 2 ** 48 + 1, 2 ** 50 - 1];
    for (let i = 0; i < 200; i++) times.push(Math.floor(Math.random() * 2 ** 50));
    for (const t of times) {
      const claims = claimsOf({ t }, { iat: t, exp: t + 1, flow: { id: 'f'.repeat(22), round: 1, deadline: t } });
      expect((await codec.unseal(await codec.seal(claims))).claims).toEqual(claims);
    }
    // A safe integer whose ms / 1000 does not come back as the same integer.
    const unrepresentable = 4_455_577_392_420_898;
    expect(Math.round((unrepresentable / 1000) * 1000)).not.toBe(unrepresentable);
    await mrtrErrorOf(() => codec.seal(claimsOf(null, { exp: unrepresentable })), 'ERR_STATE_MALFORMED');
  });

  it('refuses to seal claims that are not StateClaims or not JSON, with fixed messages', async () => {
    const codec = make(KeyRing.generate());
    const marker = 'SECRET-MARKER-7f3a';
    const circular: Record<string, unknown> = { [marker]: 1 };
    circular['self'] = circular;
    const bad: unknown[] = [
      undefined,
      null,
      'claims',
      {},
      { ...claimsOf(null), v: 2 },
      { ...claimsOf(null), iat: 1.5 },
      { ...claimsOf(null), jti: 'short' },
      { ...claimsOf(null), data: undefined },
      claimsOf(circular as never),
      claimsOf({ [marker]: 10n } as never),
      claimsOf({
        toJSON() {
          throw new Error(marker);
        },
      } as never),
    ];
    for (const claims of bad) {
      const error = await mrtrErrorOf(() => codec.seal(claims as StateClaims), 'ERR_STATE_MALFORMED');
      expect(error.message).not.toContain(marker);
      expect(error.cause).toBeUndefined();
    }
  });

  it('refuses to seal a token longer than maxTokenBytes (ERR_STATE_TOO_LARGE) and seals one that fits', async () => {
    const codec = make(KeyRing.generate(), 1024);
    await mrtrErrorOf(() => codec.seal(claimsOf('x'.repeat(1024))), 'ERR_STATE_TOO_LARGE');
    const token = await codec.seal(claimsOf('x'.repeat(200)));
    expect(token.length).toBeLessThanOrEqual(1024);
    await mrtrErrorOf(() => codec.unseal(`${token}${'A'.repeat(1025 - token.length)}`), 'ERR_STATE_TOO_LARGE');
  });

  it('uses a fresh 96-bit IV for every seal', async () => {
    const codec = make(KeyRing.generate());
    const claims = claimsOf({ same: true });
    const ivs = new Set<string>();
    for (let i = 0; i < 2000; i++) ivs.add((await codec.seal(claims)).split('.')[2]!);
    expect(ivs.size).toBe(2000);
  });

  it('imports each key once, also under concurrent first use', async () => {
    const keys = new KeyRing([
      { kid: 'k2', secret: generateKey() },
      { kid: 'k1', secret: generateKey() },
    ]);
    const counting = countingEngine(engine);
    const codec = createCodecWithEngine(counting.engine, keys);
    const claims = claimsOf({ n: 1 });
    const tokens = await Promise.all(Array.from({ length: 16 }, () => codec.seal(claims)));
    await Promise.all(tokens.map((token) => codec.unseal(token)));
    expect(counting.imports()).toBe(1);
    const old = handToken(cekOf(keys, 'k1'), {
      header: '{"alg":"dir","enc":"A256GCM","kid":"k1"}',
      plaintext: JSON.stringify(jwtOf(claims)),
    });
    await Promise.all(Array.from({ length: 8 }, () => codec.unseal(old)));
    expect(counting.imports()).toBe(2);
  });

  it('derives the CEK per kid with HKDF purpose mrtr/codec/jwe/v1 (another purpose does not open)', async () => {
    const keys = KeyRing.generate();
    const codec = make(keys);
    const plaintext = JSON.stringify(jwtOf(claimsOf({ n: 1 })));
    const header = '{"alg":"dir","enc":"A256GCM","kid":"k1"}';
    await codec.unseal(handToken(cekOf(keys), { header, plaintext }));
    const otherPurpose = keys.subkeySync('k1', 'mrtr/codec/aead/v1')!;
    await mrtrErrorOf(() => codec.unseal(handToken(otherPurpose, { header, plaintext })), 'ERR_STATE_INTEGRITY');
  });

  it('puts no payload, claim or key bytes into error messages', async () => {
    const keys = KeyRing.generate();
    const codec = make(keys);
    const marker = 'PAYLOAD-MARKER-91c2';
    const token = await codec.seal(claimsOf({ [marker]: marker }, { aud: marker }));
    const cek = b64(cekOf(keys));
    const attempts: unknown[] = [
      token.slice(0, -2) + (token.endsWith('AA') ? 'BA' : 'AA'),
      token.replace('.', '.AAAA'),
      `${token}.`,
      make(KeyRing.generate()).seal(claimsOf(marker)),
      42,
      'x'.repeat(JWE_LIMITS.defaultMaxTokenBytes + 1),
    ];
    for (const attempt of attempts) {
      const input = await attempt;
      const error = await mrtrErrorOf(() => codec.unseal(input as string));
      const needles = [marker, cek, ...(typeof input === 'string' ? input.split('.').filter((s) => s.length >= 8) : [])];
      for (const needle of needles) expect(error.message).not.toContain(needle);
      expect(error.message).toBe(new (error.constructor as new () => Error)().message);
    }
  });
});

describe('sync and async behaviour', () => {
  it('the node engine seals and opens synchronously and throws MrtrErrors synchronously', () => {
    const codec = createCodecWithEngine(nodeEngine, KeyRing.generate());
    const claims = claimsOf({ sync: true });
    const token = codec.seal(claims);
    expect(typeof token).toBe('string');
    expect(codec.unseal(token as string)).toEqual({ kid: 'k1', claims });
    expect(() => codec.unseal(42 as unknown as string)).toThrow(MrtrError);
    expect(() => codec.seal({} as StateClaims)).toThrow(MrtrError);
  });

  it('the web engine returns promises and rejects (never throws synchronously)', async () => {
    const codec = createCodecWithEngine(webEngine, KeyRing.generate());
    const claims = claimsOf({ async: true });
    const sealed = codec.seal(claims);
    expect(sealed).toBeInstanceOf(Promise);
    const opened = codec.unseal(await sealed);
    expect(opened).toBeInstanceOf(Promise);
    expect(await opened).toEqual({ kid: 'k1', claims });
    let badOpen: unknown;
    let badSeal: unknown;
    expect(() => {
      badOpen = codec.unseal(42 as unknown as string);
      badSeal = codec.seal({} as StateClaims);
    }).not.toThrow();
    await expect(badOpen).rejects.toBeInstanceOf(MrtrError);
    await expect(badSeal).rejects.toBeInstanceOf(MrtrError);
  });
});

describe('JWE_LIMITS', () => {
  it('is one frozen limits object, and the only export of the limits', async () => {
    const mod = await import('../src/index.js');
    expect(Object.isFrozen(mod.JWE_LIMITS)).toBe(true);
    expect(Object.keys(mod).filter((name) => name.endsWith('MAX_TOKEN_BYTES'))).toEqual([]);
  });
});

describe('unseal', () => {
  it('open is the same function as unseal, on both engines; the node engine answers synchronously', async () => {
    const keys = KeyRing.generate('k1');
    const claims = claimsOf({ n: 1 });
    for (const engine of [nodeEngine, webEngine] as JweEngine<unknown>[]) {
      const codec = createCodecWithEngine(engine, keys);
      expect('open' in codec).toBe(false);
      expect((await codec.unseal(await codec.seal(claims))).claims).toEqual(claims);
    }
    const sync = createCodecWithEngine(nodeEngine, keys);
    const token = sync.seal(claims);
    expect(typeof token).toBe('string');
    expect(sync.unseal(token as string)).toEqual({ claims, kid: 'k1' });
  });
});

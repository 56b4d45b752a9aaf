import { generateKey, KeyRing, MrtrError } from '@mrtr/core';
import type { OpenedToken, StateClaims } from '@mrtr/core/codec';
import { canonicalJson } from '@mrtr/core/encoding';
import { sampleClaims, samplePayloads } from '@mrtr/test-suite';
import { Packr, unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { AEAD_KEY_PURPOSE, AEAD_LIMITS, AEAD_MAX_NESTING, type AeadCodec, createAeadCodec as createAnyCodec } from '../src/index.js';

/** The Node build answers synchronously, and this file relies on it (the exported type covers both builds). */
type NodeAeadCodec = Omit<AeadCodec, 'seal' | 'unseal'> & {
  seal(claims: StateClaims): string;
  unseal(token: string): OpenedToken;
};
const createAeadCodec = (...args: Parameters<typeof createAnyCodec>): NodeAeadCodec => createAnyCodec(...args) as NodeAeadCodec;
import { claimsWithData, codeOf, mp, openRaw, prng, randomJson, sealRaw } from './helpers.js';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const packr = new Packr({ useRecords: false, variableMapSize: true, useToJSON: false });
const pack = (value: unknown): Uint8Array => packr.pack(value);

describe('wire format', () => {
  it('is x1.<kid>.<base64url(24-byte nonce ‖ XChaCha20-Poly1305(msgpack claims) ‖ 16-byte tag)>', () => {
    const keys = KeyRing.generate('k1');
    const codec = createAeadCodec(keys);
    const claims = sampleClaims({ hello: 'world' });
    const token = codec.seal(claims);
    expect(token).toMatch(/^x1\.k1\.[A-Za-z0-9_-]+$/);
    const body = token.split('.')[2]!;
    const plaintext = openRaw(keys, token);
    expect(Buffer.from(body, 'base64url')).toHaveLength(24 + plaintext.length + 16);
    // 6 + ⌈4(m + 40)/3⌉ characters for m bytes of MessagePack and a 2-character kid (README).
    expect(token).toHaveLength(6 + Math.ceil((4 * (plaintext.length + 40)) / 3));
    expect(unpack(plaintext)).toEqual(claims);
    expect(codec.id).toBe('aead');
    expect(codec.confidential).toBe(true);
    expect(codec.maxTokenBytes).toBe(AEAD_LIMITS.defaultMaxTokenBytes);
  });

  it('opens a token built by hand from the documented format', () => {
    const keys = KeyRing.generate('k1');
    const codec = createAeadCodec(keys);
    const claims = sampleClaims([1, 'two', { three: 3 }]);
    const opened = codec.unseal(sealRaw(keys, 'k1', pack(claims)));
    expect(opened).toEqual({ claims, kid: 'k1' });
  });

  it('draws a fresh nonce per seal', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'));
    const claims = sampleClaims({ same: true });
    const nonces = new Set<string>();
    for (let i = 0; i < 200; i++) nonces.add(Buffer.from(codec.seal(claims).split('.')[2]!, 'base64url').subarray(0, 24).toString('hex'));
    expect(nonces.size).toBe(200);
  });

  it('is never longer than the HMAC token for the same claims', () => {
    const aead = createAeadCodec(KeyRing.generate('k1'));
    // @mrtr/codec-hmac's token: "m1.k1." + base64url(JSON) + "." + 43 characters of MAC.
    const hmacLength = (claims: StateClaims): number => 6 + Buffer.from(JSON.stringify(claims)).toString('base64url').length + 1 + 43;
    for (const payload of [...samplePayloads(), {}, { tool: 'delete_files', args: { paths: ['/srv/app/tmp/cache-1'] }, step: 1 }]) {
      const claims = sampleClaims(payload);
      expect(aead.seal(claims).length).toBeLessThanOrEqual(hmacLength(claims));
    }
  });
});

describe('version and kid are bound as associated data', () => {
  it('rejects a kid swapped to another kid with the same secret', () => {
    const secret = generateKey();
    const keys = new KeyRing([
      { kid: 'k1', secret },
      { kid: 'k2', secret },
    ]);
    // Same secret and purpose → same subkey: only the associated data tells the two apart.
    expect(keys.subkeySync('k1', AEAD_KEY_PURPOSE)).toEqual(keys.subkeySync('k2', AEAD_KEY_PURPOSE));
    const codec = createAeadCodec(keys);
    const token = codec.seal(sampleClaims({ n: 1 }));
    expect(codec.unseal(token).kid).toBe('k1');
    expect(codeOf(() => codec.unseal(token.replace('x1.k1.', 'x1.k2.')))).toBe('ERR_STATE_INTEGRITY');
  });

  it('rejects ciphertext sealed under other associated data', () => {
    const keys = KeyRing.generate('k1');
    const codec = createAeadCodec(keys);
    const plaintext = pack(sampleClaims({ n: 1 }));
    expect(codec.unseal(sealRaw(keys, 'k1', plaintext)).kid).toBe('k1');
    for (const ad of ['x0.k1', 'x1.k2', 'x1', 'k1', '', 'x1.k1.']) {
      expect(codeOf(() => codec.unseal(sealRaw(keys, 'k1', plaintext, { ad })))).toBe('ERR_STATE_INTEGRITY');
    }
    // Authentic under its own version tag, but not this format.
    expect(codeOf(() => codec.unseal(sealRaw(keys, 'k1', plaintext, { version: 'x2' })))).toBe('ERR_STATE_MALFORMED');
  });

  it('derives the key per purpose: the raw secret does not decrypt', () => {
    const secret = generateKey();
    const keys = new KeyRing([{ kid: 'k1', secret }]);
    const raw = new KeyRing([{ kid: 'k1', secret }]);
    // A ring whose "subkey" is the raw secret: a codec that skipped HKDF would interoperate with it.
    const rawRing = Object.assign(Object.create(raw) as KeyRing, {
      has: (kid: string) => raw.has(kid),
      subkey: () => Buffer.from(secret, 'base64url'),
      subkeySync: () => Buffer.from(secret, 'base64url'),
    });
    const token = createAeadCodec(keys).seal(sampleClaims(1));
    expect(codeOf(() => createAeadCodec(rawRing).unseal(token))).toBe('ERR_STATE_INTEGRITY');
  });
});

describe('strict format', () => {
  const keys = KeyRing.generate('k1');
  const codec = createAeadCodec(keys);

  it('rejects stray bits in the last base64url character although they decode to the same bytes', () => {
    let token = '';
    for (let i = 0; token === '' || token.length % 4 === 0; i++) token = codec.seal(sampleClaims('x'.repeat(i)));
    const body = token.split('.')[2]!;
    const rest = body.length % 4;
    const last = ALPHABET.indexOf(body.at(-1)!);
    const other = body.slice(0, -1) + ALPHABET[last | (rest === 2 ? 0x0f : 0x03)]!;
    expect(other).not.toBe(body);
    expect(Buffer.from(other, 'base64url')).toEqual(Buffer.from(body, 'base64url'));
    expect(codeOf(() => codec.unseal(token.replace(body, other)))).toBe('ERR_STATE_MALFORMED');
  });

  it.each([
    ['padding', (t: string) => `${t}=`],
    ['a standard-alphabet character', (t: string) => `${t.slice(0, 20)}+${t.slice(21)}`],
    ['a fourth segment', (t: string) => `${t.slice(0, 30)}.${t.slice(30)}`],
    ['no version', (t: string) => t.slice(3)],
    ['another version', (t: string) => `m1${t.slice(2)}`],
    ['an empty kid', (t: string) => t.replace('x1.k1.', 'x1..')],
    ['a kid with a bad character', (t: string) => t.replace('x1.k1.', 'x1.k+.')],
    ['a kid of 33 characters', (t: string) => t.replace('x1.k1.', `x1.${'k'.repeat(33)}.`)],
    ['a body too short for nonce, tag and one byte', (t: string) => t.slice(0, 6 + 54)],
  ])('rejects a token with %s as malformed', (_name, mutate) => {
    const token = codec.seal(sampleClaims({ n: 1 }));
    expect(codeOf(() => codec.unseal(mutate(token)))).toBe('ERR_STATE_MALFORMED');
  });

  it('checks the format before the kid', () => {
    const token = codec.seal(sampleClaims({ n: 1 }));
    expect(codeOf(() => codec.unseal(token.replace('x1.k1.', 'x1.k7.')))).toBe('ERR_KEY_UNKNOWN');
    expect(codeOf(() => codec.unseal(`${token.replace('x1.k1.', 'x1.k7.')}=`))).toBe('ERR_STATE_MALFORMED');
  });

  it('refuses oversize input before looking at it', () => {
    const small = createAeadCodec(keys, { maxTokenBytes: 1000 });
    const token = small.seal(sampleClaims({ n: 1 }));
    expect(codeOf(() => small.unseal(token + 'A'.repeat(1001 - token.length)))).toBe('ERR_STATE_TOO_LARGE');
    expect(codeOf(() => small.unseal('\ud800'.repeat(1001)))).toBe('ERR_STATE_TOO_LARGE');
    expect(codeOf(() => small.unseal('x'.repeat(1000)))).toBe('ERR_STATE_MALFORMED');
  });
});

describe('bounded, prototype-safe unpacking of authentic plaintext', () => {
  const keys = KeyRing.generate('k1');
  const codec = createAeadCodec(keys);
  const envelope = sampleClaims(null);
  const withData = (dataBytes: Uint8Array | number[]): string =>
    sealRaw(keys, 'k1', claimsWithData(envelope, Uint8Array.from(dataBytes), pack));

  it('the envelope helper builds valid claims', () => {
    expect(codec.unseal(withData(mp(0x81, 'a', 0x01))).claims.data).toEqual({ a: 1 });
  });

  it.each([
    ['array32 declaring 2^32-1 elements', [0xdd, 0xff, 0xff, 0xff, 0xff]],
    ['map32 declaring 2^32-1 entries', [0xdf, 0xff, 0xff, 0xff, 0xff]],
    ['str32 declaring 2^32-1 bytes', [0xdb, 0xff, 0xff, 0xff, 0xff]],
    ['array16 declaring 65535 elements', [0xdc, 0xff, 0xff]],
    ['bin32 declaring 2^32-1 bytes', [0xc6, 0xff, 0xff, 0xff, 0xff]],
    ['ext32 declaring 2^32-1 bytes', [0xc9, 0xff, 0xff, 0xff, 0xff, 0x01]],
    ['a msgpackr record definition', [0xd4, 0x72, 0x40]],
    ['a timestamp', [0xd6, 0xff, 0, 0, 0, 0]],
    ['undefined (fixext 0)', [0xd4, 0, 0]],
    ['float32', [0xca, 0x3f, 0x80, 0, 0]],
    ['uint64', [0xcf, 0, 0, 0, 0, 0, 0, 0, 1]],
  ])('refuses %s as malformed', (_name, bytes) => {
    expect(codeOf(() => codec.unseal(withData(bytes)))).toBe('ERR_STATE_MALFORMED');
  });

  it('refuses 10 000 levels of nesting as malformed (no stack overflow)', () => {
    const deep = createAeadCodec(keys, { maxTokenBytes: AEAD_LIMITS.maxMaxTokenBytes });
    const bytes = [...new Array(10_000).fill(0x91), 0xc0];
    expect(codeOf(() => deep.unseal(withData(bytes)))).toBe('ERR_STATE_MALFORMED');
  });

  it(`seals and opens data nested up to the limit (${AEAD_MAX_NESTING} containers including the claims)`, () => {
    const nest = (levels: number): unknown => {
      let value: unknown = 0;
      for (let i = 0; i < levels; i++) value = [value];
      return value;
    };
    const fits = sampleClaims(nest(AEAD_MAX_NESTING - 1) as never);
    expect(codec.unseal(codec.seal(fits)).claims).toEqual(fits);
    // One level more: seal refuses it, and an authentic token carrying it does not open.
    expect(() => codec.seal(sampleClaims(nest(AEAD_MAX_NESTING) as never))).toThrow(TypeError);
    const tooDeep = [...new Array(AEAD_MAX_NESTING).fill(0x91), 0x00];
    expect(codeOf(() => codec.unseal(withData(tooDeep)))).toBe('ERR_STATE_MALFORMED');
    expect(codec.unseal(withData(tooDeep.slice(1))).claims.data).toEqual(nest(AEAD_MAX_NESTING - 1));
  });

  it('keeps __proto__ and constructor keys as own data and never touches prototypes', () => {
    const bytes = mp(
      0x83,
      '__proto__',
      0x81,
      'polluted',
      0xc3,
      'constructor',
      0x81,
      'prototype',
      0x81,
      'polluted',
      0xc3,
      'toString',
      'data',
    );
    const { claims } = codec.unseal(withData(bytes));
    const data = claims.data as Record<string, unknown>;
    expect(Object.getPrototypeOf(data)).toBe(Object.prototype);
    expect(Object.keys(data)).toEqual(['__proto__', 'constructor', 'toString']);
    expect(Object.getOwnPropertyDescriptor(data, '__proto__')?.value).toEqual({ polluted: true });
    expect((data as { polluted?: unknown }).polluted).toBeUndefined();
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    // The claims envelope itself may carry __proto__ too: still only data.
    const hostile = sealRaw(keys, 'k1', pack(JSON.parse(`{"__proto__":{"v":1},${JSON.stringify(envelope).slice(1)}`)));
    const opened = codec.unseal(hostile).claims as unknown as Record<string, unknown>;
    expect(Object.getPrototypeOf(opened)).toBe(Object.prototype);
    expect(Object.hasOwn(opened, '__proto__')).toBe(true);
  });

  it('refuses authentic plaintext that is not claims', () => {
    for (const value of [{}, [], 'claims', 1, null, { ...envelope, v: 2 }, { ...envelope, data: undefined }]) {
      expect(codeOf(() => codec.unseal(sealRaw(keys, 'k1', new Packr({ useRecords: false }).pack(value))))).toBe('ERR_STATE_MALFORMED');
    }
    expect(codeOf(() => codec.unseal(sealRaw(keys, 'k1', Buffer.concat([pack(envelope), Buffer.from([0xc0])]))))).toBe(
      'ERR_STATE_MALFORMED',
    );
  });

  it('throws only MrtrErrors for 5 000 authentic random and mutated plaintexts (seeded)', () => {
    const random = prng(7);
    const valid = Buffer.from(pack(sampleClaims({ list: [1, 'two', { three: [3] }], text: 'ünï' })));
    let accepted = 0;
    for (let i = 0; i < 5_000; i++) {
      let bytes: Uint8Array;
      if (i % 2 === 0) {
        bytes = Buffer.from(valid);
        for (let k = 0; k < 1 + Math.floor(random() * 3); k++) bytes[Math.floor(random() * bytes.length)] = Math.floor(random() * 256);
      } else {
        bytes = new Uint8Array(1 + Math.floor(random() * 200));
        for (let k = 0; k < bytes.length; k++) bytes[k] = Math.floor(random() * 256);
      }
      const code = codeOf(() => codec.unseal(sealRaw(keys, 'k1', bytes)));
      expect(['accepted', 'ERR_STATE_MALFORMED']).toContain(code);
      if (code === 'accepted') accepted++;
    }
    expect(accepted).toBeLessThan(5_000);
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
  });
});

describe('seal', () => {
  it('uses the primary key and caches one subkey per kid', () => {
    const ring = new KeyRing([
      { kid: 'k2', secret: generateKey() },
      { kid: 'k1', secret: generateKey() },
    ]);
    const calls: string[] = [];
    // A counting view of the ring (its prototype is the ring, so it is still a KeyRing).
    const keys = Object.assign(Object.create(ring) as KeyRing, {
      has: (kid: string) => ring.has(kid),
      subkey: (kid: string, purpose: string) => ring.subkey(kid, purpose),
      subkeySync: (kid: string, purpose: string) => {
        calls.push(`${kid}:${purpose}`);
        return ring.subkeySync(kid, purpose);
      },
    });
    const codec = createAeadCodec(keys);
    const k1Token = createAeadCodec(ring.without('k2')).seal(sampleClaims(1));
    for (let i = 0; i < 5; i++) {
      expect(codec.unseal(codec.seal(sampleClaims(i))).kid).toBe('k2');
      expect(codec.unseal(k1Token).kid).toBe('k1');
      expect(codeOf(() => codec.unseal(k1Token.replace('x1.k1.', 'x1.k3.')))).toBe('ERR_KEY_UNKNOWN');
    }
    expect(calls).toEqual([`k2:${AEAD_KEY_PURPOSE}`, `k1:${AEAD_KEY_PURPOSE}`]);
  });

  it('refuses to seal a token longer than maxTokenBytes', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'), { maxTokenBytes: 1000 });
    expect(codeOf(() => codec.seal(sampleClaims('x'.repeat(1000))))).toBe('ERR_STATE_TOO_LARGE');
    let longest = '';
    for (let n = 0; n < 1000; n += 7) {
      try {
        longest = codec.seal(sampleClaims('x'.repeat(n)));
      } catch (error) {
        expect(MrtrError.is(error) && error.code).toBe('ERR_STATE_TOO_LARGE');
        break;
      }
    }
    expect(longest.length).toBeLessThanOrEqual(1000);
    expect(longest.length).toBeGreaterThan(990);
  });

  it('gives data the JSON data model (toJSON, undefined members, non-finite numbers, class instances)', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'));
    class Point {
      x = 1;
      y = 2;
    }
    const data = {
      when: new Date(0),
      gone: undefined,
      list: [1, undefined, Number.NaN],
      point: new Point(),
      custom: { toJSON: () => 'c' },
    };
    const claims = sampleClaims(data as never);
    const expected = JSON.parse(JSON.stringify(data));
    expect(expected).toEqual({ when: '1970-01-01T00:00:00.000Z', list: [1, null, null], point: { x: 1, y: 2 }, custom: 'c' });
    expect(codec.unseal(codec.seal(claims)).claims.data).toEqual(expected);
  });

  it('opens every token it seals: 1 000 random JSON payloads (seeded)', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'));
    const next = randomJson(0xc0dec);
    for (let i = 0; i < 1000; i++) {
      const claims = sampleClaims(next() as never);
      expect(canonicalJson(codec.unseal(codec.seal(claims)).claims)).toBe(canonicalJson(claims));
    }
  });

  it('keeps null-prototype objects and plain data exactly', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'));
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { a: 1, b: ['x'] });
    const opened = codec.unseal(codec.seal(sampleClaims({ bare } as never))).claims.data as { bare: object };
    expect(opened.bare).toEqual({ a: 1, b: ['x'] });
    expect(Object.getPrototypeOf(opened.bare)).toBe(Object.prototype);
  });

  it('throws a TypeError for what JSON or UTF-8 cannot carry', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'));
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    for (const data of [10n, cyclic, 'lone \ud800 surrogate', { ['key \udc00']: 1 }, () => 1, undefined]) {
      expect(() => codec.seal(sampleClaims(data as never))).toThrow(TypeError);
    }
    for (const bad of [null, undefined, 'claims', {}, { ...sampleClaims(1), v: 2 }]) {
      expect(() => codec.seal(bad as unknown as StateClaims)).toThrow(TypeError);
    }
  });
});

describe('options', () => {
  const keys = KeyRing.generate('k1');

  it('accepts the documented range of maxTokenBytes', () => {
    expect(createAeadCodec(keys, { maxTokenBytes: AEAD_LIMITS.minMaxTokenBytes }).maxTokenBytes).toBe(AEAD_LIMITS.minMaxTokenBytes);
    expect(createAeadCodec(keys, { maxTokenBytes: AEAD_LIMITS.maxMaxTokenBytes }).maxTokenBytes).toBe(AEAD_LIMITS.maxMaxTokenBytes);
  });

  it.each([AEAD_LIMITS.minMaxTokenBytes - 1, AEAD_LIMITS.maxMaxTokenBytes + 1, 0, -1, 2 ** 40])(
    'refuses maxTokenBytes %s with a RangeError',
    (value) => {
      expect(() => createAeadCodec(keys, { maxTokenBytes: value })).toThrow(RangeError);
    },
  );

  it.each([1000.5, Number.NaN, Number.POSITIVE_INFINITY, '1000', null])('refuses maxTokenBytes %s with a TypeError', (value) => {
    expect(() => createAeadCodec(keys, { maxTokenBytes: value as number })).toThrow(TypeError);
  });

  it('refuses missing or wrong options with a TypeError', () => {
    for (const bad of [undefined, null, 'keys', {}, { keys }, 'k1:abc']) {
      expect(() => createAeadCodec(bad as never)).toThrow(TypeError);
    }
    expect(() => createAeadCodec(keys, null as never)).toThrow(TypeError);
    expect(() => createAeadCodec(keys, { maxTokenSize: 1000 } as never)).toThrow(
      new TypeError('createAeadCodec: unknown option "maxTokenSize"; did you mean "maxTokenBytes"?'),
    );
  });

  it('returns a frozen codec', () => {
    expect(Object.isFrozen(createAeadCodec(keys))).toBe(true);
  });
});

describe('AEAD_LIMITS', () => {
  it('is one frozen limits object, and the only export of the limits', async () => {
    const mod = await import('../src/index.js');
    expect(Object.isFrozen(mod.AEAD_LIMITS)).toBe(true);
    expect(Object.keys(mod).filter((name) => name.endsWith('MAX_TOKEN_BYTES'))).toEqual([]);
  });
});

describe('unseal', () => {
  it('the codec has unseal and no other name for it, and the Node build answers synchronously', () => {
    const codec = createAeadCodec(KeyRing.generate('k1'));
    expect('open' in codec).toBe(false);
    const claims = sampleClaims({ n: 1 });
    const token = codec.seal(claims);
    expect(typeof token).toBe('string');
    expect(codec.unseal(token).claims).toEqual(claims);
  });
});

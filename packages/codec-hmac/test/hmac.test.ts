import { createHmac } from 'node:crypto';
import { generateKey, KeyRing, MrtrError, type MrtrErrorCode } from '@mrtr/core';
import type { OpenedToken, StateClaims } from '@mrtr/core/codec';
import { sampleClaims } from '@mrtr/test-suite';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createHmacCodec as createAnyCodec, HMAC_KEY_PURPOSE, HMAC_LIMITS, type HmacCodec } from '../src/index.js';

/** The Node build answers synchronously, and this file relies on it (the exported type covers both builds). */
type NodeHmacCodec = Omit<HmacCodec, 'seal' | 'unseal'> & {
  seal(claims: StateClaims): string;
  unseal(token: string): OpenedToken;
};
const createHmacCodec = (...args: Parameters<typeof createAnyCodec>): NodeHmacCodec => createAnyCodec(...args) as NodeHmacCodec;

const B64 = /^[A-Za-z0-9_-]+$/;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

function codeOf(fn: () => unknown): MrtrErrorCode | 'accepted' | 'non-mrtr' {
  try {
    fn();
    return 'accepted';
  } catch (error) {
    return MrtrError.is(error) ? error.code : 'non-mrtr';
  }
}

/** Seals like the codec, but lets a test choose every part of the MACed text. */
function forge(keys: KeyRing, kid: string, signed: string): string {
  const key = keys.subkeySync(kid, HMAC_KEY_PURPOSE)!;
  return `${signed}.${createHmac('sha256', key).update(signed).digest('base64url')}`;
}

const b64json = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');

/** The same bytes, a different text: sets unused low bits of the last character (2 or 3 chars left over). */
function strayBits(segment: string): string {
  const rest = segment.length % 4;
  const last = ALPHABET.indexOf(segment.at(-1)!);
  const mask = rest === 2 ? 0x0f : 0x03;
  expect(rest === 2 || rest === 3).toBe(true);
  return segment.slice(0, -1) + ALPHABET[last | mask]!;
}

describe('wire format', () => {
  it('is m1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256 over "m1.<kid>.<body>")>', () => {
    const keys = KeyRing.generate('k1');
    const codec = createHmacCodec(keys);
    const claims = sampleClaims({ hello: 'world' });
    const token = codec.seal(claims);
    const parts = token.split('.');
    expect(parts).toHaveLength(4);
    const [version, kid, body, mac] = parts as [string, string, string, string];
    expect(version).toBe('m1');
    expect(kid).toBe('k1');
    expect(body).toMatch(B64);
    expect(mac).toMatch(B64);
    expect(mac).toHaveLength(43);
    // 50 + ⌈4n/3⌉ characters for n bytes of JSON and a 2-character kid (README).
    expect(token).toHaveLength(50 + Math.ceil((4 * Buffer.byteLength(JSON.stringify(claims))) / 3));
    // The payload is readable by anyone holding the token: this codec gives integrity only.
    expect(JSON.parse(Buffer.from(body, 'base64url').toString('utf8'))).toEqual(claims);
    expect(body).toBe(b64json(claims));
    const key = keys.subkeySync('k1', HMAC_KEY_PURPOSE)!;
    expect(mac).toBe(createHmac('sha256', key).update(`m1.k1.${body}`).digest('base64url'));
    expect(codec.id).toBe('hmac');
    expect(codec.confidential).toBe(false);
    expect(codec.maxTokenBytes).toBe(HMAC_LIMITS.defaultMaxTokenBytes);
  });

  it('derives the MAC key per purpose: the raw secret does not verify', () => {
    const secret = generateKey();
    const keys = new KeyRing([{ kid: 'k1', secret }]);
    const token = createHmacCodec(keys).seal(sampleClaims(1));
    const signed = token.slice(0, token.lastIndexOf('.'));
    const withRawSecret = createHmac('sha256', Buffer.from(secret, 'base64url')).update(signed).digest('base64url');
    expect(token.endsWith(`.${withRawSecret}`)).toBe(false);
  });
});

describe('version and kid are authenticated', () => {
  it('rejects a kid swapped to another kid with the same secret (the kid is inside the MAC)', () => {
    const secret = generateKey();
    const keys = new KeyRing([
      { kid: 'k1', secret },
      { kid: 'k2', secret },
    ]);
    // Same secret and purpose → same subkey: only the MAC over the kid tells the two apart.
    expect(keys.subkeySync('k1', HMAC_KEY_PURPOSE)).toEqual(keys.subkeySync('k2', HMAC_KEY_PURPOSE));
    const codec = createHmacCodec(keys);
    const token = codec.seal(sampleClaims({ n: 1 }));
    expect(token.startsWith('m1.k1.')).toBe(true);
    expect(codeOf(() => codec.unseal(token.replace('m1.k1.', 'm1.k2.')))).toBe('ERR_STATE_INTEGRITY');
  });

  it('rejects a MAC that does not cover the version and kid', () => {
    const keys = KeyRing.generate('k1');
    const codec = createHmacCodec(keys);
    const body = b64json(sampleClaims({ n: 1 }));
    const bodyOnly = forge(keys, 'k1', body).slice(body.length + 1);
    expect(codeOf(() => codec.unseal(`m1.k1.${body}.${bodyOnly}`))).toBe('ERR_STATE_INTEGRITY');
    const kidBody = forge(keys, 'k1', `k1.${body}`).slice(`k1.${body}`.length + 1);
    expect(codeOf(() => codec.unseal(`m1.k1.${body}.${kidBody}`))).toBe('ERR_STATE_INTEGRITY');
    // A correct MAC, but under another version tag, is not this format.
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m2.k1.${body}`)))).toBe('ERR_STATE_MALFORMED');
    // The control: the same construction with the right text opens.
    expect(codec.unseal(forge(keys, 'k1', `m1.k1.${body}`)).kid).toBe('k1');
  });
});

describe('strict canonical base64url', () => {
  const keys = KeyRing.generate('k1');
  const codec = createHmacCodec(keys);
  const claims = sampleClaims({ pad: 'ab' });
  const token = codec.seal(claims);
  const [, , body, mac] = token.split('.') as [string, string, string, string];

  it('rejects stray bits in the last character of the MAC (same bytes, other text)', () => {
    const other = strayBits(mac);
    expect(Buffer.from(other, 'base64url')).toEqual(Buffer.from(mac, 'base64url'));
    expect(codeOf(() => codec.unseal(`m1.k1.${body}.${other}`))).toBe('ERR_STATE_MALFORMED');
  });

  it('rejects stray bits in the last character of the body, even with a MAC over that text', () => {
    // Find claims whose body length leaves unused bits.
    let b = body;
    let i = 0;
    while (b.length % 4 === 0 || b.length % 4 === 1) b = b64json(sampleClaims({ pad: 'x'.repeat(++i) }));
    const other = strayBits(b);
    expect(Buffer.from(other, 'base64url')).toEqual(Buffer.from(b, 'base64url'));
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${b}`)))).toBe('accepted');
    // Even a MAC over the non-canonical text (only a key holder could make one) does not make it valid.
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${other}`)))).toBe('ERR_STATE_MALFORMED');
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${b}`).replace(`.${b}.`, `.${other}.`)))).toBe('ERR_STATE_MALFORMED');
  });

  it.each([
    ['padding', (s: string) => `${s}=`],
    ['standard alphabet +', (s: string) => `${s.slice(0, 5)}+${s.slice(6)}`],
    ['standard alphabet /', (s: string) => `${s.slice(0, 5)}/${s.slice(6)}`],
    ['space', (s: string) => `${s.slice(0, 5)} ${s.slice(6)}`],
    ['length 1 mod 4', (s: string) => s + 'A'.repeat((5 - (s.length % 4)) % 4 || 4)],
  ])('rejects a body with %s as malformed', (_name, mutate) => {
    expect(codeOf(() => codec.unseal(`m1.k1.${mutate(body)}.${mac}`))).toBe('ERR_STATE_MALFORMED');
  });

  it('classifies a malformed body as malformed even when the kid is unknown', () => {
    expect(codeOf(() => codec.unseal(`m1.k7.${body}=.${mac}`))).toBe('ERR_STATE_MALFORMED');
    expect(codeOf(() => codec.unseal(`m1.k7.${body}.${mac}`))).toBe('ERR_KEY_UNKNOWN');
  });

  it.each([
    ['no version', (t: string) => t.slice(3)],
    ['other version', (t: string) => `m0${t.slice(2)}`],
    ['empty kid', (t: string) => t.replace('m1.k1.', 'm1..')],
    ['kid with a bad character', (t: string) => t.replace('m1.k1.', 'm1.k!.')],
    ['kid of 33 characters', (t: string) => t.replace('m1.k1.', `m1.${'k'.repeat(33)}.`)],
    ['empty body', () => `m1.k1..${mac}`],
    ['short MAC', (t: string) => t.slice(0, -1)],
    ['long MAC', (t: string) => `${t}A`],
    ['five segments', (t: string) => t.replace('m1.k1.', 'm1.k1.AAAA.')],
  ])('rejects a token with %s', (_name, mutate) => {
    const code = codeOf(() => codec.unseal(mutate(token)));
    expect(['ERR_STATE_MALFORMED', 'ERR_STATE_INTEGRITY']).toContain(code);
  });

  it('accepts a 32-character kid', () => {
    const kid = 'K'.repeat(32);
    const ring = KeyRing.generate(kid);
    const c = createHmacCodec(ring);
    expect(c.unseal(c.seal(claims)).kid).toBe(kid);
  });
});

describe('order of checks', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('verifies the MAC before JSON.parse runs', () => {
    const keys = KeyRing.generate('k1');
    const codec = createHmacCodec(keys);
    const token = codec.seal(sampleClaims({ n: 1 }));
    const tampered = token.replace('m1.k1.e', 'm1.k1.f');
    expect(tampered).not.toBe(token);
    const parse = vi.spyOn(JSON, 'parse');
    expect(codeOf(() => codec.unseal(tampered))).toBe('ERR_STATE_INTEGRITY');
    expect(parse).not.toHaveBeenCalled();
    codec.unseal(token);
    expect(parse).toHaveBeenCalledTimes(1);
  });

  it('refuses oversize input before looking at it, whatever it contains', () => {
    const codec = createHmacCodec(KeyRing.generate('k1'), { maxTokenBytes: 1000 });
    const token = codec.seal(sampleClaims({ n: 1 }));
    expect(codeOf(() => codec.unseal(token + 'A'.repeat(1001 - token.length)))).toBe('ERR_STATE_TOO_LARGE');
    expect(codeOf(() => codec.unseal('\ud800'.repeat(1001)))).toBe('ERR_STATE_TOO_LARGE');
    expect(codeOf(() => codec.unseal('x'.repeat(1000)))).toBe('ERR_STATE_MALFORMED');
  });

  it('rejects authentic bytes that are not claims as malformed', () => {
    const keys = KeyRing.generate('k1');
    const codec = createHmacCodec(keys);
    const notJson = Buffer.from('{"v":1,').toString('base64url');
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${notJson}`)))).toBe('ERR_STATE_MALFORMED');
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${b64json({ v: 1 })}`)))).toBe('ERR_STATE_MALFORMED');
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${b64json([1, 2])}`)))).toBe('ERR_STATE_MALFORMED');
    const { data: _data, ...withoutData } = sampleClaims(1);
    expect(codeOf(() => codec.unseal(forge(keys, 'k1', `m1.k1.${b64json(withoutData)}`)))).toBe('ERR_STATE_MALFORMED');
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
    const codec = createHmacCodec(keys);
    const k1Token = createHmacCodec(ring.without('k2')).seal(sampleClaims(1));
    for (let i = 0; i < 5; i++) {
      expect(codec.unseal(codec.seal(sampleClaims(i))).kid).toBe('k2');
      expect(codec.unseal(k1Token).kid).toBe('k1');
      expect(codeOf(() => codec.unseal(k1Token.replace('m1.k1.', 'm1.k3.')))).toBe('ERR_KEY_UNKNOWN');
    }
    expect(calls).toEqual([`k2:${HMAC_KEY_PURPOSE}`, `k1:${HMAC_KEY_PURPOSE}`]);
  });

  it('refuses to seal a token longer than maxTokenBytes', () => {
    const codec = createHmacCodec(KeyRing.generate('k1'), { maxTokenBytes: 1000 });
    expect(codeOf(() => codec.seal(sampleClaims('x'.repeat(1000))))).toBe('ERR_STATE_TOO_LARGE');
    const fits = codec.seal(sampleClaims('x'));
    expect(fits.length).toBeLessThanOrEqual(1000);
  });

  it('throws a TypeError for values that are not StateClaims', () => {
    const codec = createHmacCodec(KeyRing.generate('k1'));
    for (const bad of [null, undefined, 'claims', {}, { ...sampleClaims(1), v: 2 }, { ...sampleClaims(1), data: undefined }]) {
      expect(() => codec.seal(bad as unknown as StateClaims)).toThrow(TypeError);
    }
  });

  it('follows JSON semantics for data (toJSON, undefined members)', () => {
    const codec = createHmacCodec(KeyRing.generate('k1'));
    const when = new Date(0);
    const claims = sampleClaims({ when, gone: undefined, list: [1] } as never);
    expect(codec.unseal(codec.seal(claims)).claims.data).toEqual({ when: '1970-01-01T00:00:00.000Z', list: [1] });
  });
});

describe('options', () => {
  const keys = KeyRing.generate('k1');

  it('accepts the documented range of maxTokenBytes', () => {
    expect(createHmacCodec(keys, { maxTokenBytes: HMAC_LIMITS.minMaxTokenBytes }).maxTokenBytes).toBe(HMAC_LIMITS.minMaxTokenBytes);
    expect(createHmacCodec(keys, { maxTokenBytes: HMAC_LIMITS.maxMaxTokenBytes }).maxTokenBytes).toBe(HMAC_LIMITS.maxMaxTokenBytes);
  });

  it.each([HMAC_LIMITS.minMaxTokenBytes - 1, HMAC_LIMITS.maxMaxTokenBytes + 1, 0, -1, 2 ** 40])(
    'refuses maxTokenBytes %s with a RangeError',
    (value) => {
      expect(() => createHmacCodec(keys, { maxTokenBytes: value })).toThrow(RangeError);
    },
  );

  it.each([1000.5, Number.NaN, Number.POSITIVE_INFINITY, '1000', null])('refuses maxTokenBytes %s with a TypeError', (value) => {
    expect(() => createHmacCodec(keys, { maxTokenBytes: value as number })).toThrow(TypeError);
  });

  it('refuses missing or wrong options with a TypeError', () => {
    for (const bad of [undefined, null, 'keys', {}, { keys }, 'k1:abc']) {
      expect(() => createHmacCodec(bad as never)).toThrow(TypeError);
    }
    expect(() => createHmacCodec(keys, null as never)).toThrow(TypeError);
    expect(() => createHmacCodec(keys, { maxTokenSize: 1000 } as never)).toThrow(
      new TypeError('createHmacCodec: unknown option "maxTokenSize"; did you mean "maxTokenBytes"?'),
    );
  });

  it('returns a frozen codec', () => {
    const codec = createHmacCodec(keys);
    expect(Object.isFrozen(codec)).toBe(true);
  });
});

describe('HMAC_LIMITS', () => {
  it('is one frozen limits object, and the only export of the limits', async () => {
    const mod = await import('../src/index.js');
    expect(Object.isFrozen(mod.HMAC_LIMITS)).toBe(true);
    expect(Object.keys(mod).filter((name) => name.endsWith('MAX_TOKEN_BYTES'))).toEqual([]);
  });
});

describe('unseal', () => {
  it('the codec has unseal and no other name for it, and the Node build answers synchronously', () => {
    const codec = createHmacCodec(KeyRing.generate('k1'));
    expect('open' in codec).toBe(false);
    const claims = sampleClaims({ n: 1 });
    const token = codec.seal(claims);
    expect(typeof token).toBe('string');
    expect(codec.unseal(token).claims).toEqual(claims);
  });
});

import { createHash, createHmac, hkdfSync } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cryptoProvider as node } from '../src/crypto/node.js';
import { cryptoProvider as web } from '../src/crypto/web.js';
import { generateKey, KeyRing, MrtrError } from '../src/index.js';
import { readTokenPrefix } from '../src/entry-codec.js';
import { base64urlDecode, base64urlEncode, canonicalJson, isCanonicalBase64url, randomBytes } from '../src/entry-encoding.js';
import { isServerFault, StateIntegrityError, StateReplayedError, StoreUnavailableError } from '../src/entry-errors.js';
import { MIN_KEY_BYTES } from '../src/entry-keys.js';
import { ownerValues } from '../src/entry-store.js';

describe('canonicalJson (RFC 8785)', () => {
  it('sorts keys by UTF-16 code units and formats numbers as ECMAScript does', () => {
    // RFC 8785 §3.2.3 sorting example and §3.2.2.3 number examples.
    const input = JSON.parse(
      '{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control","\\u00f6":"Latin Small Letter O With Diaeresis"}',
    );
    expect(canonicalJson(input)).toBe(
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
    );
    // biome-ignore lint/correctness/noPrecisionLoss: the RFC 8785 test vector is this exact literal
    expect(canonicalJson({ numbers: [333333333.33333329, 1e30, 4.5, 2e-3, 0.000001, 1e-7, -0] })).toBe(
      '{"numbers":[333333333.3333333,1e+30,4.5,0.002,0.000001,1e-7,0]}',
    );
    expect(canonicalJson({ b: undefined, a: [undefined, 'x\u2028'] })).toBe('{"a":[null,"x\u2028"]}');
  });

  it('is independent of key order and stable under JSON round trips', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = canonicalJson(value);
        expect(canonicalJson(JSON.parse(text))).toBe(text);
        expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(value)));
      }),
      { numRuns: 500 },
    );
  });

  it('refuses what JSON cannot carry', () => {
    expect(() => canonicalJson(Number.NaN)).toThrow(TypeError);
    expect(() => canonicalJson(1n)).toThrow(TypeError);
    expect(() => canonicalJson({ f: () => 1 })).toThrow(TypeError);
    let deep: unknown = 1;
    for (let i = 0; i < 200; i++) deep = [deep];
    expect(() => canonicalJson(deep)).toThrow(RangeError);
  });
});

describe('base64url', () => {
  it('round-trips and agrees between the node and web providers', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 100 }), (bytes) => {
        const a = node.base64urlEncode(bytes);
        expect(web.base64urlEncode(bytes)).toBe(a);
        expect(a).toBe(Buffer.from(bytes).toString('base64url'));
        expect([...(node.base64urlDecode(a) ?? [])]).toEqual([...bytes]);
        expect([...(web.base64urlDecode(a) ?? [])]).toEqual([...bytes]);
      }),
      { numRuns: 500 },
    );
  });

  it('decodes exactly the canonical texts, the same on node and web', () => {
    const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/= .é\u0000'.split('');
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: fc.constantFrom(...chars), maxLength: 40 }), fc.string({ maxLength: 12 })), (text) => {
        const canonical = isCanonicalBase64url(text);
        const fromNode = node.base64urlDecode(text);
        const fromWeb = web.base64urlDecode(text);
        expect(fromNode !== undefined).toBe(canonical);
        expect(fromWeb !== undefined).toBe(canonical);
        if (canonical) expect([...fromNode!]).toEqual([...fromWeb!]);
      }),
      { numRuns: 5000 },
    );
  });

  it('accepts one text per byte string only', () => {
    expect(isCanonicalBase64url('AA')).toBe(true);
    expect(isCanonicalBase64url('AB')).toBe(false); // stray low bits
    expect(isCanonicalBase64url('AAA')).toBe(true);
    expect(isCanonicalBase64url('AAB')).toBe(false);
    expect(isCanonicalBase64url('A')).toBe(false);
    expect(isCanonicalBase64url('AA==')).toBe(false);
    expect(isCanonicalBase64url('A+/A')).toBe(false);
    expect(isCanonicalBase64url('AAé')).toBe(false);
    expect(base64urlDecode('AB')).toBeUndefined();
    expect(base64urlEncode(new Uint8Array([0xfb, 0xff]))).toBe('-_8');
  });
});

describe('crypto providers', () => {
  it('compute the same SHA-256, HMAC and HKDF on node:crypto and WebCrypto', async () => {
    const data = new TextEncoder().encode('mrtr');
    const key = new Uint8Array(32).fill(9);
    expect(Buffer.from(await web.sha256(data))).toEqual(createHash('sha256').update(data).digest());
    expect(Buffer.from(await node.sha256(data))).toEqual(createHash('sha256').update(data).digest());
    expect(Buffer.from(await web.hmacSha256(key, data))).toEqual(createHmac('sha256', key).update(data).digest());
    const expected = Buffer.from(hkdfSync('sha256', key, data, data, 32));
    expect(Buffer.from(await web.hkdfSha256(key, data, data, 32))).toEqual(expected);
    expect(Buffer.from(await node.hkdfSha256(key, data, data, 32))).toEqual(expected);
  });

  it('draws distinct random bytes from the pool', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) seen.add(base64urlEncode(randomBytes(16)));
    expect(seen.size).toBe(2000);
    expect(randomBytes(5000)).toHaveLength(5000);
    expect(web.randomBytes(70_000)).toHaveLength(70_000);
    expect(() => randomBytes(-1)).toThrow(RangeError);
  });

  it('gives a batch distinct 22-character owner values, and each batch its own random part', () => {
    const batch = ownerValues(65_536);
    expect(new Set(batch).size).toBe(65_536);
    expect(batch.every((v) => /^[A-Za-z0-9_-]{22}$/.test(v) && isCanonicalBase64url(v))).toBe(true);
    const shared = (v: string) => base64urlDecode(v)!.subarray(0, 14).join();
    expect(shared(ownerValues(1)[0]!)).not.toBe(shared(batch[0]!));
    for (const bad of [0, -1, 1.5, 65_537, Number.NaN]) expect(() => ownerValues(bad)).toThrow(RangeError);
  });
});

describe('KeyRing', () => {
  it('parses the MRTR_KEYS format with the first key as primary', () => {
    const ring = KeyRing.parse(`k2:${generateKey()}, k1:${generateKey()}`);
    expect(ring.kids).toEqual(['k2', 'k1']);
    expect(ring.primaryKid).toBe('k2');
    expect(ring.without('k2').kids).toEqual(['k1']);
    expect(ring.withPrimary({ kid: 'k3', secret: generateKey() }).kids).toEqual(['k3', 'k2', 'k1']);
  });

  it('refuses short, malformed and duplicate keys with labelled errors', () => {
    expect(() => new KeyRing([{ kid: 'k1', secret: new Uint8Array(MIN_KEY_BYTES - 1) }])).toThrow(RangeError);
    expect(() => new KeyRing([])).toThrow(RangeError);
    // An empty MRTR_KEYS says what to set and how to make a key.
    for (const empty of ['', ' , ']) {
      expect(() => KeyRing.parse(empty)).toThrow(RangeError);
      expect(() => KeyRing.parse(empty)).toThrow(/MRTR_KEYS.*npx @mrtr\/cli keygen/);
    }
    expect(() => KeyRing.parse('k1')).toThrow(TypeError);
    expect(() => KeyRing.parse('k1:not base64!')).toThrow(TypeError);
    expect(() => new KeyRing([{ kid: 'bad kid', secret: generateKey() }])).toThrow(TypeError);
    const secret = generateKey();
    expect(
      () =>
        new KeyRing([
          { kid: 'a', secret },
          { kid: 'a', secret },
        ]),
    ).toThrow(TypeError);
    expect(() => new KeyRing(null as never)).toThrow(TypeError);
  });

  it('derives one subkey per purpose, deterministic per secret', () => {
    const secret = generateKey();
    const a = new KeyRing([{ kid: 'k', secret }]);
    const b = new KeyRing([{ kid: 'k', secret }]);
    const x = a.subkeySync('k', 'purpose/x')!;
    expect(Buffer.from(x)).toEqual(Buffer.from(b.subkeySync('k', 'purpose/x')!));
    expect(Buffer.from(x)).not.toEqual(Buffer.from(a.subkeySync('k', 'purpose/y')!));
    expect(a.subkey('missing', 'purpose/x')).toBeUndefined();
    expect(() => a.subkey('k', '')).toThrow(TypeError);
  });

  it('keeps secrets out of its enumerable surface', () => {
    const secret = generateKey();
    const ring = new KeyRing([{ kid: 'k', secret }]);
    expect(JSON.stringify(ring)).not.toContain(secret);
  });
});

describe('errors', () => {
  it('carry stable codes, fixed messages and the cause', () => {
    const cause = new Error('ECONNREFUSED 10.0.0.1');
    const error = new StoreUnavailableError({ cause });
    expect(error.code).toBe('ERR_STORE_UNAVAILABLE');
    expect(StoreUnavailableError.code).toBe('ERR_STORE_UNAVAILABLE');
    expect(error.cause).toBe(cause);
    expect(error.message).not.toContain('10.0.0.1');
    expect(error.name).toBe('StoreUnavailableError');
    expect(MrtrError.is(error)).toBe(true);
    // A look-alike without the brand is not an MrtrError: only errors built by (a copy of) this package are.
    expect(MrtrError.is(Object.assign(new Error('x'), { code: 'ERR_STATE_INTEGRITY' }))).toBe(false);
    expect(isServerFault('ERR_STORE_FULL')).toBe(true);
    expect(isServerFault('ERR_SEAL_FAILED')).toBe(true);
    expect(isServerFault('ERR_STATE_REPLAYED')).toBe(false);
    expect(error).toBeInstanceOf(MrtrError);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).not.toBeInstanceOf(StateReplayedError);
    expect(() => new MrtrError('ERR_NOPE' as never)).toThrow(TypeError);
  });

  it('capture no stack trace (rejections stay cheap) and leave Error.stackTraceLimit as it was', () => {
    const before = Error.stackTraceLimit;
    const error = new StateIntegrityError();
    expect(Error.stackTraceLimit).toBe(before);
    expect(
      String(error.stack)
        .split('\n')
        .filter((line) => line.trim().startsWith('at ')),
    ).toEqual([]);
    expect(new Error('plain').stack).toContain(' at ');
  });

  it('narrow by code in a switch', () => {
    const describeError = (e: MrtrError): string => {
      switch (e.code) {
        case 'ERR_STATE_REPLAYED':
          return 'replayed';
        case 'ERR_STORE_UNAVAILABLE':
          return 'outage';
        default:
          return 'other';
      }
    };
    expect(describeError(new StateReplayedError())).toBe('replayed');
    expect(describeError(new StoreUnavailableError())).toBe('outage');
  });
});

describe('readTokenPrefix', () => {
  it('reads "<version>.<kid>." and nothing else', () => {
    expect(readTokenPrefix('m1.k1.body', 'm1')).toEqual({ kid: 'k1', end: 6 });
    expect(readTokenPrefix(`m1.${'a'.repeat(32)}.x`, 'm1')).toEqual({ kid: 'a'.repeat(32), end: 36 });
    for (const bad of ['m1.', 'm1..x', 'm2.k1.x', 'm1k1.x', 'm1.k 1.x', `m1.${'a'.repeat(33)}.x`, 'm1.k1', 'm1.k+1.x']) {
      expect(readTokenPrefix(bad, 'm1'), bad).toBeUndefined();
    }
  });
});

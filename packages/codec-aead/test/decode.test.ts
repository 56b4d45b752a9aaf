import { canonicalJson } from '@mrtr/core/encoding';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { MAX_NESTING, decodeClaims } from '../src/decode.js';
import { codeOf, mp, prng, randomJson } from './helpers.js';

/** The codec's own packer settings. */
const codecPackr = new Packr({
  useRecords: false,
  variableMapSize: true,
  moreTypes: false,
  structuredClone: false,
  bundleStrings: false,
  useToJSON: false,
  encodeUndefinedAsNil: false,
});
/** msgpackr's default settings without records (map16 for every object). */
const plainPackr = new Packr({ useRecords: false });

const roundTrip = (value: unknown, packr = codecPackr): unknown => (decodeClaims(packr.pack({ v: value })) as { v: unknown }).v;

describe('decodeClaims accepts what msgpackr emits for JSON values', () => {
  const numbers = [
    0,
    1,
    31,
    32,
    127,
    128,
    255,
    256,
    65535,
    65536,
    2 ** 32 - 1,
    2 ** 32,
    2 ** 53 - 1,
    -1,
    -32,
    -33,
    -128,
    -129,
    -32768,
    -32769,
    -(2 ** 31),
    -(2 ** 31) - 1,
    -(2 ** 53 - 1),
    0.5,
    -1.5e-7,
    1e300,
    -1e-300,
    Number.MIN_VALUE,
    Number.MAX_VALUE,
  ];

  it.each(numbers)('number %s', (n) => {
    expect(roundTrip(n)).toBe(n);
    expect(roundTrip(n, plainPackr)).toBe(n);
  });

  it('maps -0 to 0, as JSON does', () => {
    expect(Object.is(roundTrip(-0), 0)).toBe(true);
  });

  it.each([0, 1, 31, 32, 64, 65, 255, 256, 65535, 65536])('ASCII and multi-byte strings of %s bytes', (n) => {
    const ascii = 'a'.repeat(n);
    expect(roundTrip(ascii)).toBe(ascii);
    const mixed = 'é😀✓x'.repeat(Math.ceil(n / 10)).slice(0, n);
    expect(roundTrip(mixed)).toBe(mixed);
  });

  it('keeps a genuine U+FFFD, short and long', () => {
    for (const text of ['\ufffd', `a\ufffdb`, `${'y'.repeat(100)}\ufffd`, `\ufffd${'é'.repeat(40)}`]) expect(roundTrip(text)).toBe(text);
  });

  it('keeps a leading U+FEFF (byte order mark) as data, short and long', () => {
    for (const text of ['\ufeff', '\ufeffx', `\ufeff${'y'.repeat(100)}`]) expect(roundTrip(text)).toBe(text);
  });

  it.each([0, 15, 16, 65535, 65536])(
    'arrays of %s elements and maps of as many keys',
    (n) => {
      const array = Array.from({ length: n }, (_, i) => i % 3);
      expect(roundTrip(array)).toEqual(array);
      const map = Object.fromEntries(array.map((_, i) => [`k${i}`, i]));
      expect(roundTrip(map)).toEqual(map);
      // msgpackr's default (non-variable) map header is always map16.
      if (n < 65536) expect(roundTrip(map, plainPackr)).toEqual(map);
    },
    30_000,
  );

  it('decodes keys that share length and first/last byte (key cache collisions) exactly', () => {
    const keys = Array.from({ length: 3000 }, (_, i) => `a${i.toString(36).padStart(3, '0')}z`);
    keys.push('aéz', 'a\u00ffz', 'a😀z', `a${'x'.repeat(22)}z`, `a${'y'.repeat(22)}z`, `a${'x'.repeat(30)}z`);
    for (let round = 0; round < 3; round++) {
      const map = Object.fromEntries(keys.map((k, i) => [k, i]));
      expect(roundTrip(map)).toEqual(map);
      keys.reverse();
    }
  });

  it('round-trips random JSON values (seeded)', () => {
    const value = randomJson(0x5eed);
    for (let i = 0; i < 2000; i++) {
      const v = value();
      expect(canonicalJson(roundTrip(v))).toBe(canonicalJson(v));
    }
  });
});

describe('decodeClaims refuses everything else', () => {
  const malformed = (bytes: Uint8Array) => expect(codeOf(() => decodeClaims(bytes))).toBe('ERR_STATE_MALFORMED');

  it('requires a map at the root spanning all bytes', () => {
    malformed(mp());
    malformed(mp(0xc0));
    malformed(mp(0x90));
    malformed(mp('text'));
    malformed(mp(0x01));
    malformed(mp(0x80, 0xc0)); // trailing byte
    malformed(mp(0x81, 'a')); // missing value
    expect(decodeClaims(mp(0x80))).toEqual({});
  });

  it.each([
    ['reserved 0xc1', [0xc1]],
    ['bin8', [0xc4, 1, 0]],
    ['bin16', [0xc5, 0, 1, 0]],
    ['bin32', [0xc6, 0, 0, 0, 1, 0]],
    ['ext8', [0xc7, 1, 0x01, 0]],
    ['ext16', [0xc8, 0, 1, 0x01, 0]],
    ['ext32', [0xc9, 0, 0, 0, 1, 0x01, 0]],
    ['float32', [0xca, 0x3f, 0x80, 0, 0]],
    ['uint64', [0xcf, 0, 0, 0, 0, 0, 0, 0, 1]],
    ['int64', [0xd3, 0, 0, 0, 0, 0, 0, 0, 1]],
    ['fixext1 (msgpackr undefined)', [0xd4, 0, 0]],
    ['fixext1 record definition (msgpackr records)', [0xd4, 0x72, 0x40]],
    ['fixext4 timestamp', [0xd6, 0xff, 0, 0, 0, 0]],
    ['fixext8 timestamp', [0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]],
    ['fixext16', [0xd8, 1, ...new Array(16).fill(0)]],
  ])('type %s', (_name, bytes) => {
    malformed(mp(0x81, 'a', bytes as number[]));
  });

  it('refuses msgpackr record extensions and structured clone output', () => {
    const withRecords = new Packr();
    malformed(withRecords.pack({ a: { b: 1 }, c: { b: 2 } }));
    const structured = new Packr({ structuredClone: true });
    const self: Record<string, unknown> = { a: 1 };
    self['me'] = self;
    malformed(structured.pack(self));
    malformed(new Packr({ useRecords: false }).pack({ when: new Date(0) }));
  });

  it.each([
    ['nil', [0xc0]],
    ['integer', [0x01]],
    ['true', [0xc3]],
    ['array', [0x90]],
    ['map', [0x80]],
    ['float64', [0xcb, 0, 0, 0, 0, 0, 0, 0, 0]],
  ])('map keys that are not strings (%s)', (_name, key) => {
    malformed(mp(0x81, key as number[], 0xc0));
  });

  it.each([
    ['array32 of 2^32-1 elements', [0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0]],
    ['array16 of 65535 elements', [0xdc, 0xff, 0xff, 0xc0, 0xc0]],
    ['map32 of 2^32-1 entries', [0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 0x61, 0xc0]],
    ['map16 of 65535 entries', [0xde, 0xff, 0xff, 0xa1, 0x61, 0xc0]],
    ['str32 of 2^32-1 bytes', [0xdb, 0xff, 0xff, 0xff, 0xff, 0x61]],
    ['str16 of 65535 bytes', [0xda, 0xff, 0xff, 0x61]],
    ['str8 of 255 bytes', [0xd9, 0xff, 0x61]],
    ['fixstr of 31 bytes', [0xbf, 0x61]],
    ['fixarray of 15 elements', [0x9f, 0xc0]],
    ['fixmap of 15 entries', [0x8f, 0xa1, 0x61, 0xc0]],
    ['truncated float64', [0xcb, 0, 0, 0]],
    ['truncated uint32', [0xce, 0, 0]],
    ['truncated length', [0xdb, 0, 0]],
  ])('declared lengths beyond the remaining bytes: %s', (_name, bytes) => {
    malformed(mp(0x81, 'a', bytes as number[]));
  });

  it('a map header declaring more entries than half the remaining bytes is refused before reading', () => {
    // 3 entries need ≥ 6 bytes; only 5 remain even though the first entries are well formed.
    malformed(mp(0x83, 'a', 0xc0, 0xa0, 0xc0));
  });

  it(`nests at most ${MAX_NESTING} containers deep`, () => {
    const nested = (levels: number): Uint8Array => mp(0x81, 'a', new Array(levels - 2).fill(0x91), 0x80); // map + (levels-2) arrays + empty map
    expect(() => decodeClaims(nested(MAX_NESTING))).not.toThrow();
    malformed(nested(MAX_NESTING + 1));
    // Far deeper input is refused by the bound, not by a stack overflow.
    malformed(mp(0x81, 'a', new Array(200_000).fill(0x91), 0xc0));
    malformed(
      mp(
        0x81,
        'a',
        new Array(200_000).fill(0x81).flatMap((b) => [b, 0xa0]),
        0xc0,
      ),
    );
  });

  it.each([
    ['overlong 2-byte', [0xc0, 0xaf]],
    ['overlong 2-byte (c1)', [0xc1, 0xbf]],
    ['overlong 3-byte', [0xe0, 0x80, 0xaf]],
    ['overlong 4-byte', [0xf0, 0x80, 0x80, 0xaf]],
    ['surrogate', [0xed, 0xa0, 0x80]],
    ['above U+10FFFF', [0xf4, 0x90, 0x80, 0x80]],
    ['f5 lead byte', [0xf5, 0x80, 0x80, 0x80]],
    ['lone continuation', [0x80]],
    ['truncated 3-byte', [0xe2, 0x82]],
    ['truncated 4-byte', [0xf0, 0x9f, 0x98]],
    ['bad continuation', [0xc3, 0x41]],
    ['ff byte', [0xff]],
  ])('invalid UTF-8 (%s), in short and long strings and in keys', (_name, bad) => {
    const bytes = bad as number[];
    const short = [0xa0 | (bytes.length + 1), 0x61, ...bytes];
    malformed(mp(0x81, 'a', short));
    const longBody = [...new Array(100).fill(0x61), ...bytes];
    malformed(mp(0x81, 'a', [0xd9, longBody.length, ...longBody]));
    malformed(mp(0x81, short, 0xc0));
  });

  it('never sets a prototype from input: __proto__ and constructor are own data', () => {
    const proto = mp(
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
      'b',
      0x91,
      0x81,
      '__proto__',
      0x91,
      0x01,
    );
    const value = decodeClaims(proto) as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.hasOwn(value, '__proto__')).toBe(true);
    expect(Object.getOwnPropertyDescriptor(value, '__proto__')).toEqual({
      value: { polluted: true },
      writable: true,
      enumerable: true,
      configurable: true,
    });
    expect((value as { polluted?: unknown }).polluted).toBeUndefined();
    expect(Object.hasOwn(value, 'constructor')).toBe(true);
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    const inner = (value['b'] as Record<string, unknown>[])[0]!;
    expect(Object.getPrototypeOf(inner)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(inner, '__proto__')?.value).toEqual([1]);
    expect(Array.isArray(Object.getPrototypeOf(inner))).toBe(false);
    expect(JSON.stringify(value)).toBe(
      '{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}},"b":[{"__proto__":[1]}]}',
    );
  });

  it('throws only StateMalformedError on random bytes (seeded, 20 000 inputs)', () => {
    const random = prng(42);
    for (let i = 0; i < 20_000; i++) {
      const n = 1 + Math.floor(random() * 64);
      const bytes = new Uint8Array(n);
      for (let j = 0; j < n; j++) bytes[j] = Math.floor(random() * 256);
      // Half of the inputs start as a map so the decoder gets past the root check.
      if (i % 2 === 0) bytes[0] = 0x80 | (bytes[0]! & 0x0f);
      const code = codeOf(() => decodeClaims(bytes));
      expect(['accepted', 'ERR_STATE_MALFORMED']).toContain(code);
    }
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
  });
});

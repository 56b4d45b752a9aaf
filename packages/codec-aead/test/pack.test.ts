import { sampleClaims, samplePayloads } from '@mrtr/test-suite';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { packJson } from '../src/pack.js';

// The codec's msgpackr settings on the Node build (src/engine/node.ts).
const packr = new Packr({
  useRecords: false,
  variableMapSize: true,
  moreTypes: false,
  structuredClone: false,
  bundleStrings: false,
  useToJSON: false,
  encodeUndefinedAsNil: false,
});
const same = (value: unknown): void => {
  expect(Buffer.from(packJson(value)).toString('hex')).toBe(Buffer.from(packr.pack(value)).toString('hex'));
};

describe('the web build packer writes the bytes msgpackr writes', () => {
  it('for the shared sample payloads and claims', () => {
    for (const payload of samplePayloads()) {
      same(payload);
      same(sampleClaims(payload));
    }
  });

  it('at every header boundary', () => {
    const numbers = [
      0,
      1,
      0x1f,
      0x20,
      0x7f,
      0x80,
      0xff,
      0x100,
      0xffff,
      0x10000,
      0xffffffff,
      0x100000000,
      2 ** 53 - 1,
      -0,
      -1,
      -0x20,
      -0x21,
      -0x80,
      -0x81,
      -0x8000,
      -0x8001,
      -0x80000000,
      -0x80000001,
      0.5,
      -1.5e-7,
      1e300,
      -1e-300,
      Number.MAX_VALUE,
      Number.MIN_VALUE,
      Number.EPSILON,
    ];
    same(numbers);
    for (const n of numbers) same({ n });
    for (const length of [0, 1, 0x1f, 0x20, 0xff, 0x100, 0xffff, 0x10000, 0x10001]) {
      same('a'.repeat(length));
      same('é'.repeat(Math.ceil(length / 2)));
      same('😀'.repeat(Math.ceil(length / 4)));
      if (length <= 0x10001) {
        same(Array.from({ length }, (_, i) => i & 0x7f));
        same(Object.fromEntries(Array.from({ length: Math.min(length, 0x10001) }, (_, i) => [`k${i}`, i & 1])));
      }
    }
    same([true, false, null, [], {}, [[[]]], { a: { b: { c: {} } } }]);
    same(JSON.parse('{"__proto__":{"x":1},"constructor":{"prototype":{}},"toString":"s","2":1,"1":0}'));
    same(Object.assign(Object.create(null), { a: 1, b: [2] }));
  });

  it('for 10,000 generated JSON values (seeded)', () => {
    let seed = 0x9e3779b9;
    const random = (): number => {
      // mulberry32
      seed = (seed + 0x6d2b79f5) >>> 0;
      let t = seed;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
    };
    const int = (n: number): number => Math.floor(random() * n);
    const units = ['a', 'Z', '0', ' ', '"', '\\', '\u0000', '\u007f', 'é', 'ß', '\u0800', '€', '\uffff', '😀', '𝄞', '\u2028'];
    const text = (): string => {
      const length = random() < 0.01 ? [3000, 70_000][int(2)]! : [0, 1, 5, 31, 32, 100, 255, 256][int(8)]!;
      let out = units[int(units.length)]!.repeat(length);
      // A few other units at random places.
      for (let i = Math.min(length, 4); i > 0; i--) {
        const at = int(out.length + 1);
        const unit = units[int(units.length)]!;
        // Never split a surrogate pair.
        if (!/[\ud800-\udbff]$/.test(out.slice(0, at))) out = out.slice(0, at) + unit + out.slice(at);
      }
      return out;
    };
    const number = (): number => {
      switch (int(4)) {
        case 0:
          return int(2 ** 33) - 2 ** 32;
        case 1:
          return Math.floor((random() - 0.5) * 2 ** 54);
        case 2:
          return (random() - 0.5) * 10 ** (int(600) - 300);
        default:
          return [0, -0, 0x7f, 0x80, -0x20, -0x21, 0xffffffff, -0x80000000, -0x80000001, 0.1][int(10)]!;
      }
    };
    const value = (depth: number): unknown => {
      const r = int(depth > 3 ? 4 : 6);
      if (r === 0) return text();
      if (r === 1) return number();
      if (r === 2) return [true, false, null][int(3)];
      if (r === 3) return int(2) === 0 ? text().slice(0, 40) : int(256);
      if (r === 4) return Array.from({ length: (depth === 0 ? [0, 1, 15, 16, 17] : [0, 1, 2, 3, 4])[int(5)]! }, () => value(depth + 1));
      const out: Record<string, unknown> = {};
      for (let i = (depth === 0 ? [0, 1, 15, 16, 17] : [0, 1, 2, 3, 4])[int(5)]!; i > 0; i--) out[text().slice(0, 20)] = value(depth + 1);
      return out;
    };
    for (let i = 0; i < 10_000; i++) same(value(0));
  });
});

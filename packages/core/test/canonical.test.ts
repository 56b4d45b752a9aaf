import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cryptoProvider as node } from '../src/crypto/node.js';
import { cryptoProvider as web } from '../src/crypto/web.js';
import { assertJson, canonicalJson, utf8Encode } from '../src/util/json.js';

/** The straightforward RFC 8785 serializer canonicalJson replaced: sort every object's keys, write every value by hand. */
function reference(value: unknown, depth = 0): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number');
      return JSON.stringify(value);
    case 'object':
      break;
    default:
      throw new TypeError(`canonicalJson: cannot serialize a ${typeof value}`);
  }
  if (depth >= 128) throw new RangeError('canonicalJson: nesting is too deep');
  if (Array.isArray(value))
    return `[${value.map((item: unknown) => (item === undefined ? 'null' : reference(item, depth + 1))).join(',')}]`;
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return reference((toJSON as () => unknown).call(value), depth + 1);
  const members = Object.keys(value)
    .sort()
    .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
    .map((key) => `${JSON.stringify(key)}:${reference((value as Record<string, unknown>)[key], depth + 1)}`);
  return `{${members.join(',')}}`;
}

/** What a call returns or throws, comparable with toEqual. */
function outcome(fn: () => unknown): unknown {
  try {
    return { value: fn() };
  } catch (error) {
    return { throws: (error as Error).constructor.name, message: (error as Error).message };
  }
}

/** JSON values, plus what canonicalJson must refuse or treat specially, anywhere in the tree. */
const odd = fc.oneof(
  fc.constantFrom(undefined, Number.NaN, Number.POSITIVE_INFINITY, -0, 1n, Symbol('s'), () => 1),
  fc.date({ noInvalidDate: true }),
  fc.string().map((s) => ({ toJSON: () => ({ z: s, a: [s] }) })),
  fc.string().map((s) => Object.assign([s], { toJSON: () => 'array toJSON is ignored' })),
  fc.string().map((s) => Object.assign(Object.create(null) as object, { b: s, a: 1 })),
  fc.string().map((s) => new String(s)),
);
const tree = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.jsonValue({ maxDepth: 2 }), odd, tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 5 }),
  object: fc.dictionary(
    fc.oneof(fc.string(), fc.constantFrom('1', '10', '9', 'a', 'b', '-1', '__proto__', '\u20ac', '\ud83d\ude00')),
    tie('value'),
    {
      maxKeys: 5,
    },
  ),
})).value;

describe('canonicalJson fast paths', () => {
  it('writes and refuses exactly what the reference serializer does', () => {
    fc.assert(
      fc.property(tree, (value) => {
        const expected = outcome(() => reference(value));
        expect(outcome(() => canonicalJson(value))).toEqual(expected);
        // assertJson throws what canonicalJson throws, and nothing otherwise.
        const asserted = outcome(() => assertJson(value));
        if ('throws' in (expected as object)) expect(asserted).toEqual(expected);
        else expect(asserted).toEqual({ value: undefined });
      }),
      { numRuns: 2000 },
    );
  });

  it('sorts keys below sorted and unsorted objects alike, and refuses deep nesting and cycles', () => {
    const sortedOuter = { a: { d: 1, c: [{ y: 1, x: 2 }] }, b: 'x' };
    expect(canonicalJson(sortedOuter)).toBe('{"a":{"c":[{"x":2,"y":1}],"d":1},"b":"x"}');
    expect(canonicalJson({ 10: 1, 9: 2, a: { b: 1, a: 2 } })).toBe('{"10":1,"9":2,"a":{"a":2,"b":1}}');
    // An own "__proto__" member (JSON.parse makes one) is a member like any other.
    const proto = JSON.parse('{"b":1,"__proto__":{"y":1,"x":2}}') as unknown;
    expect(canonicalJson(proto)).toBe('{"__proto__":{"x":2,"y":1},"b":1}');
    expect(canonicalJson([{ b: 1, a: 2 }, proto])).toBe(reference([{ b: 1, a: 2 }, proto]));
    let deep: unknown = { a: 1 };
    for (let i = 0; i < 127; i++) deep = [deep];
    // The innermost object sits at depth 127: the deepest allowed; one more level is refused.
    expect(canonicalJson(deep)).toBe(reference(deep));
    expect(() => canonicalJson([deep])).toThrow(RangeError);
    expect(() => assertJson([deep])).toThrow(RangeError);
    const cycle: Record<string, unknown> = { a: 1 };
    cycle['self'] = cycle;
    expect(() => canonicalJson(cycle)).toThrow(RangeError);
    expect(() => assertJson({ b: cycle })).toThrow(RangeError);
  });
});

describe('sha256Text', () => {
  it('is the base64url SHA-256 of the UTF-8 bytes, on both providers', async () => {
    for (const text of ['', '{}', 'a\ud800b', '\udc00', 'x\ud83d\ude00', 'é'.repeat(1000)]) {
      const expected = node.base64urlEncode(await node.sha256(utf8Encode(text)));
      expect(node.sha256Text(text)).toBe(expected);
      expect(await web.sha256Text(text)).toBe(expected);
    }
  });
});

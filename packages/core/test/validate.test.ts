import { describe, expect, it } from 'vitest';
import {
  boolOption,
  fnOption,
  intOption,
  isObject,
  oneOfOption,
  type OptionNames,
  optionsObject,
  rejectUnknownOptions,
  stringOption,
} from '../src/entry-options.js';
import { BackgroundError } from '../src/entry-store.js';

describe('option validators (@mrtr/core/options)', () => {
  it('isObject accepts plain objects only', () => {
    expect(isObject({})).toBe(true);
    expect(isObject(Object.create(null))).toBe(true);
    for (const v of [null, undefined, [], 'x', 1, true]) expect(isObject(v)).toBe(false);
  });

  it('optionsObject: {} when undefined, the object itself, a labelled TypeError for anything else', () => {
    expect(optionsObject('createX', undefined, { a: true })).toEqual({});
    const given = { a: 1 };
    expect(optionsObject('createX', given, { a: true })).toBe(given);
    for (const bad of [null, [], 'x', 1, true, () => {}]) {
      expect(() => optionsObject('createX', bad as never, { a: true })).toThrow(new TypeError('createX: options must be an object'));
    }
  });

  it('optionsObject refuses an option it does not know, naming it and the closest known name', () => {
    interface XOptions {
      groupCommit?: boolean;
      maxBatchSize?: number;
    }
    const known: OptionNames<XOptions> = { groupCommit: true, maxBatchSize: true };
    expect(() => optionsObject<XOptions>('createX', { groupCommt: true } as XOptions, known)).toThrow(
      new TypeError('createX: unknown option "groupCommt"; did you mean "groupCommit"?'),
    );
  });

  it('rejectUnknownOptions: own enumerable string keys, undefined values included; a suggestion only when one is close', () => {
    const known = { groupCommit: true, maxBatchSize: true, now: true, ttlMs: true } as const;
    rejectUnknownOptions('createX', { groupCommit: false, now: undefined }, known);
    rejectUnknownOptions('createX', Object.create({ inherited: 1 }), known);
    rejectUnknownOptions('createX', { [Symbol('s')]: 1 }, known);
    const hidden = {};
    Object.defineProperty(hidden, 'hidden', { value: 1, enumerable: false });
    rejectUnknownOptions('createX', hidden, known);
    expect(() => rejectUnknownOptions('createX', { groupCommt: undefined }, known)).toThrow(
      new TypeError('createX: unknown option "groupCommt"; did you mean "groupCommit"?'),
    );
    // Case, a swap of two neighbours, a missing letter.
    expect(() => rejectUnknownOptions('createX', { ttlms: 1 }, known)).toThrow('unknown option "ttlms"; did you mean "ttlMs"?');
    expect(() => rejectUnknownOptions('createX', { tltMs: 1 }, known)).toThrow('unknown option "tltMs"; did you mean "ttlMs"?');
    expect(() => rejectUnknownOptions('createX', { maxBatchSie: 1 }, known)).toThrow('did you mean "maxBatchSize"?');
    // Nothing close: no suggestion.
    expect(() => rejectUnknownOptions('createX', { url: 'x' }, known)).toThrow(new TypeError('createX: unknown option "url"'));
    expect(() => rejectUnknownOptions('createX', { __proto__: null, constructor: 1 }, known)).toThrow('unknown option "constructor"');
    // A long name is compared on a bounded prefix (no suggestion, no quadratic cost on its length).
    const long = `groupCommit${'x'.repeat(100_000)}`;
    expect(() => rejectUnknownOptions('createX', { [long]: 1 }, known)).toThrow(/^createX: unknown option "groupCommitx+"$/);
  });

  it('OptionNames lists every option of a type (a missing or foreign name fails type-check)', () => {
    interface XOptions {
      a?: number;
      b: string;
    }
    const full: OptionNames<XOptions> = { a: true, b: true };
    // @ts-expect-error b is missing
    const missing: OptionNames<XOptions> = { a: true };
    // @ts-expect-error c is not an option
    const foreign: OptionNames<XOptions> = { a: true, b: true, c: true };
    const union: OptionNames<{ url: string } | { client: object }> = { url: true, client: true };
    expect([full, missing, foreign, union]).toHaveLength(4);
  });

  it('intOption: fallback when undefined, the value within bounds, labelled errors otherwise', () => {
    expect(intOption('createX: n', undefined, 7, 1, 10)).toBe(7);
    expect(intOption('createX: n', 1, 7, 1, 10)).toBe(1);
    expect(intOption('createX: n', 10, 7, 1, 10)).toBe(10);
    expect(() => intOption('createX: n', 0, 7, 1, 10)).toThrow(new RangeError('createX: n must be between 1 and 10'));
    expect(() => intOption('createX: n', 11, 7, 1, 10)).toThrow(RangeError);
    for (const bad of [1.5, '3', Number.NaN, 2 ** 53, null]) {
      expect(() => intOption('createX: n', bad, 7, 1, 10)).toThrow(new TypeError('createX: n must be an integer'));
    }
    // Safe integers only (the stricter of the former copies: Number.isInteger let 2 ** 53 through).
    expect(() => intOption('createX: n', 2 ** 53, 0, 0, Number.POSITIVE_INFINITY)).toThrow(TypeError);
    expect(intOption('createX: n', Number.MAX_SAFE_INTEGER, 0, 0, Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('boolOption: fallback when undefined, the boolean, a labelled TypeError otherwise', () => {
    expect(boolOption('createX: b', undefined, true)).toBe(true);
    expect(boolOption('createX: b', undefined, false)).toBe(false);
    expect(boolOption('createX: b', false, true)).toBe(false);
    expect(boolOption('createX: b', true, false)).toBe(true);
    for (const bad of [0, 1, 'true', null, {}]) {
      expect(() => boolOption('createX: b', bad, true)).toThrow(new TypeError('createX: b must be a boolean'));
    }
  });

  it('stringOption: fallback when undefined, the string (empty included), a labelled TypeError otherwise', () => {
    expect(stringOption('createX: s', undefined, 'd')).toBe('d');
    expect(stringOption('createX: s', '', 'd')).toBe('');
    expect(stringOption('createX: s', 'v', 'd')).toBe('v');
    for (const bad of [1, null, {}, ['v'], Symbol('v')]) {
      expect(() => stringOption('createX: s', bad, 'd')).toThrow(new TypeError('createX: s must be a string'));
    }
  });

  it('fnOption: fallback when undefined, the function, a labelled TypeError otherwise', () => {
    const fallback = () => 1;
    const given = () => 2;
    expect(fnOption('createX: f', undefined, fallback)).toBe(fallback);
    expect(fnOption('createX: f', given, fallback)).toBe(given);
    for (const bad of [1, 'f', null, {}]) {
      expect(() => fnOption('createX: f', bad, fallback)).toThrow(new TypeError('createX: f must be a function'));
    }
  });

  it('oneOfOption: fallback when undefined, one of the choices, a labelled TypeError listing them otherwise', () => {
    const choices = ['warn', 'refuse', 'off'] as const;
    expect(oneOfOption('createX: mode', undefined, 'warn', choices)).toBe('warn');
    expect(oneOfOption('createX: mode', 'off', 'warn', choices)).toBe('off');
    for (const bad of ['maybe', 'WARN', '', 1, null]) {
      expect(() => oneOfOption('createX: mode', bad, 'warn', choices)).toThrow(
        new TypeError('createX: mode must be "warn", "refuse" or "off"'),
      );
    }
    expect(() => oneOfOption('createX: mode', 'x', 'a', ['a', 'b'] as const)).toThrow(new TypeError('createX: mode must be "a" or "b"'));
    expect(() => oneOfOption('createX: mode', 'x', 'a', ['a'] as const)).toThrow(new TypeError('createX: mode must be "a"'));
  });

  it('BackgroundError: an Error with a stable code and the underlying cause', () => {
    const cause = new Error('connection refused');
    const error = new BackgroundError('STORE_PURGE_FAILED', 'createX: the background purge failed', { cause });
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('BackgroundError');
    expect(error.code).toBe('STORE_PURGE_FAILED');
    expect(error.message).toBe('createX: the background purge failed');
    expect(error.cause).toBe(cause);
    expect(new BackgroundError('STORE_REACHABLE', 'reachable now').cause).toBeUndefined();
    expect(String(error)).toBe('BackgroundError: createX: the background purge failed');
  });
});

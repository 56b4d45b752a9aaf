import { describe, expect, it } from 'vitest';
import { BackgroundError, boolOption, fnOption, intOption, isObject, oneOfOption, optionsObject, stringOption } from '../src/authoring.js';

describe('option validators (@mrtr/core/authoring)', () => {
  it('isObject accepts plain objects only', () => {
    expect(isObject({})).toBe(true);
    expect(isObject(Object.create(null))).toBe(true);
    for (const v of [null, undefined, [], 'x', 1, true]) expect(isObject(v)).toBe(false);
  });

  it('optionsObject: {} when undefined, the object itself, a labelled TypeError for anything else', () => {
    expect(optionsObject('createX', undefined)).toEqual({});
    const given = { a: 1 };
    expect(optionsObject('createX', given)).toBe(given);
    for (const bad of [null, [], 'x', 1, true, () => {}]) {
      expect(() => optionsObject('createX', bad as never)).toThrow(new TypeError('createX: options must be an object'));
    }
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

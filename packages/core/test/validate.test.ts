import { describe, expect, it } from 'vitest';
import { intOption, isObject } from '../src/authoring.js';

describe('option validators (@mrtr/core/authoring)', () => {
  it('isObject accepts plain objects only', () => {
    expect(isObject({})).toBe(true);
    expect(isObject(Object.create(null))).toBe(true);
    for (const v of [null, undefined, [], 'x', 1, true]) expect(isObject(v)).toBe(false);
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
  });
});

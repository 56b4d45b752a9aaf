import { describe, expect, it } from 'vitest';
import { perIsolate } from '../src/index.js';

describe('perIsolate', () => {
  it('builds once per setting and again only when its text changes', () => {
    const built: string[] = [];
    const ringFor = perIsolate('MRTR_KEYS', (text, env: { tag: string }) => {
      built.push(`${text}@${env.tag}`);
      return { text };
    });
    const first = ringFor('k1', { tag: 'a' });
    expect(ringFor('k1', { tag: 'b' })).toBe(first); // same text: the same value, the context is not looked at
    expect(built).toEqual(['k1@a']);
    const second = ringFor('k2', { tag: 'c' });
    expect(second).not.toBe(first);
    expect(second.text).toBe('k2');
    expect(built).toEqual(['k1@a', 'k2@c']);
    expect(ringFor('k2', { tag: 'd' })).toBe(second);
  });

  it('fails closed on a missing or blank setting, naming it', () => {
    const ringFor = perIsolate('MRTR_KEYS', (text) => text);
    for (const bad of [undefined, '', '   ']) {
      expect(() => ringFor(bad)).toThrow(TypeError);
      expect(() => ringFor(bad)).toThrow(/^MRTR_KEYS is not set/);
    }
  });

  it('does not cache a build that throws: the next call tries again', () => {
    let calls = 0;
    const ringFor = perIsolate('MRTR_KEYS', (text) => {
      calls++;
      if (calls === 1) throw new RangeError('bad key');
      return text.length;
    });
    expect(() => ringFor('k')).toThrow(RangeError);
    expect(ringFor('k')).toBe(1);
    expect(ringFor('k')).toBe(1);
    expect(calls).toBe(2);
  });

  it('rejects misuse with labelled TypeErrors', () => {
    expect(() => perIsolate('', (t) => t)).toThrow(new TypeError('perIsolate: name must be a non-empty string'));
    expect(() => perIsolate('X', 42 as never)).toThrow(new TypeError('perIsolate: build must be a function'));
  });
});

import { describe, expect, it } from 'vitest';
import {
  checkFormat,
  explainFormAnswer,
  type FormSchema,
  validateFormAnswer,
  validateRootsAnswer,
  validateSamplingAnswer,
} from '../src/rounds/answers.js';

/**
 * Every check a client's answer reaches must be linear in its length. Review finding: the `email` format
 * regex backtracked quadratically (80,000 characters blocked the event loop ~10 s). Each row feeds a check
 * 1 KiB of adversarial input 1024 times and 1 MiB once: the same number of characters. A linear check costs
 * about the same both ways; a quadratic one costs ~1000× more for the large input. Ratios in one run, with a
 * wide margin for a loaded machine, never absolute times.
 */
const SMALL = 1024;
const LARGE = 1024 * 1024;
const REPS = LARGE / SMALL;

function cost(check: (input: string) => unknown, make: (n: number) => string): number {
  const small = make(SMALL);
  const large = make(LARGE);
  check(small); // warm up the JIT on the same shapes
  check(large);
  let best = Number.POSITIVE_INFINITY;
  for (let trial = 0; trial < 3; trial++) {
    const t0 = performance.now();
    for (let i = 0; i < REPS; i++) check(small);
    const t1 = performance.now();
    check(large);
    const t2 = performance.now();
    best = Math.min(best, (t2 - t1) / Math.max(t1 - t0, 0.05));
  }
  return best;
}

/** Inputs that make backtracking matchers work hardest: long runs of the characters they branch on. */
const shapes: [string, (n: number) => string][] = [
  ['a@a.a.a.…@', (n) => `a@${'a.'.repeat(n / 2 - 2)}@`],
  ['a@ + dots', (n) => `a@${'.'.repeat(n - 3)}x`],
  ['letters then space', (n) => `${'a'.repeat(n - 1)} `],
  ['@@@…', (n) => '@'.repeat(n)],
  ['digits', (n) => '1'.repeat(n)],
  ['date-like', (n) => `2024-01-01T10:00:00.${'1'.repeat(n - 22)}Z`],
  ['scheme-like', (n) => `${'a'.repeat(n - 1)}:`],
];

describe('answer checks are linear in the input (1 KiB × 1024 vs 1 MiB)', () => {
  for (const format of ['email', 'uri', 'date', 'date-time']) {
    for (const [shape, make] of shapes) {
      it(`format ${format}, ${shape}`, () => {
        expect(cost((input) => checkFormat(format, input), make)).toBeLessThan(25);
      });
    }
  }

  const limits = { maxChars: LARGE };
  const schema = {
    type: 'object',
    properties: {
      email: { type: 'string', format: 'email' },
      name: { type: 'string', minLength: 1, maxLength: LARGE },
      pick: { type: 'string', enum: ['x', 'y'] },
    },
  } as const satisfies FormSchema;
  const validators: [string, (input: string) => unknown][] = [
    ['form answer (email field)', (s) => validateFormAnswer(schema, { action: 'accept', content: { email: s } }, limits)],
    ['form answer (length in code points)', (s) => validateFormAnswer(schema, { action: 'accept', content: { name: s } }, limits)],
    ['form answer (enum)', (s) => validateFormAnswer(schema, { action: 'accept', content: { pick: s } }, limits)],
    ['form answer (a key not asked for)', (s) => validateFormAnswer(schema, { action: 'accept', content: { other: [s, { s }] } }, limits)],
    ['sampling answer', (s) => validateSamplingAnswer({ role: 'assistant', model: 'm', content: { type: 'text', text: s } }, limits)],
    ['roots answer', (s) => validateRootsAnswer({ roots: [{ uri: `file:///${s}`, name: s }] }, limits)],
  ];
  for (const [name, check] of validators) {
    it(name, () => {
      expect(cost(check, (n) => `a@${'a.'.repeat(n / 2 - 2)}@`)).toBeLessThan(25);
    });
  }
});

describe('answer strings are capped before any format check', () => {
  const schema = { type: 'object', properties: { email: { type: 'string', format: 'email' } } } as const satisfies FormSchema;
  it('refuses a string past maxChars and a string with a lone surrogate', () => {
    const ok = validateFormAnswer(schema, { action: 'accept', content: { email: 'a@b.example' } }, { maxChars: 11 });
    expect(ok).toEqual({ action: 'accept', content: { email: 'a@b.example' } });
    expect(validateFormAnswer(schema, { action: 'accept', content: { email: 'a@bc.example' } }, { maxChars: 11 })).toBeUndefined();
    expect(validateFormAnswer(schema, { action: 'accept', content: { email: 'a@b.example\ud800' } }, { maxChars: 100 })).toBeUndefined();
  });

  it('refuses a key the form did not ask for when its text is past maxChars (it is dropped only when bounded)', () => {
    const answer = (content: Record<string, unknown>) => validateFormAnswer(schema, { action: 'accept', content }, { maxChars: 11 });
    // Bounded: dropped, as before.
    expect(answer({ email: 'a@b.example', extra: 'short', n: [1, { deep: 'ok' }] })).toEqual({
      action: 'accept',
      content: { email: 'a@b.example' },
    });
    // Past maxChars in the value (at any depth), in the key, or not well-formed: refused, with a reason that quotes nothing.
    expect(answer({ email: 'a@b.example', extra: 'x'.repeat(12) })).toBeUndefined();
    expect(answer({ email: 'a@b.example', extra: { nested: ['x'.repeat(1_000_000)] } })).toBeUndefined();
    expect(answer({ email: 'a@b.example', ['k'.repeat(12)]: 1 })).toBeUndefined();
    expect(answer({ email: 'a@b.example', extra: '\ud800' })).toBeUndefined();
    const reason = explainFormAnswer(
      schema,
      { action: 'accept', content: { email: 'a@b.example', secret: 'x'.repeat(12) } },
      { maxChars: 11 },
    );
    expect(reason).toBe('The answer holds a field the form did not ask for, with text over 11 characters or not well-formed.');
  });

  it('keeps the e-mail rule of the old expression', () => {
    const old = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
    const samples = [
      'a@b.c',
      'a@b.',
      'a@.c',
      '@b.c',
      'a@b',
      'a b@c.d',
      'a@b@c.d',
      'a@b..c',
      'a@.b.c',
      'a@b.c.',
      'ü@ß.de',
      'a@b\t.c',
      'x@y.z.w',
      '',
      '@',
      'a@b.c d',
    ];
    for (const s of samples) expect(checkFormat('email', s), s).toBe(old.test(s));
  });
});

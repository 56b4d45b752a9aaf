// The README's "Multi-select fields" schema is the shape the adapter accepts: its answers are typed and checked
// as documented (an array of the listed values, within minItems/maxItems).
import { readFileSync } from 'node:fs';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { validateFormAnswer } from '../src/rounds/answers.js';
import type { FormContent, FormSchema } from '../src/index.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = /### Multi-select fields\n([\s\S]*?)\n## /.exec(readme)?.[1] ?? '';
const documented = JSON.parse(/```json\n([\s\S]*?)```/.exec(section)?.[1] ?? 'null') as FormSchema;

/** The README's schema as a literal, so its answer type can be checked. */
const schema = {
  type: 'object',
  properties: {
    regions: { type: 'array', title: 'Regions', minItems: 1, maxItems: 2, items: { type: 'string', enum: ['eu', 'us', 'ap'] } },
    notify: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'email', title: 'E-mail' },
          { const: 'sms', title: 'Text message' },
        ],
      },
    },
  },
  required: ['regions'],
} as const satisfies FormSchema;

const limits = { maxChars: 4096 };
const accepts = (content: unknown) => validateFormAnswer(documented, { action: 'accept', content }, limits) !== undefined;

describe('README: multi-select fields', () => {
  it('documents this schema, and it is a FormSchema whose answers are typed as arrays of the values', () => {
    expect(documented).toEqual(schema);
    expectTypeOf<FormContent<typeof schema>>().toEqualTypeOf<{ regions: ('eu' | 'us' | 'ap')[]; notify?: ('email' | 'sms')[] }>();
  });

  it('accepts arrays of the listed values within minItems/maxItems, in both items shapes', () => {
    expect(accepts({ regions: ['eu'] })).toBe(true);
    expect(accepts({ regions: ['eu', 'ap'], notify: ['sms', 'email'] })).toBe(true);
    expect(accepts({ regions: ['us'], notify: [] })).toBe(true);
  });

  it('refuses anything else: a value not listed, too few or too many, not an array, not strings, missing', () => {
    expect(accepts({ regions: ['mars'] })).toBe(false);
    expect(accepts({ regions: ['eu'], notify: ['fax'] })).toBe(false);
    expect(accepts({ regions: [] })).toBe(false);
    expect(accepts({ regions: ['eu', 'us', 'ap'] })).toBe(false);
    expect(accepts({ regions: 'eu' })).toBe(false);
    expect(accepts({ regions: [1] })).toBe(false);
    expect(accepts({ notify: ['sms'] })).toBe(false);
  });
});

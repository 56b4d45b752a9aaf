import { describe, expect, it } from 'vitest';
import { allowedKinds, capabilitiesFor, requiredKind } from '../src/protocol/capabilities.js';

describe('capabilities', () => {
  const form = {
    method: 'elicitation/create' as const,
    params: { message: 'm', requestedSchema: { type: 'object' as const, properties: {} } },
  };
  const url = { method: 'elicitation/create' as const, params: { mode: 'url' as const, message: 'm', url: 'https://x' } };
  const sample = { method: 'sampling/createMessage' as const, params: { messages: [], maxTokens: 5 } };
  const sampleTools = { method: 'sampling/createMessage' as const, params: { messages: [], maxTokens: 5, tools: [] } };
  const roots = { method: 'roots/list' as const };

  it('reads declared kinds (bare elicitation means form only)', () => {
    expect([...allowedKinds({ elicitation: {} })]).toEqual(['elicitation.form']);
    expect([...allowedKinds({ elicitation: { url: {} } })]).toEqual(['elicitation.url']);
    expect([...allowedKinds({ elicitation: { form: {}, url: {} }, sampling: { tools: {} }, roots: {} })].sort()).toEqual(
      ['elicitation.form', 'elicitation.url', 'roots', 'sampling', 'sampling.tools'].sort(),
    );
    expect(allowedKinds(undefined).size).toBe(0);
    expect(allowedKinds({ elicitation: true as never }).size).toBe(0);
  });

  it('names the kind each request needs and the capabilities a set of kinds needs', () => {
    expect([form, url, sample, sampleTools, roots].map(requiredKind)).toEqual([
      'elicitation.form',
      'elicitation.url',
      'sampling',
      'sampling.tools',
      'roots',
    ]);
    expect(capabilitiesFor(['elicitation.form', 'elicitation.url', 'sampling.tools', 'roots'])).toEqual({
      elicitation: { form: {}, url: {} },
      sampling: { tools: {} },
      roots: {},
    });
    expect(() => requiredKind({ method: 'tools/call' } as never)).toThrow(TypeError);
  });
});

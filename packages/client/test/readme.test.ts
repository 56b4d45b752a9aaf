import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';
import { fakeServer, type Json, text } from './fake.js';

readmeChecks(import.meta.url, { benchMarkers: false });

it('the quick start runs: answers the question and prints the result', async () => {
  const fake = fakeServer((method, params) => {
    if (method === 'tools/list') return { resultType: 'complete', tools: [], ttlMs: 0, cacheScope: 'private' };
    if (params.requestState === undefined) {
      const ask = { method: 'elicitation/create', params: { message: 'Deploy?', requestedSchema: { type: 'object', properties: {} } } };
      return { resultType: 'input_required', inputRequests: { confirm: ask }, requestState: 'S' };
    }
    return text(`deployed, ok=${((params.inputResponses as Json).confirm as { content: Json }).content.ok}`);
  });
  vi.stubGlobal('fetch', fake.fetch);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/quickstart.js');
    expect(log.mock.calls).toEqual([[[{ type: 'text', text: 'deployed, ok=true' }], false]]);
  } finally {
    log.mockRestore();
    vi.unstubAllGlobals();
  }
});

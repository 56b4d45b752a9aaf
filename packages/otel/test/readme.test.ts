import { readFileSync } from 'node:fs';
import { generateKey } from '@mrtr/core';
import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';
import { ATTRIBUTES, METRICS, SPANS } from '../src/index.js';

readmeChecks(import.meta.url, { benchMarkers: false });

it('the quick start runs', async () => {
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  const previous = process.env.MRTR_KEYS;
  process.env.MRTR_KEYS = `k1:${generateKey()}`;
  try {
    await import('../examples/quickstart.js');
    expect(log.mock.calls).toEqual([[1]]);
  } finally {
    log.mockRestore();
    if (previous === undefined) delete process.env.MRTR_KEYS;
    else process.env.MRTR_KEYS = previous;
  }
});

it('the README names every metric, span and attribute', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  for (const name of [...Object.values(METRICS), ...Object.values(SPANS), ...Object.values(ATTRIBUTES)]) {
    expect(readme).toContain(`\`${name}\``);
  }
});

import { generateKey } from '@mrtr/core';
import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url);

it('the quick start runs: mints, opens, and the client-readable body shows the data', async () => {
  vi.stubEnv('MRTR_KEYS', `k2:${generateKey()},k1:${generateKey()}`);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/quickstart.js');
    expect(log.mock.calls).toEqual([[{ step: 1, confirmed: false }, 'k2'], [{ step: 1, confirmed: false }]]);
  } finally {
    log.mockRestore();
    vi.unstubAllEnvs();
  }
});

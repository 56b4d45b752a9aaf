import { generateKey } from '@mrtr/core';
import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url);

it('the quick start runs: mints, opens, and the token hides the data', async () => {
  vi.stubEnv('MRTR_KEYS', `k2:${generateKey()},k1:${generateKey()}`);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/quickstart.js');
    expect(log).toHaveBeenCalledTimes(2);
    expect(log.mock.calls[0]).toEqual([{ step: 1, answers: { confirm: true } }, 'k2']);
    const [prefix, length, leaks] = log.mock.calls[1] as [string, number, boolean];
    expect(prefix).toBe('x1.k2.');
    expect(length).toBeGreaterThan(100);
    expect(leaks).toBe(false);
  } finally {
    log.mockRestore();
    vi.unstubAllEnvs();
  }
});

import { generateKey } from '@mrtr/core';
import { expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url);

it('the quick start runs: mints, opens, and jose reads the same token with the CEK', async () => {
  vi.stubEnv('MRTR_KEYS', `k2:${generateKey()},k1:${generateKey()}`);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/quickstart.js');
    expect(log).toHaveBeenCalledTimes(2);
    expect(log.mock.calls[0]).toEqual([{ confirmed: false }, 'k2']);
    const mrtr = log.mock.calls[1]![0] as { v: number; data: unknown; req: { m: string; t: string } };
    expect(mrtr).toMatchObject({ v: 1, data: { confirmed: false }, req: { m: 'tools/call', t: 'delete_files' } });
  } finally {
    log.mockRestore();
    vi.unstubAllEnvs();
  }
});

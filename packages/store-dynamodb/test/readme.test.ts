import { generateKey } from '@mrtr/core';
import { describe, expect, it, vi } from 'vitest';
import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { maxLines: 26 });

describe('quick start (dynalite in process: nothing to skip for)', () => {
  it('runs: the first open is accepted, the replay is refused', async () => {
    vi.stubEnv('MRTR_KEYS', `k1:${generateKey()}`);
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    try {
      await import('../examples/quickstart.js');
      expect(log.mock.calls).toEqual([[{ confirmed: false }], ['ERR_STATE_REPLAYED']]);
    } finally {
      log.mockRestore();
      vi.unstubAllEnvs();
    }
  });
});

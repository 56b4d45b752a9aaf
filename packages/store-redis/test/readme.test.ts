import { generateKey } from '@mrtr/core';
import { describe, expect, it, vi } from 'vitest';
import { gateRedis, REDIS_URL, skipRedis } from './helpers.js';
import { readmeChecks } from '../../../tooling/readme.js';

gateRedis('readme.test.ts');

readmeChecks(import.meta.url, { blocks: [{ heading: 'Without the SDK', file: 'examples/guard.ts' }] });

describe.skipIf(skipRedis)('quick start against Redis', () => {
  it('runs: the first open is accepted, the replay is refused', async () => {
    vi.stubEnv('MRTR_KEYS', `k1:${generateKey()}`);
    vi.stubEnv('REDIS_URL', REDIS_URL as string);
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    try {
      await import('../examples/guard.js');
      expect(log.mock.calls).toEqual([[{ confirmed: false }], ['ERR_STATE_REPLAYED']]);
    } finally {
      log.mockRestore();
      vi.unstubAllEnvs();
    }
  });
});

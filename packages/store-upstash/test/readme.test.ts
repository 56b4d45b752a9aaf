import { generateKey } from '@mrtr/core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type UpstashRestShim, startUpstashRestShim } from '../../../scripts/upstash-rest-shim.mjs';
import { readmeChecks } from '../../../tooling/readme.js';
import { gateRedis, REDIS_URL, skipRedis } from './helpers.js';

gateRedis('readme.test.ts');

readmeChecks(import.meta.url);

describe.skipIf(skipRedis)('quick start against the REST shim', () => {
  let shim: UpstashRestShim;
  beforeAll(async () => {
    shim = await startUpstashRestShim(REDIS_URL as string);
  });
  afterAll(() => shim?.close());

  it('runs: the first open is accepted, the replay is refused', async () => {
    vi.stubEnv('MRTR_KEYS', `k1:${generateKey()}`);
    vi.stubEnv('UPSTASH_REDIS_REST_URL', shim.url);
    vi.stubEnv('UPSTASH_REDIS_REST_TOKEN', shim.token);
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

import { readFileSync } from 'node:fs';
import { generateKey } from '@mrtr/core';
import { describe, expect, it, vi } from 'vitest';
import { gateRedis, REDIS_URL, skipRedis } from './helpers.js';

const read = (path: string): string => readFileSync(new URL(path, import.meta.url), 'utf8');

gateRedis('readme.test.ts');

it('the README quick start is examples/quickstart.ts, verbatim, and at most 15 lines', () => {
  const example = read('../examples/quickstart.ts');
  const block = /## Quick start\n\n```ts\n([\s\S]*?)```/.exec(read('../README.md'))?.[1];
  expect(block).toBe(example);
  expect(example.trimEnd().split('\n').length).toBeLessThanOrEqual(15);
});

it('the README has the bench markers the benchmark app fills in', () => {
  const readme = read('../README.md');
  expect(readme.indexOf('<!-- bench:start -->')).toBeGreaterThan(0);
  expect(readme.indexOf('<!-- bench:end -->')).toBeGreaterThan(readme.indexOf('<!-- bench:start -->'));
});

describe.skipIf(skipRedis)('quick start against Redis', () => {
  it('runs: the first open is accepted, the replay is refused', async () => {
    vi.stubEnv('MRTR_KEYS', `k1:${generateKey()}`);
    vi.stubEnv('REDIS_URL', REDIS_URL as string);
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

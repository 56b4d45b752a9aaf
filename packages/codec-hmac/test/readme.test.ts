import { readFileSync } from 'node:fs';
import { generateKey } from '@mrtr/core';
import { expect, it, vi } from 'vitest';

const read = (path: string): string => readFileSync(new URL(path, import.meta.url), 'utf8');

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

it('the quick start runs: mints, opens, and the client-readable body shows the data', async () => {
  vi.stubEnv('MRTR_KEYS', `k2:${generateKey()},k1:${generateKey()}`);
  const log = vi.spyOn(console, 'log').mockImplementation(() => {});
  try {
    await import('../examples/quickstart.js');
    expect(log.mock.calls).toEqual([
      [{ step: 1, confirmed: false }, 'k2'],
      [{ step: 1, confirmed: false }],
    ]);
  } finally {
    log.mockRestore();
    vi.unstubAllEnvs();
  }
});

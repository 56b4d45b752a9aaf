// The Quick start of packages/store-cloudflare/README.md is src/quickstart.ts verbatim (type-checked with this
// example); here it is loaded under Node, as the publish check does, and its exports are those a Worker needs.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const readme = readFileSync(new URL('../../../packages/store-cloudflare/README.md', import.meta.url), 'utf8');
const block = /## Quick start\n\n```ts\n([\s\S]*?)```/.exec(readme)?.[1];

describe('the store-cloudflare README quick start', () => {
  it('is src/quickstart.ts verbatim', () => {
    expect(block).toBe(readFileSync(new URL('../src/quickstart.ts', import.meta.url), 'utf8'));
  });

  it('loads under Node and exports the Durable Object class and a fetch handler that fails closed without MRTR_KEYS', async () => {
    const worker = await import('../src/quickstart.js');
    const { MrtrStoreObject } = await import('@mrtr/store-cloudflare');
    expect(worker.MrtrStoreObject).toBe(MrtrStoreObject);
    expect(typeof worker.default.fetch).toBe('function');
    const binding = { idFromName: () => ({}), get: () => ({ fetch: async () => ({ status: 500, text: async () => '' }) }) };
    expect(() => worker.default.fetch(new Request('http://x/mcp'), { MRTR_STORE: binding })).toThrow(/^MRTR_KEYS is not set/);
  });
});

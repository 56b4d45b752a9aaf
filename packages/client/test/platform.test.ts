import { readdirSync, readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

// One source, two builds (Node and web, like the codecs): it may use only what every runtime has.
it('the source uses nothing Node-only, so the web build runs in browsers, workers, Deno and Bun', () => {
  const dir = new URL('../src/', import.meta.url);
  for (const file of readdirSync(dir)) {
    const source = readFileSync(new URL(file, dir), 'utf8');
    expect(source, file).not.toMatch(/from 'node:|\brequire\(|\bprocess\.|\bBuffer\b|\bsetImmediate\b/);
  }
});

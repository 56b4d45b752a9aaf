import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

it('every README code block marked with a file is identical to that (type-checked) file', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/<!-- file: (\S+) -->\n```ts\n([\s\S]*?)```/g)];
  expect(blocks.map((m) => m[1])).toEqual(['examples/before.ts', 'examples/after.ts', 'examples/quickstart.ts']);
  for (const [, file, code] of blocks) {
    expect(code, file).toBe(readFileSync(join(root, file!), 'utf8'));
  }
  // The before/after pair stays within 20 lines each.
  for (const file of ['examples/before.ts', 'examples/after.ts']) {
    expect(readFileSync(join(root, file), 'utf8').trimEnd().split('\n').length, file).toBeLessThanOrEqual(20);
  }
});

it("the repository README's quick start is examples/root-quickstart.ts (type-checked here), at most 15 lines", () => {
  const readme = readFileSync(join(root, '..', '..', 'README.md'), 'utf8');
  const block = /## Quick start: protect a tool\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  const example = readFileSync(join(root, 'examples', 'root-quickstart.ts'), 'utf8');
  expect(block).toBe(example);
  expect(example.trimEnd().split('\n').length).toBeLessThanOrEqual(15);
});

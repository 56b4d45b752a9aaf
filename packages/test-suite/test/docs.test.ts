// The author guides show the reference implementations verbatim: every `<!-- verbatim: path -->` marker
// in docs/ is followed by a code block equal to that file (so the docs cannot drift from code the suites
// certify), and each guide shows at least one.
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

const root = new URL('../../../', import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, root), 'utf8');

it.each(['docs/writing-a-codec.md', 'docs/writing-a-store.md'])('%s shows its reference implementation verbatim', (doc) => {
  const blocks = [...read(doc).matchAll(/<!-- verbatim: (\S+) -->\n```ts\n([\s\S]*?)```/g)];
  expect(blocks.length).toBeGreaterThan(0);
  for (const [, path, code] of blocks) expect(code, path).toBe(read(path!));
});

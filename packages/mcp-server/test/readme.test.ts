import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

it('every README code block marked with a file is identical to that (type-checked) file', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/<!-- file: (\S+) -->\n```ts\n([\s\S]*?)```/g)];
  expect(blocks.map((m) => m[1])).toEqual([
    'examples/before.ts',
    'examples/after.ts',
    'examples/quickstart.ts',
    'examples/idempotency.ts',
    'examples/fetch.ts',
  ]);
  for (const [, file, code] of blocks) {
    expect(code, file).toBe(readFileSync(join(root, file!), 'utf8'));
  }
  // Its install line names every package the quick start imports, and every other package any block imports
  // (zod too: it must not resolve only through hoisting); the other blocks may use the alternative codec.
  const install = /## Install\n\n```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
  const installed = new Set([...install.matchAll(/^npm i(?:nstall)? (.+)$/gm)].flatMap((m) => m[1]!.replace(/\s+#.*$/, '').split(/\s+/)));
  const imports = (code: string) =>
    [...code.matchAll(/from '((?:@[^/']+\/)?[^/']+)[^']*'/g)].map((m) => m[1]!).filter((name) => !name.startsWith('node:'));
  const needed = blocks.flatMap(([, file, code]) =>
    imports(code!).filter((name) => file === 'examples/quickstart.ts' || !name.startsWith('@mrtr/')),
  );
  expect(needed.filter((name) => !installed.has(name))).toEqual([]);
  // The before/after pair stays within 20 lines each.
  for (const file of ['examples/before.ts', 'examples/after.ts']) {
    expect(readFileSync(join(root, file), 'utf8').trimEnd().split('\n').length, file).toBeLessThanOrEqual(20);
  }
});

it("the repository README's quick start is examples/root-quickstart.ts and examples/root-quickstart-client.ts (type-checked by tsconfig.node-http.json), and its install line names every package they import", () => {
  const readme = readFileSync(join(root, '..', '..', 'README.md'), 'utf8');
  const section = /## Quick start: protect a tool\n([\s\S]*?)\n## /.exec(readme)?.[1] ?? '';
  const blocks = [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  const files = [
    ['examples/root-quickstart.ts', 35],
    ['examples/root-quickstart-client.ts', 16],
  ] as const;
  expect(blocks).toHaveLength(files.length);
  for (const [i, [file, maxLines]] of files.entries()) {
    const example = readFileSync(join(root, file), 'utf8');
    expect(blocks[i], file).toBe(example);
    expect(example.trimEnd().split('\n').length, file).toBeLessThanOrEqual(maxLines);
  }
  const install = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
  const installed = new Set([...install.matchAll(/^npm i(?:nstall)? (.+)$/gm)].flatMap((m) => m[1]!.replace(/\s+#.*$/, '').split(/\s+/)));
  const imported = new Set(
    blocks
      .flatMap((code) => [...code!.matchAll(/from '((?:@[^/']+\/)?[^/']+)[^']*'/g)].map((m) => m[1]!))
      .filter((name) => !name.startsWith('node:')),
  );
  expect([...imported].filter((name) => !installed.has(name))).toEqual([]);
});

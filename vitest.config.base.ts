import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Inside the workspace a package's tests import its siblings from source, so no test waits for another
// package's build: every public subpath's exports lead with "@mrtr/source" (./src/*.ts), and each becomes an
// exact alias here. Aliases, not `ssr.resolve.conditions`: vitest passes conditions on to its workers as
// `--conditions`, and from there to every `require()` of a built file and every forked child, which then
// loaded .ts files. Tests that run the built files themselves still need a build: see each package's turbo.json.
const packages = new URL('./packages/', import.meta.url);
const literal = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
const sourceAliases = readdirSync(packages).flatMap((dir) => {
  const manifest = new URL(`${dir}/package.json`, packages);
  if (!existsSync(manifest)) return [];
  const { name, exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { name: string; exports?: Record<string, unknown> };
  return Object.entries(exports ?? {}).flatMap(([subpath, target]) => {
    const source = typeof target === 'object' && target !== null ? (target as Record<string, unknown>)['@mrtr/source'] : undefined;
    if (typeof source !== 'string') return [];
    const specifier = subpath === '.' ? name : `${name}/${subpath.slice(2)}`;
    return [{ find: new RegExp(`^${literal(specifier)}$`), replacement: fileURLToPath(new URL(`${dir}/${source}`, packages)) }];
  });
});

export default defineConfig({
  resolve: { alias: sourceAliases },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});

import { defineConfig } from 'tsup';
import { emptyDist, packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source: Node (sync node:crypto) and WebCrypto-only runtimes (async subtle).
// The `#crypto` import in package.json picks the provider by condition ("node" or default), and `exports`
// picks the build the same way; the types are shared. Shared code lives in split chunks, so every entry
// point holds one copy of every class.
const entry: Record<string, string> = { index: 'src/index.ts' };
for (const name of ['errors', 'events', 'keys', 'codec', 'store', 'tasks', 'adapter', 'options', 'encoding']) {
  entry[name] = `src/entry-${name}.ts`;
}
emptyDist(import.meta.url);
export default defineConfig([
  // `/node` (key files) exists only in the Node build.
  packageConfig({ entry: { ...entry, node: 'src/node.ts' }, splitting: true, clean: false }),
  packageConfig({
    entry: Object.fromEntries(Object.entries(entry).map(([name, file]) => [`web/${name}`, file])),
    splitting: true,
    dts: false,
    clean: false,
    platform: 'neutral',
  }),
]);

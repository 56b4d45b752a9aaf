import { defineConfig } from 'tsup';
import { emptyDist, packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source: Node (sync node:crypto) and WebCrypto-only runtimes (async subtle).
// The `#crypto` import in package.json picks the provider by condition ("node" or default), and `exports`
// picks the build the same way; the types are shared. Shared code lives in split chunks, so the main
// entry and `/authoring` hold one copy of every class.
const entry = { index: 'src/index.ts', authoring: 'src/authoring.ts' };
emptyDist(import.meta.url);
export default defineConfig([
  // `/node` (key files) exists only in the Node build.
  packageConfig({ entry: { ...entry, node: 'src/node.ts' }, splitting: true, clean: false }),
  packageConfig({
    entry: { 'web/index': entry.index, 'web/authoring': entry.authoring },
    splitting: true,
    dts: false,
    clean: false,
    platform: 'neutral',
  }),
]);

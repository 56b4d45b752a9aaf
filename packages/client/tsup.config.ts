import { defineConfig } from 'tsup';
import { emptyDist, packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source, like the codecs: Node, and other runtimes (browsers, workers, Deno, Bun). The
// source uses only what both have (fetch-era globals, AbortSignal, crypto.randomUUID), so the builds differ only
// in their platform; `exports` picks one by the "node" condition.
emptyDist(import.meta.url);

export default defineConfig([
  packageConfig({ clean: false }),
  packageConfig({
    entry: { 'web/index': 'src/index.ts' },
    dts: { compilerOptions: { module: 'ESNext', moduleResolution: 'Bundler', customConditions: [] } },
    clean: false,
    platform: 'neutral',
  }),
]);

import { defineConfig } from 'tsup';
import { emptyDist, packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source: Node (synchronous; msgpackr packs) and other runtimes (async WebCrypto
// key derivation; src/pack.ts packs). The `#engine` import in package.json picks the engine by condition
// ("node" or default), and `exports` picks the build the same way. Each build has its own declarations:
// the web build's are made with bundler resolution (no "node" condition), so `#engine` is web.ts there
// and `createAeadCodec` returns promises.
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

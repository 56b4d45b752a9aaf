import { defineConfig } from 'tsup';
import { emptyDist, packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source: Node (sync node:crypto) and other runtimes (jose on WebCrypto). The
// `#engine` import in package.json picks the engine by condition ("node" or default), and `exports` picks
// the build the same way; the types are shared.
emptyDist(import.meta.url);
export default defineConfig([
  packageConfig({ clean: false }),
  packageConfig({ entry: { 'web/index': 'src/index.ts' }, dts: false, clean: false, platform: 'neutral' }),
]);

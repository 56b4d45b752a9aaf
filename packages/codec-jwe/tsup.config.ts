import path from 'node:path';
import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source: Node (sync node:crypto) and other runtimes (jose on WebCrypto).
// `exports` picks one with the "node" condition; the types are shared.
export default defineConfig([
  packageConfig(),
  packageConfig({
    entry: { 'web/index': 'src/index.ts' },
    dts: false,
    clean: false,
    platform: 'neutral',
    esbuildPlugins: [
      {
        name: 'mrtr-jwe-web-engine',
        setup(build) {
          build.onResolve({ filter: /engine\/impl\.js$/ }, () => ({ path: path.resolve('src/engine/web.ts') }));
        },
      },
    ],
  }),
]);

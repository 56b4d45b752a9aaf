import path from 'node:path';
import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// Two builds of the same source: Node (sync node:crypto) and WebCrypto-only runtimes (async subtle).
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
        name: 'mrtr-web-crypto',
        setup(build) {
          build.onResolve({ filter: /crypto\/impl\.js$/ }, () => ({ path: path.resolve('src/crypto/web.ts') }));
        },
      },
    ],
  }),
]);

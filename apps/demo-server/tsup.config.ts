import { defineConfig } from 'tsup';

export default defineConfig([
  // The mrtr-demo binary and the bundled client: ESM files for Node, every dependency left external
  // (resolved from node_modules). Not cleaned: the playground build writes into dist/public at the same time.
  {
    entry: { cli: 'src/cli.ts', client: 'src/client-cli.ts' },
    format: ['esm'],
    platform: 'node',
    target: 'node20',
    outDir: 'dist',
    clean: false,
    sourcemap: true,
    splitting: false,
    dts: false,
    skipNodeModulesBundle: true,
    banner: { js: '#!/usr/bin/env node' },
  },
  // The playground page: the official MCP client and the page's code in one browser bundle (esbuild), served by
  // mrtr-demo at /playground.js next to the static index.html and playground.css copied from src/playground/public.
  {
    entry: { playground: 'src/playground/app.ts' },
    format: ['esm'],
    platform: 'browser',
    target: 'es2022',
    outDir: 'dist/public',
    publicDir: 'src/playground/public',
    clean: false,
    sourcemap: false,
    minify: true,
    splitting: false,
    dts: false,
    noExternal: [/.*/],
    tsconfig: 'src/playground/tsconfig.json',
  },
]);

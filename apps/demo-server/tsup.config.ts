import { defineConfig } from 'tsup';

// The mrtr-demo binary: one ESM file for Node, every dependency left external (resolved from node_modules).
export default defineConfig({
  entry: { cli: 'src/cli.ts' },
  format: ['esm'],
  platform: 'node',
  target: 'node20',
  outDir: 'dist',
  clean: true,
  sourcemap: true,
  splitting: false,
  dts: false,
  skipNodeModulesBundle: true,
  banner: { js: '#!/usr/bin/env node' },
});

import { fileURLToPath } from 'node:url';
import { mergeConfig } from 'vitest/config';
import base from '../../vitest.config.base.ts';

// The quick start imports the package by name; tests run it against the source, not dist.
export default mergeConfig(base, {
  resolve: { alias: { '@mrtr/store-upstash': fileURLToPath(new URL('./src/index.ts', import.meta.url)) } },
});

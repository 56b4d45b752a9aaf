import type { Options } from 'tsup';

/** Shared build settings for every published package: ESM + CJS, bundled types, ES2022. */
export function packageConfig(overrides: Options = {}): Options {
  return {
    entry: ['src/index.ts'],
    format: ['esm', 'cjs'],
    dts: true,
    sourcemap: true,
    clean: true,
    target: 'es2022',
    platform: 'node',
    splitting: false,
    treeshake: true,
    ...overrides,
  };
}

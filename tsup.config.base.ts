import { rmSync } from 'node:fs';
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

/**
 * For a package built twice at once (a Node build and a web build into the same dist): empty dist once,
 * before either starts, and pass `clean: false` to both. tsup cleans per build — the JavaScript at the
 * start of a build, every `.d.ts` under dist when that build's declarations are written — so a cleaning
 * build could delete what the other had already written (CI lost `dist/web/index.d.ts` that way).
 */
export function emptyDist(configUrl: string): void {
  rmSync(new URL('dist', configUrl), { recursive: true, force: true });
}

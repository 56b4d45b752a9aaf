#!/usr/bin/env node
// `pnpm build`: src/handler.ts → dist/handler.mjs, one ES module for the Lambda Node.js runtime (esbuild). The
// dependencies stay imports (`packages: 'external'`): deploy dist/ with node_modules (`npm ci --omit=dev`), or drop
// `packages: 'external'` to inline them. `pnpm dev` bundles the same way before each start.
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

export const outfile = fileURLToPath(new URL('../dist/handler.mjs', import.meta.url));

export async function bundle() {
  await build({
    entryPoints: [fileURLToPath(new URL('../src/handler.ts', import.meta.url))],
    outfile,
    bundle: true,
    packages: 'external',
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'error',
  });
  return outfile;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) console.log(`${await bundle()}`);

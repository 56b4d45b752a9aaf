#!/usr/bin/env node
// Checks the two faces of every package's `exports` (run by the root `lint`):
// - in the workspace, each public subpath leads with the "@mrtr/source" condition, a file under ./src that
//   exists, so type-checks and tests resolve sibling packages from source without waiting for their build
//   (tsconfig.base.json `customConditions`; vitest.config.base.ts makes an alias of each);
// - the tarball gets `publishConfig.exports`, which pnpm puts in its place when packing: it must be the same
//   map without that condition (so nothing published points into ./src, which is not in `files`).
//
//   node scripts/check-exports.mjs        exits 1 and names each problem
import { existsSync, readdirSync, readFileSync } from 'node:fs';

const SOURCE = '@mrtr/source';
const root = new URL('../packages/', import.meta.url);
const problems = [];

/** The exports map as published: every target without the workspace-only condition. */
const withoutSource = (target) =>
  target !== null && typeof target === 'object' && !Array.isArray(target)
    ? Object.fromEntries(Object.entries(target).flatMap(([key, value]) => (key === SOURCE ? [] : [[key, withoutSource(value)]])))
    : target;

for (const dir of readdirSync(root).sort()) {
  const file = new URL(`${dir}/package.json`, root);
  if (!existsSync(file)) continue;
  const manifest = JSON.parse(readFileSync(file, 'utf8'));
  if (manifest.private) continue;
  const where = `packages/${dir}/package.json`;
  const { exports } = manifest;
  if (exports === null || typeof exports !== 'object' || Array.isArray(exports)) {
    problems.push(`${where}: exports must be a map of subpaths`);
    continue;
  }
  for (const [subpath, target] of Object.entries(exports)) {
    if (typeof target === 'string') continue; // a plain file such as ./package.json: the same in both faces
    const [first, source] = Object.entries(target)[0] ?? [];
    if (first !== SOURCE) {
      problems.push(`${where}: exports["${subpath}"] must lead with the "${SOURCE}" condition (conditions match in order)`);
    } else if (typeof source !== 'string' || !/^\.\/src\/.+\.ts$/.test(source) || !existsSync(new URL(`${dir}/${source}`, root))) {
      problems.push(`${where}: exports["${subpath}"]["${SOURCE}"] must name an existing ./src/*.ts file, not ${JSON.stringify(source)}`);
    }
  }
  const published = manifest.publishConfig?.exports;
  const filesOnly = Object.values(exports).every((target) => typeof target === 'string'); // e.g. a CLI: nothing to import
  // Compared as text: the order of conditions is part of their meaning.
  if (!(filesOnly && published === undefined) && JSON.stringify(published) !== JSON.stringify(withoutSource(exports))) {
    problems.push(`${where}: publishConfig.exports must equal exports without the "${SOURCE}" condition (the map the tarball gets)`);
  }
}

if (problems.length) {
  for (const problem of problems) console.error(`check-exports: ${problem}`);
  process.exit(1);
}
console.log('check-exports: every package leads with its source in the workspace and publishes the built files only');

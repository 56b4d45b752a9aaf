// `mrtr keygen` (and keys, inspect, doctor --store memory) must not need a database driver: the stores and their
// drivers are optional peer dependencies, imported only by the doctor check that uses them (pack.test.ts runs
// the CLI installed without them).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CLI } from './helpers.js';

const OPTIONAL = [
  '@mrtr/store-redis',
  '@mrtr/store-sql',
  '@mrtr/store-upstash',
  '@mrtr/store-dynamodb',
  'ioredis',
  'pg',
  'better-sqlite3',
  '@upstash/redis',
  '@aws-sdk/client-dynamodb',
];
/** Loaded by their store package, never by the CLI itself. */
const LOADED_BY_STORE = ['ioredis', '@upstash/redis'];
const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as Record<
  string,
  Record<string, unknown> | undefined
>;

describe('the store drivers are optional peers, loaded on use', () => {
  it.each(OPTIONAL)('%s is an optional peer dependency and not a dependency', (name) => {
    expect(manifest.dependencies?.[name]).toBeUndefined();
    expect(manifest.peerDependencies?.[name]).toEqual(expect.any(String));
    expect(manifest.peerDependenciesMeta?.[name]).toEqual({ optional: true });
  });

  it('the built CLI imports them only dynamically; its static imports are Node built-ins and @mrtr/core', () => {
    const text = readFileSync(CLI, 'utf8');
    const statics = [...text.matchAll(/^import\s[^'"]*['"]([^'"]+)['"];?$/gm)].map((m) => m[1]);
    expect(statics.length).toBeGreaterThan(0);
    for (const specifier of statics)
      expect(specifier).toMatch(
        /^(?:node:)?(?:crypto|fs|fs\/promises|module|util|path|url|os|process)$|^@mrtr\/core(?:\/(?:errors|events|keys|codec|store|tasks|adapter|options|encoding))?$/,
      );
    expect(text).not.toMatch(/\brequire\(/);
    // ioredis is loaded by @mrtr/store-redis and @upstash/redis by @mrtr/store-upstash; the CLI itself imports the rest on use.
    for (const name of OPTIONAL.filter((n) => !LOADED_BY_STORE.includes(n))) expect(text).toContain(`import('${name}')`);
  });
});

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Inside the workspace a package's tests import its siblings from source, so no test waits for another
// package's build: every public subpath's exports lead with "@mrtr/source" (./src/*.ts), and each becomes an
// exact alias here. Aliases, not `ssr.resolve.conditions`: vitest passes conditions on to its workers as
// `--conditions`, and from there to every `require()` of a built file and every forked child, which then
// loaded .ts files. Tests that run the built files themselves still need a build: see each package's turbo.json.
const packages = new URL('./packages/', import.meta.url);
const literal = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
const sourceAliases = readdirSync(packages).flatMap((dir) => {
  const manifest = new URL(`${dir}/package.json`, packages);
  if (!existsSync(manifest)) return [];
  const { name, exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { name: string; exports?: Record<string, unknown> };
  return Object.entries(exports ?? {}).flatMap(([subpath, target]) => {
    const source = typeof target === 'object' && target !== null ? (target as Record<string, unknown>)['@mrtr/source'] : undefined;
    if (typeof source !== 'string') return [];
    const specifier = subpath === '.' ? name : `${name}/${subpath.slice(2)}`;
    return [{ find: new RegExp(`^${literal(specifier)}$`), replacement: fileURLToPath(new URL(`${dir}/${source}`, packages)) }];
  });
});

// The services the tests use, at their default local addresses when REDIS_URL / DATABASE_URL are unset: the README's
// test command, run as it is on a machine where Redis and PostgreSQL answer on their usual ports, runs every test.
// A test whose service answers nowhere skips with a printed reason (or fails under MRTR_REQUIRE_SERVICES=1).
const answers = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
const LOCAL_SERVICES = [
  { variable: 'REDIS_URL', port: 6379, url: 'redis://127.0.0.1:6379' },
  { variable: 'DATABASE_URL', port: 5432, url: 'postgres://postgres@127.0.0.1:5432/test' },
] as const;
for (const { variable, port, url } of LOCAL_SERVICES) {
  if (process.env[variable] !== undefined && process.env[variable] !== '') continue;
  if (await answers(port)) process.env[variable] = url;
}

export default defineConfig({
  resolve: { alias: sourceAliases },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});

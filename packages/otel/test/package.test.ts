// `@opentelemetry/api` must be the application's copy. A bundled copy keeps its own version and refuses the
// global providers an older API registered (an app on 1.8.0 with a bundled 1.9.1 silently recorded nothing), so
// the API is a peer dependency and the built files import it by name. Runs against the built dist (turbo builds
// the package before its tests).
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

const root = new URL('../', import.meta.url);
const manifest = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as Record<string, Record<string, string> | undefined>;
const dist = (file: string): string => {
  const url = new URL(`dist/${file}`, root);
  if (!existsSync(url)) throw new Error(`dist/${file} is missing: build @mrtr/otel first (pnpm --filter @mrtr/otel build)`);
  return readFileSync(url, 'utf8');
};

describe('@opentelemetry/api is the application’s', () => {
  it('is a peer dependency (and a dev dependency for the tests), never a dependency', () => {
    expect(manifest.peerDependencies?.['@opentelemetry/api']).toMatch(/^\^1\.\d+\.\d+$/);
    expect(manifest.peerDependenciesMeta?.['@opentelemetry/api']).toBeUndefined();
    expect(manifest.dependencies?.['@opentelemetry/api']).toBeUndefined();
    expect(manifest.devDependencies?.['@opentelemetry/api']).toBeDefined();
    // The lowest API the peer range admits has the metrics API this package uses (stable since 1.3.0).
    const floor = /^\^1\.(\d+)\./.exec(manifest.peerDependencies!['@opentelemetry/api']!)!;
    expect(Number(floor[1])).toBeGreaterThanOrEqual(3);
    expect(Number(floor[1])).toBeLessThanOrEqual(8); // an app on 1.8.0 is in range
  });

  it('the built ESM and CJS files import it by name and hold none of its code', () => {
    const esm = dist('index.js');
    const cjs = dist('index.cjs');
    expect(esm).toMatch(/^import \{[^}]*\} from '@opentelemetry\/api';$/m);
    expect(cjs).toMatch(/require\('@opentelemetry\/api'\)/);
    for (const text of [esm, cjs]) {
      expect(text).not.toContain('node_modules');
      expect(text).not.toContain('opentelemetry.js.api.'); // the API's global registry key
      expect(text).not.toMatch(/_makeCompatibilityCheck|DiagAPI|NoopMeterProvider|NonRecordingSpan/);
    }
  });

  it('the built CJS file loads', () => {
    const require = createRequire(new URL('dist/index.cjs', root));
    dist('index.cjs');
    const otel = require('./index.cjs') as { createMrtrTelemetry: unknown };
    expect(typeof otel.createMrtrTelemetry).toBe('function');
  });
});

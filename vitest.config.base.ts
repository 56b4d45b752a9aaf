import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Inside the workspace a package's tests import its siblings from source: every public subpath's
  // exports lead with the "@mrtr/source" condition (./src/*.ts), so no test waits for another package's
  // build. The published manifest drops it (publishConfig.exports). Tests that run the built files
  // themselves (a spawned server, the CJS/ESM pair) still need a build: see each package's turbo.json.
  // Vite's "module" condition is left out, as Node leaves it out: with it a dependency's bundler-only ESM
  // (@opentelemetry/api's build/esm, extensionless imports) was handed to Node and failed to load.
  ssr: { resolve: { conditions: ['@mrtr/source', ...defaultServerConditions.filter((c) => c !== 'module')] } },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});

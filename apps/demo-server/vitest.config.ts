import { defineConfig, mergeConfig } from 'vitest/config';
import base from '../../vitest.config.base.ts';

// The tests spawn the built `mrtr-demo` (dist/cli.js): global-setup builds it first.
export default mergeConfig(base, defineConfig({ test: { globalSetup: ['test/global-setup.ts'] } }));

import { mergeConfig } from 'vitest/config';
import base from '../../vitest.config.base.ts';

// The tests run the built CLI (dist/cli.js) as a child process; the global set-up builds it when stale.
export default mergeConfig(base, { test: { globalSetup: ['test/global-setup.ts'] } });

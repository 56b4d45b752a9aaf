import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// The Lua shared with `@mrtr/store-redis` (its `scripts` subpath: no ioredis, no Node built-ins) is built in, so
// this package depends on neither at run time.
export default defineConfig(packageConfig({ noExternal: ['@mrtr/store-redis'] }));

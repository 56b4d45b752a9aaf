import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// `scripts`: the Lua and value rules `@mrtr/store-upstash` shares, without ioredis or Node built-ins.
export default defineConfig(packageConfig({ entry: ['src/index.ts', 'src/scripts.ts'] }));

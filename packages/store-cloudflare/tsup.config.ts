import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// Runs in workerd (the object and the clients) and loads in Node (types, tests): no platform API is imported.
export default defineConfig(packageConfig({ platform: 'neutral' }));

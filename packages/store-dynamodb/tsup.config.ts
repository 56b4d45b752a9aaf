import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

export default defineConfig(packageConfig());

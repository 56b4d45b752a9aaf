import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// A bin-only package: one ESM entry (its shebang is kept), no type declarations to publish.
export default defineConfig(packageConfig({ entry: ['src/cli.ts'], format: ['esm'], dts: false }));

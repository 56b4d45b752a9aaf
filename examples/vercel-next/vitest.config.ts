import { mergeConfig } from 'vitest/config';
import base from '../../vitest.config.base.ts';

// The workspace packages are imported from source (the base config's aliases): no build needed.
export default mergeConfig(base, {});

export { default } from '../../vitest.config.base.ts';

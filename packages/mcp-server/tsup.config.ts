import { defineConfig } from 'tsup';
import { packageConfig } from '../../tsup.config.base.ts';

// One entry per public subpath (package.json `exports`): the root, `/tasks` and `/http`. Shared code lives in split
// chunks, so every entry holds one copy of each module.
export default defineConfig(
  packageConfig({
    entry: { index: 'src/index.ts', tasks: 'src/tasks/index.ts', http: 'src/http/index.ts' },
    splitting: true,
  }),
);

import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { maxLines: 20, blocks: [{ heading: 'Without the SDK', file: 'examples/guard.ts' }] });

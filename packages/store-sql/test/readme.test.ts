import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { maxLines: 20 });

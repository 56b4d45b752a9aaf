import { readmeChecks } from '../../../tooling/readme.js';

readmeChecks(import.meta.url, { benchMarkers: false });

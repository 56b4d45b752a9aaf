import { codecCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';
import { createJweCodec } from '../src/index.js';

// The Node build (synchronous node:crypto engine), through the public factory.
codecCompliance(it, (keys) => createJweCodec(keys), {
  name: 'jwe',
  factoryWithCap: (keys, maxTokenBytes) => createJweCodec(keys, { maxTokenBytes }),
});

import { codecCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';
import { createHmacCodec } from '../src/index.js';

codecCompliance(it, (keys) => createHmacCodec(keys), {
  name: 'hmac',
  factoryWithCap: (keys, maxTokenBytes) => createHmacCodec(keys, { maxTokenBytes }),
});

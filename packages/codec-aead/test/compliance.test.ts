import { codecCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';
import { createAeadCodec } from '../src/index.js';

codecCompliance(it, (keys) => createAeadCodec(keys), {
  name: 'aead',
  factoryWithCap: (keys, maxTokenBytes) => createAeadCodec(keys, { maxTokenBytes }),
});

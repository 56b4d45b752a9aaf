import { codecCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';
import { createCodecWithEngine } from '../src/codec.js';
import { engine as webEngine } from '../src/engine/web.js';

// The default (non-Node) build: the same codec on jose + WebCrypto, as dist/web/index.js wires it.
codecCompliance(it, (keys) => createCodecWithEngine(webEngine, keys), {
  name: 'jwe-web',
  factoryWithCap: (keys, maxTokenBytes) => createCodecWithEngine(webEngine, keys, { maxTokenBytes }),
});

import { codecCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';
import { createCodec } from '../src/engine/web.js';

// The default (non-Node) build: the same codec on WebCrypto HMAC (sign/verify), as dist/web/index.js
// wires it. (Here the ring derives synchronously; the other runtimes in scripts/ci-runtimes.sh run it
// with async WebCrypto HKDF too.)
codecCompliance(it, (keys) => createCodec(keys, undefined), {
  name: 'hmac-web',
  factoryWithCap: (keys, maxTokenBytes) => createCodec(keys, { maxTokenBytes }),
});

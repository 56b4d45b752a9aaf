// compliance.test.ts: run with `npx vitest run`. Swap in your own factories; these published ones pass.
import { createHmacCodec } from '@mrtr/codec-hmac';
import { createMemoryStore } from '@mrtr/store-memory';
import { codecCompliance, storeCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';

codecCompliance(it, createHmacCodec, {
  factoryWithCap: (keys, maxTokenBytes) => createHmacCodec(keys, { maxTokenBytes }), // for the linearity checks
});
// sharedBackend: false — two instances of an in-process store do not see each other's ids; outcomes: true — it records
// outcomes, so the factory passes on the outcome bounds the suite gives it.
storeCompliance(it, (options) => createMemoryStore(options), { sharedBackend: false, outcomes: true });

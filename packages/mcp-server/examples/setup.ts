import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';

export const keys = KeyRing.generate();
export const codec = createHmacCodec({ keys });
export const store = createMemoryStore();

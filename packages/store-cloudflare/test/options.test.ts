import { describe, expect, it } from 'vitest';
import { createDurableObjectStore, createDurableObjectTaskStore, MrtrStoreObject } from '../src/index.js';

// No Worker needed: an unknown option is refused at construction, before any call to an object.
const objects = { idFromName: () => ({}), get: () => ({}) } as never;

describe('options of the Durable Object stores', () => {
  it('an unknown option is refused, naming it and the closest known name', () => {
    expect(() => createDurableObjectStore({ objects, shard: 2 } as never)).toThrow(
      new TypeError('createDurableObjectStore: unknown option "shard"; did you mean "shards"?'),
    );
    expect(() => createDurableObjectTaskStore({ objects, maxRecordChar: 10 } as never)).toThrow(
      new TypeError('createDurableObjectTaskStore: unknown option "maxRecordChar"; did you mean "maxRecordChars"?'),
    );
    const state = { storage: { sql: { exec: () => ({ toArray: () => [] }) }, transactionSync: (f: () => void) => f() } } as never;
    expect(() => new MrtrStoreObject(state, undefined, { nwo: () => 0 } as never)).toThrow(
      new TypeError('MrtrStoreObject: unknown option "nwo"; did you mean "now"?'),
    );
  });
});

import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createRedisStore, createRedisTaskStore } from '../src/index.js';

// One vocabulary across the stores: the default namespace is `''`, as in every store, keyed as `default` (the former
// default), so existing keys stay in use. No Redis needed: a client that never connects.

describe('renamed options of the Redis stores', () => {
  it('an unknown option is refused, naming it and the closest known name (before any connection)', () => {
    expect(() => createRedisStore({ commandTimeoutMS: 5 } as never)).toThrow(
      new TypeError('createRedisStore: unknown option "commandTimeoutMS"; did you mean "commandTimeoutMs"?'),
    );
    expect(() => createRedisStore({ bacth: false } as never)).toThrow(
      new TypeError('createRedisStore: unknown option "bacth"; did you mean "batch"?'),
    );
    expect(() => createRedisTaskStore({ maxUpdateAttempt: 3 } as never)).toThrow(
      new TypeError('createRedisTaskStore: unknown option "maxUpdateAttempt"; did you mean "maxUpdateAttempts"?'),
    );
  });

  it("the default namespace is '' and keeps the former default's keys: '' and 'default' are one ledger", async () => {
    const client = new Redis({ lazyConnect: true });
    try {
      const keyPrefixes = (factory: 'store' | 'tasks', namespace?: string): string => {
        const options = { client, ...(namespace === undefined ? {} : { namespace }) };
        return factory === 'store'
          ? createRedisStore({ ...options, evictionPolicyCheck: 'off' }).keyPrefix
          : createRedisTaskStore(options).keyPrefix;
      };
      for (const [factory, prefix] of [
        ['store', 'mrtr:replay:'],
        ['tasks', 'mrtr:task:'],
      ] as const) {
        expect(keyPrefixes(factory)).toBe(`${prefix}default:`);
        expect(keyPrefixes(factory, '')).toBe(`${prefix}default:`);
        expect(keyPrefixes(factory, 'default')).toBe(`${prefix}default:`);
        expect(keyPrefixes(factory, 'a:b%')).toBe(`${prefix}a%3Ab%25:`);
      }
    } finally {
      client.disconnect();
    }
  });
});

import { BackgroundError } from '@mrtr/core/authoring';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createRedisStore, createRedisTaskStore } from '../src/index.js';
import { freePort } from './helpers.js';

// Issue 22, one vocabulary across the stores: every store reports what it survives in the background through
// `onError(error: BackgroundError)`; `onWarning(message: string)`, the former name here, still works for one
// release and still receives the message alone. The default namespace is `''`, as in every store, keyed as
// `default` (the former default), so existing keys stay in use. No Redis needed: a closed port on 127.0.0.1.

describe('renamed options of the Redis stores', () => {
  it('onWarning (deprecated) still receives the message string; onError receives the BackgroundError', async () => {
    for (const factory of ['store', 'tasks'] as const) {
      const url = `redis://127.0.0.1:${await freePort()}`;
      const messages: string[] = [];
      const errors: BackgroundError[] = [];
      const report = new Promise<void>((resolve) => {
        const options = { url, connectTimeoutMs: 60_000 };
        const onWarning = (message: string) => {
          messages.push(message);
          resolve();
        };
        const onError = (error: BackgroundError) => {
          errors.push(error);
          resolve();
        };
        const old = factory === 'store' ? createRedisStore({ ...options, onWarning }) : createRedisTaskStore({ ...options, onWarning });
        const current = factory === 'store' ? createRedisStore({ ...options, onError }) : createRedisTaskStore({ ...options, onError });
        cleanups.push(
          () => old.close(),
          () => current.close(),
        );
      });
      await report;
      await waitUntil(() => messages.length === 1 && errors.length === 1);
      await Promise.all(cleanups.splice(0).map((close) => close()));
      expect(typeof messages[0]).toBe('string');
      expect(messages[0]).toMatch(/cannot reach Redis at redis:\/\/127\.0\.0\.1:\d+ at start-up/);
      expect(errors[0]).toBeInstanceOf(BackgroundError);
      expect(errors[0]?.code).toBe('STORE_UNREACHABLE');
      expect(errors[0]?.message).toBe(messages[0]);
      expect(String((errors[0]?.cause as Error)?.message)).toMatch(/ECONNREFUSED/);
    }
  });

  it('onError and onWarning given with different values is a TypeError; the same function under both is accepted', async () => {
    const client = new Redis({ lazyConnect: true });
    const one = () => {};
    const two = () => {};
    expect(() => createRedisStore({ client, onError: one, onWarning: two })).toThrow(
      new TypeError('createRedisStore: give onError (onWarning is its deprecated name), not both'),
    );
    expect(() => createRedisTaskStore({ client, onError: one, onWarning: two })).toThrow(
      new TypeError('createRedisTaskStore: give onError (onWarning is its deprecated name), not both'),
    );
    expect(() => createRedisStore({ client, onWarning: 'log' as never })).toThrow(
      new TypeError('createRedisStore: onWarning must be a function'),
    );
    const same = createRedisStore({ client, evictionPolicyCheck: 'off', onError: one, onWarning: one });
    await same.close();
    client.disconnect();
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

const cleanups: (() => Promise<void>)[] = [];

async function waitUntil(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((resolve) => setTimeout(resolve, 10));
}

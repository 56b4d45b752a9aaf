// The start-up maxmemory-policy check, against a real redis-server. It runs on a throwaway server (never
// the shared one, which other test runs use at the same time); each test sets the policy with CONFIG SET
// and the server's policy is restored afterwards.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisStoreOptions } from '../src/index.js';
import { freePort, gateRedisServer, outcome, type ThrowawayRedis, throwawayRedis, uniqueId } from './helpers.js';

const present = gateRedisServer('eviction.test.ts');

/** Keeps the eviction reports (the ledger reports, a new epoch and persistence, are tested in ledger.test.ts). */
const eviction = (warnings: string[], e: { code: string; message: string }): void => {
  if (e.code.startsWith('STORE_EVICTION')) warnings.push(`${e.code}: ${e.message}`);
};

const EVICTING = ['allkeys-lru', 'allkeys-lfu', 'allkeys-random', 'volatile-lru', 'volatile-lfu', 'volatile-random', 'volatile-ttl'];

describe.skipIf(!present)('maxmemory-policy check (throwaway redis-server)', () => {
  let server: ThrowawayRedis;
  let admin: Redis;
  let original: string;
  beforeAll(async () => {
    server = throwawayRedis(await freePort());
    await server.start();
    admin = new Redis(server.url);
    original = ((await admin.config('GET', 'maxmemory-policy')) as string[])[1] as string;
  });
  afterAll(async () => {
    await admin?.config('SET', 'maxmemory-policy', original).catch(() => {});
    await admin?.quit().catch(() => admin.disconnect());
    await server?.kill();
  });

  const withStore = async (
    options: RedisStoreOptions,
    fn: (store: ReturnType<typeof createRedisStore>, warnings: string[]) => Promise<void>,
  ) => {
    const warnings: string[] = [];
    const store = createRedisStore({
      url: server.url,
      namespace: uniqueId('ev'),
      // The ledger reports (a new epoch, persistence) are tested in ledger.test.ts.
      onError: (e) => eviction(warnings, e),
      ...options,
    });
    try {
      await fn(store, warnings);
    } finally {
      await store.close();
    }
  };

  it('noeviction is safe: no warning, consumes work', async () => {
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await withStore({}, async (store, warnings) => {
      expect(await store.consume('a', Date.now() + 60_000)).toBe(true);
      expect(await store.checkEvictionPolicy()).toEqual({ status: 'safe', policy: 'noeviction' });
      expect(warnings).toEqual([]);
    });
  });

  it('every allkeys-* and volatile-* policy is reported as evicting (our keys all have an expiry)', async () => {
    await withStore({ evictionPolicyCheck: 'off' }, async (store) => {
      for (const policy of EVICTING) {
        await admin.config('SET', 'maxmemory-policy', policy);
        expect(await store.checkEvictionPolicy()).toEqual({ status: 'evicting', policy });
      }
    });
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
  });

  it('warn: an evicting policy at start-up gives one warning naming it; consumes still work', async () => {
    await admin.config('SET', 'maxmemory-policy', 'volatile-lru');
    try {
      await withStore({ evictionPolicyCheck: 'warn' }, async (store, warnings) => {
        expect(await store.consume('a', Date.now() + 60_000)).toBe(true);
        // The check started on `ready`; awaiting it here waits for that same check (an event, not a delay).
        expect((await store.checkEvictionPolicy()).status).toBe('evicting');
        expect(warnings).toHaveLength(1);
        expect(warnings[0]).toMatch(/^STORE_EVICTION_POLICY: .*maxmemory-policy is "volatile-lru".*noeviction/);
      });
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
    }
  });

  it('default: an evicting policy is refused (consumes and claims reject, nothing written) and reported once; noeviction → it works', async () => {
    // The review finding: on allkeys-lru an outcome flood evicted another user's spent state, and her confirmed
    // action ran twice. The default no longer only warns.
    await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    try {
      await withStore({}, async (store, warnings) => {
        expect(await outcome(store.consume('d0', Date.now() + 60_000))).toBe('ERR_STORE_UNAVAILABLE');
        const claimed = await store.claim('d1', Date.now() + 60_000, 'fp').catch((e: unknown) => e);
        expect((claimed as { code?: string }).code).toBe('ERR_STORE_UNAVAILABLE');
        expect(String((claimed as { cause?: unknown }).cause)).toMatch(/allkeys-lru/);
        expect(await admin.exists(`${store.keyPrefix}d0`, `${store.keyPrefix}d1`)).toBe(0);
        expect(warnings).toHaveLength(1);
        expect(warnings[0]).toMatch(/^STORE_EVICTION_POLICY: .*"allkeys-lru".*refused/);
        await admin.config('SET', 'maxmemory-policy', 'noeviction');
        expect(await store.consume('d0', Date.now() + 60_000)).toBe(true); // re-checked while refusing
      });
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
    }
  });

  it('an injected client is checked before its first consume (default: refused)', async () => {
    await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    const client = new Redis(server.url);
    try {
      const warnings: string[] = [];
      const store = createRedisStore({ client, namespace: uniqueId('inj'), onError: (e) => eviction(warnings, e) });
      expect(await outcome(store.consume('a', Date.now() + 60_000))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await admin.exists(`${store.keyPrefix}a`)).toBe(0);
      expect((await store.checkEvictionPolicy()).status).toBe('evicting');
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/^STORE_EVICTION_POLICY: .*"allkeys-lru"/);
      await store.close();
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await client.quit();
    }
  });

  it('refuse: an evicting policy → every consume rejects ERR_STORE_UNAVAILABLE and writes nothing; noeviction → it works', async () => {
    await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    try {
      await withStore({ evictionPolicyCheck: 'refuse' }, async (store, warnings) => {
        for (let i = 0; i < 3; i++) {
          const error = await store.consume(`r${i}`, Date.now() + 60_000).catch((e: unknown) => e);
          expect((error as { code?: string }).code).toBe('ERR_STORE_UNAVAILABLE');
          expect(String((error as { cause?: unknown }).cause)).toMatch(/allkeys-lru/);
          expect(await admin.exists(`${store.keyPrefix}r${i}`)).toBe(0);
        }
        expect(warnings).toEqual([]); // refusing is the outcome; it does not also warn
        await admin.config('SET', 'maxmemory-policy', 'noeviction');
        expect(await store.consume('r0', Date.now() + 60_000)).toBe(true); // re-checked while refusing
        expect(await store.consume('r0', Date.now() + 60_000)).toBe(false);
      });
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
    }
  });

  it('CONFIG not permitted (ACL without +config, as on managed Redis): the policy is read from INFO memory', async () => {
    const user = `app${Date.now().toString(36)}`;
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '+@all', '-config');
    const url = `redis://${user}:pw@127.0.0.1:${server.port}`;
    try {
      for (const [policy, status] of [
        ['noeviction', 'safe'],
        ['volatile-lru', 'evicting'],
      ] as const) {
        await admin.config('SET', 'maxmemory-policy', policy);
        const warnings: string[] = [];
        const store = createRedisStore({ url, namespace: uniqueId('acl'), onError: (e) => eviction(warnings, e) });
        expect(await store.checkEvictionPolicy()).toEqual({ status, policy });
        expect(await outcome(store.consume('a', Date.now() + 60_000))).toBe(status === 'safe' ? true : 'ERR_STORE_UNAVAILABLE');
        expect(warnings.length).toBe(status === 'safe' ? 0 : 1);
        await store.close();
      }
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('CONFIG renamed away (unknown command): the policy is read from INFO memory', async () => {
    const hidden = throwawayRedis(await freePort(), ['--rename-command', 'CONFIG', '']);
    await hidden.start();
    try {
      const warnings: string[] = [];
      const store = createRedisStore({ url: hidden.url, namespace: uniqueId('hidden'), onError: (e) => eviction(warnings, e) });
      expect(await store.consume('a', Date.now() + 60_000)).toBe(true);
      expect(await store.checkEvictionPolicy()).toEqual({ status: 'safe', policy: 'noeviction' });
      expect(warnings).toEqual([]);
      await store.close();
    } finally {
      await hidden.kill();
    }
  });

  it('rejects a bad evictionPolicyCheck / onError', () => {
    const client = new Redis({ lazyConnect: true });
    try {
      expect(() => createRedisStore({ client, evictionPolicyCheck: 'maybe' as never })).toThrow(TypeError);
      expect(() => createRedisStore({ client, onError: 1 as never })).toThrow(TypeError);
      expect(() => createRedisStore({ client, onError: 1 as never })).toThrow(
        new TypeError('createRedisStore: onError must be a function'),
      );
    } finally {
      client.disconnect();
    }
  });
});

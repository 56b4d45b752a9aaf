import { MrtrError } from '@mrtr/core';
import type { TaskRecord } from '@mrtr/core/tasks';
import { taskStoreCompliance } from '@mrtr/test-suite';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisTaskStore, type RedisTaskStore } from '../src/index.js';
import { assertRedisReachable, gateRedis, REDIS_URL, skipRedis, uniqueId } from './helpers.js';

gateRedis('task-store.test.ts');

const task = (principal: string, extra: Partial<TaskRecord> = {}): TaskRecord => {
  const t = Date.now();
  return {
    taskId: uniqueId('task'),
    principal,
    status: 'working',
    createdAt: t,
    lastUpdatedAt: t,
    ttlMs: 600_000,
    inputRequests: {},
    askedKeys: [],
    ...extra,
  };
};

const code = async (promise: Promise<unknown>): Promise<string> => {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    if (MrtrError.is(error))
      return error.code === 'ERR_TASK_LIMIT' ? `ERR_TASK_LIMIT:${String((error as { limit?: unknown }).limit)}` : error.code;
    return (error as Error).constructor.name;
  }
};

describe.skipIf(skipRedis)('Redis task store (owned connection per store)', () => {
  const url = REDIS_URL as string;
  beforeAll(() => assertRedisReachable(url));
  taskStoreCompliance(it, (limits) => createRedisTaskStore({ url, ...limits }), { name: 'redis tasks' });
});

describe.skipIf(skipRedis)('Redis task store (injected client, not owned)', () => {
  const url = REDIS_URL as string;
  let shared: Redis | undefined;
  beforeAll(() => assertRedisReachable(url));
  afterAll(async () => {
    await shared?.quit();
  });
  taskStoreCompliance(
    it,
    (limits) => {
      shared ??= new Redis(url);
      return createRedisTaskStore({ client: shared, ...limits });
    },
    { name: 'redis tasks injected' },
  );
});

describe.skipIf(skipRedis)('Redis task store: keys, bounds and failures', () => {
  const url = REDIS_URL as string;
  let raw: Redis;
  const stores: RedisTaskStore[] = [];
  const open = (options: Parameters<typeof createRedisTaskStore>[0] = {}): RedisTaskStore => {
    const store = createRedisTaskStore({ url, namespace: uniqueId('ns'), ...options });
    stores.push(store);
    return store;
  };
  beforeAll(async () => {
    await assertRedisReachable(url);
    raw = new Redis(url);
  });
  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
    await raw.quit();
  });

  const keysOf = async (store: RedisTaskStore): Promise<string[]> => {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await raw.scan(cursor, 'MATCH', `${store.keyPrefix.replace(/[*?[\]\\]/g, '\\$&')}*`, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    return keys;
  };

  it('a principal with newlines, braces and 10 KiB stays bounded, and only its hash reaches key names', async () => {
    const store = open({ maxLivePerPrincipal: 2, maxPerPrincipal: 3 });
    const weird = `{evil}\r\n*3\r\n$3\r\nDEL{}:${'x'.repeat(10 * 1024)}`;
    const first = task(weird);
    await store.create(first);
    await store.create(task(weird));
    expect(await code(store.create(task(weird)))).toBe('ERR_TASK_LIMIT:live');
    // Principals that differ only after the braces, or share the braces, are counted apart.
    await store.create(task(`${weird}y`));
    await store.create(task('{evil}'));
    await store.update(first.taskId, (r) => ({ ...r, status: 'completed', lastUpdatedAt: Date.now() }));
    await store.create(task(weird));
    expect(await code(store.create(task(weird, { status: 'completed' })))).toBe('ERR_TASK_LIMIT:kept');
    expect((await store.get(first.taskId))?.principal).toBe(weird);
    const keys = await keysOf(store);
    // 5 tasks; the bookkeeping: all tasks, the holders of final tasks, a kept and a live set for each of the 3
    // principals, and a final set for the one with a final task.
    expect(keys).toHaveLength(5 + 2 + 3 * 2 + 1);
    for (const key of keys) {
      expect(key.length).toBeLessThan(store.keyPrefix.length + 100);
      expect(key.slice(store.keyPrefix.length)).toMatch(
        /^(t:\{[A-Za-z0-9_-]{43}\}|r:\{[A-Za-z0-9_-]{43}\}:(a|w|[klf]:[A-Za-z0-9_-]{43}))$/,
      );
      // Every key expires (tasks at their expiry, the sets with their latest entry).
      expect(await raw.pttl(key)).toBeGreaterThan(0);
    }
  });

  it('a task id with braces or a 256-character id works; a longer one is a TypeError', async () => {
    const store = open();
    const braces = task('alice', { taskId: '{a}b{c}' });
    await store.create(braces);
    expect((await store.get('{a}b{c}'))?.taskId).toBe('{a}b{c}');
    expect(await store.get('{a}b{c')).toBeUndefined();
    const long = task('alice', { taskId: 'y'.repeat(256) });
    await store.create(long);
    expect((await store.get(long.taskId))?.taskId).toBe(long.taskId);
    expect(await code(store.create(task('alice', { taskId: 'y'.repeat(257) })))).toBe('TypeError');
    expect(await store.get('y'.repeat(10_000))).toBeUndefined();
  });

  it('a duplicate id is refused without touching the counts', async () => {
    const store = open({ maxLivePerPrincipal: 2, maxPerPrincipal: 2 });
    const first = task('alice');
    await store.create(first);
    expect(await code(store.create({ ...first }))).toBe('Error'); // same principal
    expect(await code(store.create({ ...first, principal: 'bob' }))).toBe('Error'); // another principal
    await store.create(task('alice'));
    await store.create(task('bob'));
    await store.create(task('bob'));
    expect(await code(store.create(task('bob')))).toBe('ERR_TASK_LIMIT:live');
  });

  it('a corrupt or foreign value is ERR_STORE_UNAVAILABLE, never absent: create, get and update leave it alone', async () => {
    const store = open();
    const good = task('alice');
    await store.create(good);
    const [key] = (await keysOf(store)).filter((k) => k.includes(':t:'));
    const values = [
      'not a record',
      `${'v'.repeat(22)}{"taskId": 1}`,
      `${'v'.repeat(22)}${JSON.stringify({ ...good, taskId: 'another id' })}`,
      `${'v'.repeat(22)}${JSON.stringify(good).slice(0, -1)}`,
    ];
    for (const value of values) {
      await raw.set(key as string, value, 'PX', 60_000);
      expect(await code(store.get(good.taskId))).toBe('ERR_STORE_UNAVAILABLE');
      let called = false;
      expect(
        await code(
          store.update(good.taskId, (r) => {
            called = true;
            return r;
          }),
        ),
      ).toBe('ERR_STORE_UNAVAILABLE');
      expect(called).toBe(false);
      expect(await code(store.create({ ...good }))).not.toBe('resolved');
      expect(await raw.get(key as string)).toBe(value);
    }
    // A hash where a string belongs (WRONGTYPE) also fails closed.
    await raw.del(key as string);
    await raw.hset(key as string, 'x', '1');
    expect(await code(store.get(good.taskId))).toBe('ERR_STORE_UNAVAILABLE');
    await raw.del(key as string);
  });

  it('a change that throws, or returns something else than a task record, leaves the record unchanged', async () => {
    const store = open();
    const t = task('alice');
    await store.create(t);
    await expect(
      store.update(t.taskId, () => {
        throw new RangeError('boom');
      }),
    ).rejects.toThrow(RangeError);
    expect(await code(store.update(t.taskId, () => ({ nope: true }) as unknown as TaskRecord))).toBe('TypeError');
    expect(await store.get(t.taskId)).toEqual(t);
  });

  it('on one Redis a create is one command (one script: reserve, write, nothing counted that is not written) and a task life four', async () => {
    // Issue 43: a create was the reserve script then SET NX, two round trips.
    const client = new Redis(url);
    const sent: string[] = [];
    const send = client.sendCommand.bind(client);
    client.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
      sent.push(command.name);
      return (send as (...args: unknown[]) => unknown)(command, ...rest);
    }) as typeof client.sendCommand;
    try {
      const store = createRedisTaskStore({ client, namespace: uniqueId('one') });
      await store.ready();
      const t = task('alice');
      await store.create(t);
      await store.create(t).catch(() => undefined);
      sent.length = 0;
      const other = task('bob');
      await store.create(other);
      expect(sent.filter((name) => name !== 'script')).toEqual(['evalsha']);
      await store.update(other.taskId, (r) => ({ ...r, status: 'completed', lastUpdatedAt: r.lastUpdatedAt + 1 }));
      expect((await store.get(other.taskId))?.status).toBe('completed');
      expect(sent.filter((name) => name !== 'script')).toEqual(['evalsha', 'get', 'evalsha', 'get']);
      // A duplicate id changes nothing: refused in the same script, before any bookkeeping.
      expect(await code(store.create({ ...other, principal: 'carol' }))).toBe('Error');
      expect(await code(store.create(task('carol')))).toBe('resolved');
    } finally {
      await client.quit();
    }
  });

  it('an update renews the key expiry to lastUpdatedAt + ttlMs, and a final task leaves the live set', async () => {
    const store = open({ maxLivePerPrincipal: 1, maxPerPrincipal: 4 });
    const t = task('alice', { ttlMs: 60_000 });
    await store.create(t);
    const [key] = (await keysOf(store)).filter((k) => k.includes(':t:'));
    expect(Number(await raw.call('PEXPIRETIME', key as string))).toBe(t.lastUpdatedAt + 60_000);
    const later = t.lastUpdatedAt + 5_000;
    await store.update(t.taskId, (r) => ({ ...r, lastUpdatedAt: later }));
    expect(Number(await raw.call('PEXPIRETIME', key as string))).toBe(later + 60_000);
    expect(await code(store.create(task('alice')))).toBe('ERR_TASK_LIMIT:live');
    await store.update(t.taskId, (r) => ({ ...r, status: 'cancelled' }));
    await store.create(task('alice'));
  });

  it('every bookkeeping key lives at least as long as the latest task it counts, through updates that raise the expiry and make a task final', async () => {
    const store = open();
    const t = task('alice', { ttlMs: 60_000 });
    await store.create(t);
    await store.create(task('alice', { ttlMs: 30_000 }));
    const books = async () => (await keysOf(store)).filter((k) => k.slice(store.keyPrefix.length).startsWith('r:'));
    const expiries = async () => Promise.all((await books()).map(async (k) => [k, Number(await raw.call('PEXPIRETIME', k))] as const));
    let at = t.lastUpdatedAt + 60_000;
    for (const [key, expiry] of await expiries()) expect(expiry, key).toBeGreaterThanOrEqual(at);
    await store.update(t.taskId, (r) => ({ ...r, lastUpdatedAt: r.lastUpdatedAt + 5_000 }));
    at += 5_000;
    for (const [key, expiry] of await expiries()) expect(expiry, key).toBeGreaterThanOrEqual(at);
    await store.update(t.taskId, (r) => ({ ...r, status: 'completed', lastUpdatedAt: r.lastUpdatedAt + 5_000 }));
    at += 5_000;
    const after = await expiries();
    expect(after.map(([key]) => key.split(':').slice(-2)[0])).toEqual(expect.arrayContaining(['f']));
    for (const [key, expiry] of after) {
      // The live set no longer holds it (only the 30 s task); every other set does, or counts it (w).
      if (/:l:/.test(key)) continue;
      expect(expiry, key).toBeGreaterThanOrEqual(at);
    }
  });

  it('concurrent creates of one principal on four instances: the bounds hold', async () => {
    const namespace = uniqueId('shared');
    const instances = Array.from({ length: 4 }, () => open({ namespace, maxLivePerPrincipal: 5, maxPerPrincipal: 7 }));
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => code((instances[i % 4] as RedisTaskStore).create(task('alice')))),
    );
    expect(results.filter((r) => r === 'resolved')).toHaveLength(5);
    expect(results.filter((r) => r === 'ERR_TASK_LIMIT:live')).toHaveLength(35);
    const finals = await Promise.all(
      Array.from({ length: 20 }, (_, i) => code((instances[i % 4] as RedisTaskStore).create(task('alice', { status: 'completed' })))),
    );
    expect(finals.filter((r) => r === 'resolved')).toHaveLength(2);
  });

  it("maxTasks across four instances: concurrent creates into a full store take the heaviest holder's final tasks, one each, while it keeps two more; never more than maxTasks readable", async () => {
    const namespace = uniqueId('full');
    const limits = { namespace, maxLivePerPrincipal: 4, maxPerPrincipal: 10, maxTasks: 10 };
    const instances = Array.from({ length: 4 }, () => open(limits));
    const heavy = Array.from({ length: 10 }, () => task('heavy', { status: 'completed', result: { content: [] } }));
    for (const t of heavy) await (instances[0] as RedisTaskStore).create(t);
    const readable = async (ids: string[]) =>
      (await Promise.all(ids.map((id) => (instances[1] as RedisTaskStore).get(id)))).filter((t) => t !== undefined).length;
    // 8 newcomers at once, on four instances: each takes one final task of the heavy holder.
    const first = Array.from({ length: 8 }, (_, i) => task(`newcomer-${i}`));
    const results = await Promise.all(first.map((t, i) => code((instances[i % 4] as RedisTaskStore).create(t))));
    expect(results).toEqual(first.map(() => 'resolved'));
    expect(await readable(heavy.map((t) => t.taskId))).toBe(2);
    expect(await readable(first.map((t) => t.taskId))).toBe(8);
    // 4 more: the heavy holder gives up final tasks while it keeps two more than a newcomer (one more here); its
    // last one stays, as any light holder's does, and the store refuses the rest.
    const more = Array.from({ length: 4 }, (_, i) => task(`late-${i}`));
    const late = await Promise.all(more.map((t, i) => code((instances[i % 4] as RedisTaskStore).create(t))));
    expect(late.filter((r) => r === 'resolved')).toHaveLength(1);
    expect(late.filter((r) => r === 'ERR_TASK_LIMIT:store')).toHaveLength(3);
    expect(await readable([...heavy, ...first, ...more].map((t) => t.taskId))).toBe(10);
    // A task that becomes final can make room again, for its own holder only.
    const done = first[0] as TaskRecord;
    await (instances[2] as RedisTaskStore).update(done.taskId, (r) => ({ ...r, status: 'completed', lastUpdatedAt: r.lastUpdatedAt + 1 }));
    expect(await code((instances[3] as RedisTaskStore).create(task('after')))).toBe('ERR_TASK_LIMIT:store');
    await (instances[3] as RedisTaskStore).create(task(done.principal));
    expect(await (instances[0] as RedisTaskStore).get(done.taskId)).toBeUndefined();
  });

  it('update gives up after maxUpdateAttempts while the task keeps changing under it: ERR_STORE_UNAVAILABLE, the record as the others left it', async () => {
    // A client on which every compare-and-set finds that someone else wrote a new version just before it.
    const client = new Redis(url);
    const racing = new Proxy(client, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        if (prop !== 'evalsha') return value.bind(target);
        return async (...args: unknown[]) => {
          const keys = args.slice(2, 2 + Number(args[1])) as string[];
          // The compare-and-set: the task's key first (on one Redis with the bookkeeping's keys after it).
          if (keys[0]?.includes(':t:')) {
            const stored = (await raw.get(keys[0])) as string;
            await raw.set(
              keys[0],
              `${uniqueId('o')
                .replace(/[^a-z0-9]/g, '')
                .padEnd(22, 'o')
                .slice(-22)}${stored.slice(22)}`,
              'KEEPTTL',
            );
          }
          return value.apply(target, args);
        };
      },
    });
    try {
      const store = createRedisTaskStore({ client: racing, namespace: uniqueId('ns'), maxUpdateAttempts: 3 });
      const t = task('alice');
      await store.create(t);
      let runs = 0;
      const result = await code(
        store.update(t.taskId, (r) => {
          runs++;
          return { ...r, statusMessage: 'mine' };
        }),
      );
      expect(result).toBe('ERR_STORE_UNAVAILABLE');
      expect(runs).toBe(3);
      expect((await store.get(t.taskId))?.statusMessage).toBeUndefined();
    } finally {
      await client.quit();
    }
  });

  it('close() of a store on an injected client leaves the client open; the store then fails closed', async () => {
    const client = new Redis(url);
    try {
      const namespace = uniqueId('ns');
      const store = createRedisTaskStore({ client, namespace });
      await store.ready();
      const t = task('alice');
      await store.create(t);
      await store.close();
      expect(client.status).toBe('ready');
      expect(await client.ping()).toBe('PONG');
      expect(await code(store.get(t.taskId))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await code(store.create(task('alice')))).toBe('ERR_STORE_UNAVAILABLE');
      // The task is still there for another store on the same client.
      const again = createRedisTaskStore({ client, namespace });
      expect((await again.get(t.taskId))?.taskId).toBe(t.taskId);
    } finally {
      await client.quit();
    }
  });

  it('close() of an owned store closes its connection', async () => {
    const store = open();
    await store.ready();
    await store.close();
    expect(['end', 'close']).toContain((store.client as Redis).status);
  });

  it('an unreachable Redis fails closed: ERR_STORE_UNAVAILABLE, bounded in time', async () => {
    const warnings: string[] = [];
    const store = createRedisTaskStore({
      url: 'redis://127.0.0.1:1',
      connectTimeoutMs: 300,
      commandTimeoutMs: 300,
      onError: (e) => warnings.push(`${e.code}: ${e.message}`),
    });
    try {
      const started = Date.now();
      expect(await code(store.create(task('alice')))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await code(store.get('x'))).toBe('ERR_STORE_UNAVAILABLE');
      expect(await code(store.update('x', (r) => r))).toBe('ERR_STORE_UNAVAILABLE');
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(warnings.join('\n')).toContain('cannot reach Redis at redis://127.0.0.1:1');
      expect(warnings[0]).toMatch(/^STORE_UNREACHABLE: /);
    } finally {
      await store.close();
    }
    // An injected client that never answers: the store's own deadline bounds each call.
    const dead = new Redis('redis://127.0.0.1:1', { lazyConnect: true });
    dead.on('error', () => {});
    try {
      const injected = createRedisTaskStore({ client: dead, commandTimeoutMs: 200 });
      expect(await code(injected.get('x'))).toBe('ERR_STORE_UNAVAILABLE');
    } finally {
      dead.disconnect();
    }
  });

  it('options are checked at construction', () => {
    expect(() => createRedisTaskStore({ url, client: new Redis({ lazyConnect: true }) })).toThrow(TypeError);
    expect(() => createRedisTaskStore({ maxLivePerPrincipal: 0 })).toThrow(RangeError);
    expect(() => createRedisTaskStore({ maxLivePerPrincipal: 10, maxPerPrincipal: 5 })).toThrow(RangeError);
    expect(() => createRedisTaskStore({ namespace: 1 as unknown as string })).toThrow(
      new TypeError('createRedisTaskStore: namespace must be a string'),
    );
    expect(() => createRedisTaskStore({ maxUpdateAttempts: 1.5 })).toThrow(
      new TypeError('createRedisTaskStore: maxUpdateAttempts must be an integer'),
    );
    expect(() => createRedisTaskStore({ onError: 'log' as never })).toThrow(
      new TypeError('createRedisTaskStore: onError must be a function'),
    );
    expect(() => createRedisTaskStore({ maxUpdateAttempts: 0 })).toThrow(RangeError);
    expect(() => createRedisTaskStore({ maxTasks: 0 })).toThrow(
      new RangeError('createRedisTaskStore: maxTasks must be between 1 and 100000000'),
    );
    expect(() => createRedisTaskStore({ maxTasks: 2.5 })).toThrow(new TypeError('createRedisTaskStore: maxTasks must be an integer'));
    expect(() => createRedisTaskStore({ commandTimeoutMs: -1 })).toThrow(RangeError);
  });
});

// A Redis that is down when the store starts is reported at once through onError (not only by the first
// consume), `ready()` rejects ERR_STORE_UNAVAILABLE, and consumes still fail closed. Against a closed port on
// 127.0.0.1 (nothing listens there), so no service is needed; the live half needs REDIS_URL.
import { MrtrError } from '@mrtr/core';
import { BackgroundError } from '@mrtr/core/store';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { createRedisStore, createRedisTaskStore, type RedisReplayStore } from '../src/index.js';
import { freePort, gateRedis, outcome, REDIS_URL, redisServerBinary, skipRedis, throwawayRedis, uniqueId } from './helpers.js';

gateRedis('startup.test.ts');

const stores: RedisReplayStore[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

const LEDGER_REPORTS = ['STORE_LEDGER_EPOCH', 'STORE_NOT_PERSISTENT', 'STORE_PERSISTENCE_UNKNOWN'];

/** A store whose reports (their messages) arrive as a queue; `next()` resolves the next one; `codes` lists their codes. */
function watched(options: Parameters<typeof createRedisStore>[0]) {
  const warnings: string[] = [];
  const codes: string[] = [];
  const waiting: ((message: string) => void)[] = [];
  const store = createRedisStore({
    ...options,
    onError: (error) => {
      expect(error).toBeInstanceOf(BackgroundError);
      // The ledger reports (a new epoch, persistence) are tested in ledger.test.ts.
      if (LEDGER_REPORTS.includes(error.code)) return;
      codes.push(error.code);
      const message = error.message;
      const waiter = waiting.shift();
      if (waiter === undefined) warnings.push(message);
      else waiter(message);
    },
  });
  stores.push(store);
  const next = (): Promise<string> => {
    const queued = warnings.shift();
    return queued !== undefined ? Promise.resolve(queued) : new Promise((resolve) => waiting.push(resolve));
  };
  return { store, next, warnings, codes };
}

describe('Redis down at start-up (closed port on 127.0.0.1)', () => {
  it('warns at once through onError (STORE_UNREACHABLE, the connection error as cause), naming the URL (scheme, host, port, database only) and the reason', async () => {
    const port = await freePort();
    const url = `redis://user:hunter2@127.0.0.1:${port}/0?password=qsecret&sslpassword=x#fragsecret`;
    const { next, codes } = watched({ url, namespace: uniqueId('down'), connectTimeoutMs: 60_000 });
    const message = await next();
    expect(codes).toEqual(['STORE_UNREACHABLE']);
    expect(message).toMatch(
      new RegExp(
        `^@mrtr/store-redis: cannot reach Redis at redis://127\\.0\\.0\\.1:${port}/0 at start-up \\(.*ECONNREFUSED.*\\); every consume fails closed with ERR_STORE_UNAVAILABLE until it is reachable\\.$`,
      ),
    );
    for (const secret of ['hunter2', 'user', 'qsecret', 'sslpassword', 'fragsecret']) expect(message).not.toContain(secret);
  });

  it('ready() rejects ERR_STORE_UNAVAILABLE with the connection error as cause; consumes still fail closed', async () => {
    const port = await freePort();
    const { store, next } = watched({ url: `redis://127.0.0.1:${port}`, namespace: uniqueId('down'), connectTimeoutMs: 60_000 });
    await next(); // the connection was refused
    const error = await store.ready().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(MrtrError.is(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
    expect(String((error as Error).cause)).toMatch(/ECONNREFUSED/);
    expect(await outcome(store.consume(uniqueId('id'), Date.now() + 60_000))).toBe('ERR_STORE_UNAVAILABLE');
  });

  it('reports once, however many reconnects fail; close() ends the reports and the retries', async () => {
    const port = await freePort();
    const { store, next, warnings } = watched({
      url: `redis://127.0.0.1:${port}`,
      namespace: uniqueId('down'),
      connectTimeoutMs: 60_000,
      maxReconnectDelayMs: 1,
    });
    await next();
    // Let several reconnect attempts fail (each is another 'error' event).
    let errors = 0;
    await new Promise<void>((resolve) => {
      const onError = () => {
        if (++errors < 5) return;
        store.client.off('error', onError);
        resolve();
      };
      store.client.on('error', onError);
    });
    await store.close();
    expect(warnings).toEqual([]);
    const error = await store.ready().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(MrtrError.is(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
  });

  it('an injected client: ready() PINGs, bounded by commandTimeoutMs, and rejects ERR_STORE_UNAVAILABLE', async () => {
    const port = await freePort();
    const client = new Redis(`redis://127.0.0.1:${port}`, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on('error', () => {});
    try {
      const store = createRedisStore({ client, namespace: uniqueId('inj'), commandTimeoutMs: 200, evictionPolicyCheck: 'off' });
      stores.push(store);
      const error = await store.ready().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(MrtrError.is(error) && error.code).toBe('ERR_STORE_UNAVAILABLE');
    } finally {
      client.disconnect();
    }
  });
});

describe.skipIf(redisServerBinary() === undefined)('Redis started after the store (throwaway redis-server)', () => {
  it('the down warning is followed by one "reachable now"; ready() then resolves and consumes work', async () => {
    const port = await freePort();
    const { store, next, codes } = watched({
      url: `redis://127.0.0.1:${port}`,
      namespace: uniqueId('late'),
      connectTimeoutMs: 60_000,
      maxReconnectDelayMs: 50,
      evictionPolicyCheck: 'off',
    });
    expect(await next()).toMatch(/cannot reach Redis at .* at start-up/);
    const server = throwawayRedis(port);
    try {
      await server.start();
      expect(await next()).toBe(`@mrtr/store-redis: Redis at redis://127.0.0.1:${port} is reachable now.`);
      expect(codes).toEqual(['STORE_UNREACHABLE', 'STORE_REACHABLE']);
      await store.ready();
      expect(await store.consume(uniqueId('id'), Date.now() + 60_000)).toBe(true);
    } finally {
      await store.close();
      await server.kill();
    }
  });
});

describe.skipIf(skipRedis)('Redis up at start-up', () => {
  it('ready() resolves, no connection warning; an injected client too', async () => {
    const { store, warnings } = watched({ url: REDIS_URL!, namespace: uniqueId('up'), evictionPolicyCheck: 'off' });
    await store.ready();
    expect(await store.consume(uniqueId('id'), Date.now() + 60_000)).toBe(true);
    expect(warnings).toEqual([]);

    const client = new Redis(REDIS_URL!);
    try {
      const injected = createRedisStore({ client, namespace: uniqueId('inj'), evictionPolicyCheck: 'off' });
      stores.push(injected);
      await injected.ready();
    } finally {
      client.disconnect();
    }
  });
});

// The task store opens its connection through the same code (connection.ts): the same reports, named for it.
describe('the task store: the same start-up reports, named for it', () => {
  it('down at start-up: STORE_UNREACHABLE naming the task store and its operations; ready() and create fail closed', async () => {
    const port = await freePort();
    const reports: BackgroundError[] = [];
    let reported: () => void = () => {};
    const first = new Promise<void>((resolve) => {
      reported = resolve;
    });
    const tasks = createRedisTaskStore({
      url: `redis://user:hunter2@127.0.0.1:${port}/0`,
      namespace: uniqueId('tasks-down'),
      connectTimeoutMs: 60_000,
      onError: (error) => {
        reports.push(error);
        reported();
      },
    });
    try {
      await first;
      expect(reports.map((r) => r.code)).toEqual(['STORE_UNREACHABLE']);
      expect(reports[0]!.message).toMatch(
        new RegExp(
          `^@mrtr/store-redis: task store cannot reach Redis at redis://127\\.0\\.0\\.1:${port}/0 at start-up \\(.*ECONNREFUSED.*\\); every task operation fails closed with ERR_STORE_UNAVAILABLE until it is reachable\\.$`,
        ),
      );
      expect(reports[0]!.message).not.toContain('hunter2');
      expect(await outcome(tasks.ready())).toBe('ERR_STORE_UNAVAILABLE');
      expect(await outcome(tasks.get('no-such-task'))).toBe('ERR_STORE_UNAVAILABLE');
    } finally {
      await tasks.close();
    }
  });

  it.skipIf(redisServerBinary() === undefined)(
    'started after the store: one "reachable now" naming the task store, then it works',
    async () => {
      const port = await freePort();
      const codes: string[] = [];
      const messages: string[] = [];
      const waiting: (() => void)[] = [];
      const tasks = createRedisTaskStore({
        url: `redis://127.0.0.1:${port}`,
        namespace: uniqueId('tasks-late'),
        connectTimeoutMs: 60_000,
        maxReconnectDelayMs: 50,
        onError: (error) => {
          codes.push(error.code);
          messages.push(error.message);
          waiting.shift()?.();
        },
      });
      const reports = (n: number): Promise<void> =>
        codes.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiting.push(resolve)).then(() => reports(n));
      const server = throwawayRedis(port);
      try {
        await reports(1);
        await server.start();
        await reports(2);
        expect(codes).toEqual(['STORE_UNREACHABLE', 'STORE_REACHABLE']);
        expect(messages[1]).toBe(`@mrtr/store-redis: task store: Redis at redis://127.0.0.1:${port} is reachable now.`);
        await tasks.ready();
        expect(await tasks.get('no-such-task')).toBeUndefined();
      } finally {
        await tasks.close();
        await server.kill();
      }
    },
  );
});

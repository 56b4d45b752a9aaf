// A lost ledger is noticed: the epoch (epoch: true) on a private redis-server that is flushed and restarted empty
// (--save '' --appendonly no), the eviction policy read when CONFIG is refused, and persistence reported at start.
import { Redis, ReplyError } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore, type RedisReplayStore } from '../src/index.js';
import { freePort, gateRedisServer, outcome, type ThrowawayRedis, throwawayRedis, uniqueId, until } from './helpers.js';

const present = gateRedisServer('ledger.test.ts');

describe.skipIf(!present)('the ledger epoch (private redis-server, no persistence)', () => {
  let server: ThrowawayRedis;
  let admin: Redis;
  beforeAll(async () => {
    server = throwawayRedis(await freePort());
    await server.start();
    admin = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    admin.on('error', () => {});
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.kill();
  });

  const make = (namespace = uniqueId('ep')) => {
    const reports: string[] = [];
    const store = createRedisStore({
      url: server.url,
      namespace,
      maxReconnectDelayMs: 50,
      onError: (error) => reports.push(error.code),
    });
    return { store, reports };
  };
  const id = () => uniqueId('id');

  it('the epoch is written at start-up with TIME; a state minted before it is refused (consume and claim), after it accepted', async () => {
    const { store, reports } = make();
    try {
      await store.ready();
      await until('the start-up epoch', async () => reports.includes('STORE_LEDGER_EPOCH'));
      const epoch = Number(await admin.get(`${store.keyPrefix.slice(0, -1)}%e`));
      const now = await store.time();
      expect(epoch).toBeGreaterThan(0);
      expect(epoch).toBeLessThanOrEqual(now);
      expect(await outcome(store.consume(id(), now + 60_000, { mintedAtMs: epoch - 1 }))).toBe('ERR_LEDGER_LOST');
      expect(await outcome(store.claim(id(), now + 60_000, 'fp', { mintedAtMs: epoch - 1 }))).toBe('ERR_LEDGER_LOST');
      expect(await store.consume(id(), now + 60_000, { mintedAtMs: epoch })).toBe(true);
      expect(await store.claim(id(), now + 60_000, 'fp', { mintedAtMs: epoch + 1 })).toEqual({ status: 'first', fence: 0 });
      expect(await store.consume(id(), now + 60_000)).toBe(true); // no mintedAtMs: no epoch check
    } finally {
      await store.close();
    }
  });

  it('FLUSHALL: a spent state minted before is refused (ERR_LEDGER_LOST), never accepted again; a newer one accepted', async () => {
    const { store } = make();
    try {
      await store.ready();
      const minted = await store.time();
      const [spent, claimed] = [id(), id()];
      const at = minted + 600_000;
      expect(await store.consume(spent, at, { mintedAtMs: minted })).toBe(true);
      expect(await store.claim(claimed, at, 'fp', { mintedAtMs: minted })).toEqual({ status: 'first', fence: 0 });
      await admin.flushall();
      // Before the epoch existed, these were first uses again: 40/40 spent states accepted (faults.md).
      expect(await outcome(store.consume(spent, at, { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
      expect(await outcome(store.claim(claimed, at, 'fp', { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
      expect(await admin.exists(store.keyPrefix + spent, store.keyPrefix + claimed)).toBe(0);
      const later = (await store.time()) + 1;
      await until("Redis's clock past the new epoch", async () => (await store.time()) > later);
      expect(await store.consume(id(), at, { mintedAtMs: later })).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('the epoch key deleted: the next spend writes a new one, and older states are refused', async () => {
    const { store } = make();
    try {
      await store.ready();
      const minted = await store.time();
      const at = minted + 600_000;
      expect(await store.consume(id(), at, { mintedAtMs: minted })).toBe(true);
      await admin.del(`${store.keyPrefix.slice(0, -1)}%e`);
      await until("Redis's clock past minted", async () => (await store.time()) > minted);
      expect(await outcome(store.consume(id(), at, { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
    } finally {
      await store.close();
    }
  });

  it('a restart without persistence: the store reconnects, reports a new ledger, and refuses states minted before', async () => {
    const { store, reports } = make();
    try {
      await store.ready();
      const minted = await store.time();
      const spent = id();
      const at = minted + 600_000;
      expect(await store.consume(spent, at, { mintedAtMs: minted })).toBe(true);
      await until('the start-up epoch report', async () => reports.includes('STORE_LEDGER_EPOCH'));
      const before = reports.filter((code) => code === 'STORE_LEDGER_EPOCH').length;
      await server.kill();
      await server.start();
      await until(
        'a new ledger reported after the restart',
        async () => reports.filter((code) => code === 'STORE_LEDGER_EPOCH').length > before,
      );
      expect(await outcome(store.consume(spent, at, { mintedAtMs: minted }))).toBe('ERR_LEDGER_LOST');
      expect(reports).toContain('STORE_NOT_PERSISTENT');
    } finally {
      await store.close();
    }
  });

  it('ledgerEpoch writes the epoch of a new namespace (one script) and answers it; a state sealed with it is accepted', async () => {
    const { store } = make();
    try {
      const epochKey = `${store.keyPrefix.slice(0, -1)}%e`;
      await store.ready();
      await until('the start-up epoch', async () => (await admin.exists(epochKey)) === 1);
      await admin.del(epochKey); // a namespace whose ledger has not begun
      const epoch = await store.ledgerEpoch();
      expect(await admin.get(epochKey)).toBe(String(epoch));
      expect(epoch).toBeLessThanOrEqual(await store.time());
      const at = (await store.time()) + 600_000;
      expect(await store.consume(id(), at, { mintedAtMs: epoch })).toBe(true);
      expect(await store.claim(id(), at, 'fp', { mintedAtMs: epoch })).toEqual({ status: 'first', fence: 0 });
      expect(await Promise.all([store.ledgerEpoch(), store.ledgerEpoch()])).toEqual([epoch, epoch]); // it moves nothing
    } finally {
      await store.close();
    }
  });

  it('FLUSHDB, then a restart: a state sealed with the old epoch is refused; ledgerEpoch answers a later one, accepted', async () => {
    const { store } = make();
    try {
      const first = await store.ledgerEpoch();
      const at = (await store.time()) + 600_000;
      const spent = id();
      expect(await store.consume(spent, at, { mintedAtMs: first })).toBe(true);
      await until("Redis's clock past the epoch", async () => (await store.time()) > first);
      await admin.flushdb();
      expect(await outcome(store.consume(spent, at, { mintedAtMs: first }))).toBe('ERR_LEDGER_LOST');
      const second = await store.ledgerEpoch();
      expect(second).toBeGreaterThan(first);
      expect(await store.consume(spent, at, { mintedAtMs: second })).toBe(true);

      await until("Redis's clock past the second epoch", async () => (await store.time()) > second);
      await server.kill();
      await server.start();
      await until('the store to reach the restarted Redis', async () => (await store.time()) > 0);
      expect(await outcome(store.consume(spent, at, { mintedAtMs: second }))).toBe('ERR_LEDGER_LOST');
      const third = await store.ledgerEpoch();
      expect(third).toBeGreaterThan(second);
      expect(await store.consume(spent, at, { mintedAtMs: third })).toBe(true);
      expect(await store.consume(spent, at, { mintedAtMs: third })).toBe(false);
    } finally {
      await store.close();
    }
  });

  it('checkPersistence() reads INFO persistence: RDB and AOF off here', async () => {
    const { store } = make();
    try {
      await store.ready();
      expect(await store.checkPersistence()).toEqual({ status: 'volatile', rdb: false, aof: false });
    } finally {
      await store.close();
    }
  });
});

/**
 * A client that answers like a managed Redis: `CONFIG` refused (NOPERM), and `INFO` answering `info` (or refused too
 * when it is `undefined`). Every other command goes to the real client.
 */
function managed(inner: Redis, info: Record<string, string | undefined>): Redis {
  const refuse = (command: string) => Promise.reject(new ReplyError(`NOPERM this user has no permissions to run the '${command}' command`));
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'config') return () => refuse('config');
      if (prop === 'info') {
        return (section: string) => {
          const text = info[section];
          return text === undefined ? refuse('info') : Promise.resolve(text);
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe.skipIf(!present)('eviction policy and persistence on a managed Redis (CONFIG refused)', () => {
  let server: ThrowawayRedis;
  const clients: Redis[] = [];
  const stores: RedisReplayStore[] = [];
  beforeAll(async () => {
    server = throwawayRedis(await freePort());
    await server.start();
  });
  afterAll(async () => {
    await Promise.all(stores.map((store) => store.close()));
    for (const client of clients) client.disconnect();
    await server?.kill();
  });
  const make = (info: Record<string, string | undefined>, options: Parameters<typeof createRedisStore>[0] = {}) => {
    const inner = new Redis(server.url);
    clients.push(inner);
    const reports: string[] = [];
    const store = createRedisStore({
      client: managed(inner, info),
      namespace: uniqueId('mg'),
      onError: (e) => reports.push(e.code),
      ...options,
    });
    stores.push(store);
    return { store, reports };
  };
  const exp = () => Date.now() + 60_000;

  it('the policy is read from INFO memory: noeviction → consumes work; allkeys-lru → refused', async () => {
    const safe = make({ memory: '# Memory\r\nmaxmemory_policy:noeviction\r\n' });
    expect(await safe.store.consume('a', exp())).toBe(true);
    expect(await safe.store.checkEvictionPolicy()).toEqual({ status: 'safe', policy: 'noeviction' });
    const evicting = make({ memory: '# Memory\r\nmaxmemory_policy:allkeys-lru\r\n' });
    expect(await outcome(evicting.store.consume('a', exp()))).toBe('ERR_STORE_UNAVAILABLE');
    expect(evicting.reports).toContain('STORE_EVICTION_POLICY');
  });

  it('neither CONFIG nor INFO: refused by default (reported); accepted with evictionPolicyCheck: accept-unknown (reported)', async () => {
    const refused = make({});
    const error = await refused.store.consume('a', exp()).catch((e: unknown) => e);
    expect((error as { code?: string }).code).toBe('ERR_STORE_UNAVAILABLE');
    expect(String((error as { cause?: Error }).cause?.message)).toMatch(/could not be read/);
    expect(await outcome(refused.store.claim('b', exp(), 'fp'))).toBe('ERR_STORE_UNAVAILABLE');
    expect(refused.reports).toContain('STORE_EVICTION_POLICY_UNKNOWN');
    expect((await refused.store.checkEvictionPolicy()).status).toBe('unknown');

    const accepted = make({}, { evictionPolicyCheck: 'accept-unknown' });
    expect(await accepted.store.consume('a', exp())).toBe(true);
    expect(accepted.reports).toContain('STORE_EVICTION_POLICY_UNKNOWN');
  });

  it('persistence from INFO persistence when CONFIG GET save is refused: AOF on → persistent; off with no save seen → unknown (reported)', async () => {
    const policy = '# Memory\r\nmaxmemory_policy:noeviction\r\n';
    const aof = make({ memory: policy, persistence: '# Persistence\r\nrdb_saves:0\r\nrdb_last_bgsave_time_sec:-1\r\naof_enabled:1\r\n' });
    expect(await aof.store.checkPersistence()).toEqual({ status: 'persistent', rdb: undefined, aof: true });
    const rdb = make({ memory: policy, persistence: '# Persistence\r\nrdb_saves:3\r\naof_enabled:0\r\n' });
    expect(await rdb.store.checkPersistence()).toEqual({ status: 'persistent', rdb: true, aof: false });
    const unknown = make({
      memory: policy,
      persistence: '# Persistence\r\nrdb_saves:0\r\nrdb_last_bgsave_time_sec:-1\r\naof_enabled:0\r\n',
    });
    expect(await unknown.store.checkPersistence()).toEqual({ status: 'unknown', rdb: undefined, aof: false });
    expect(await unknown.store.consume('a', exp())).toBe(true);
    await until('the start-up report', async () => unknown.reports.includes('STORE_PERSISTENCE_UNKNOWN'));
  });
});

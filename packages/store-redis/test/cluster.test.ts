// The store on a real local Redis Cluster: three masters (redis-server --cluster-enabled yes on loopback
// ports, joined with redis-cli --cluster create … --cluster-replicas 0), started and stopped by this file.
// A race of two clients across the cluster (batches split by hash slot), and a master killed mid-run:
// its consumes fail closed, the other masters keep answering, and after a restart it answers again.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { storeCompliance, taskStoreCompliance } from '@mrtr/test-suite';
import { epochKeys } from '../src/epoch.js';
import {
  createRedisStore,
  createRedisTaskStore,
  hashSlot,
  type RedisReplayStore,
  type RedisStoreOptions,
  type RedisTaskStore,
} from '../src/index.js';
import { freePort, outcome, REQUIRE_SERVICES, redisServerBinary, type ThrowawayRedis, throwawayRedis, uniqueId, until } from './helpers.js';

const run = promisify(execFile);

async function hasRedisCli(): Promise<boolean> {
  try {
    await run('redis-cli', ['--version'], { timeout: 5000 });
    return true;
  } catch {
    return false;
  }
}

const present = redisServerBinary() !== undefined && (await hasRedisCli());
if (!present) {
  if (REQUIRE_SERVICES) {
    it('redis-server and redis-cli are required (MRTR_REQUIRE_SERVICES=1) for the cluster tests but are not on PATH', () => {
      throw new Error('redis-server and redis-cli must be on PATH when MRTR_REQUIRE_SERVICES=1');
    });
  } else {
    console.warn('[store-redis] cluster.test.ts: cluster tests skipped because redis-server or redis-cli is not on PATH');
  }
}

const listenable = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });

/** A free port whose cluster bus port (port + 10000) is free too; bounded attempts. */
async function clusterPort(taken: Set<number>): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = await freePort();
    if (port > 55_000 || taken.has(port) || taken.has(port + 10_000)) continue;
    if (await listenable(port + 10_000)) return port;
  }
  throw new Error('no free port pair for a cluster node');
}

const COMMAND_TIMEOUT_MS = 500;

describe.skipIf(!present)('Redis Cluster: three local masters', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-redis-cluster-'));
  const nodes: ThrowawayRedis[] = [];
  const clients: Cluster[] = [];
  /** Master port of each slot, from CLUSTER SLOTS. */
  const owner = new Map<number, number>();

  const nodeArgs = (port: number) => [
    '--cluster-enabled',
    'yes',
    '--cluster-config-file',
    join(dir, `nodes-${port}.conf`),
    '--dir',
    dir,
    '--cluster-node-timeout',
    '2000',
    // The masters that are up keep serving their slots while one is down.
    '--cluster-require-full-coverage',
    'no',
  ];

  const clusterOk = async (port: number): Promise<boolean> => {
    const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    try {
      await client.connect();
      const info = String(await client.call('CLUSTER', 'INFO'));
      return info.includes('cluster_state:ok') && info.includes('cluster_slots_assigned:16384');
    } finally {
      client.disconnect();
    }
  };

  const newCluster = (): Cluster => {
    const cluster = new Cluster(
      nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
      {
        clusterRetryStrategy: () => 100,
        enableOfflineQueue: true,
        slotsRefreshTimeout: 1000,
        redisOptions: { connectTimeout: 1000, maxRetriesPerRequest: 1 },
      },
    );
    cluster.on('error', () => {});
    clients.push(cluster);
    return cluster;
  };
  /** Keys of every script call the stores sent (to check that each touched one slot). */
  const scripts: string[][] = [];
  /** `commandTimeoutMs`: short for the outage tests (a dead master fails fast), long where only atomicity is tested. */
  const newStore = (
    cluster: Cluster,
    namespace: string,
    commandTimeoutMs = COMMAND_TIMEOUT_MS,
    options: RedisStoreOptions = {},
  ): RedisReplayStore => {
    const recorded = new Proxy(cluster, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        if (prop !== 'evalsha' && prop !== 'eval') return value.bind(target);
        return (...args: unknown[]) => {
          scripts.push(args.slice(2, 2 + Number(args[1])) as string[]);
          return value.apply(target, args);
        };
      },
    });
    return createRedisStore({ ...options, client: recorded, namespace, commandTimeoutMs, evictionPolicyCheck: 'off' });
  };

  beforeAll(async () => {
    const taken = new Set<number>();
    for (let i = 0; i < 3; i++) {
      const port = await clusterPort(taken);
      taken.add(port);
      taken.add(port + 10_000);
      nodes.push(throwawayRedis(port, nodeArgs(port)));
    }
    await Promise.all(nodes.map((node) => node.start()));
    await run(
      'redis-cli',
      ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
      {
        timeout: 60_000,
      },
    );
    for (const node of nodes) await until(`cluster_state:ok on ${node.port}`, () => clusterOk(node.port));
    const probe = new Redis(nodes[0]!.port, '127.0.0.1');
    try {
      const slots = (await probe.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
      for (const [from, to, [, port]] of slots) for (let slot = from; slot <= to; slot++) owner.set(slot, Number(port));
    } finally {
      probe.disconnect();
    }
    expect(owner.size).toBe(16384);
  });

  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await Promise.all(nodes.map((node) => node.kill()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('a race across the cluster: 2 clients × 32 consumers over the same 600 ids → exactly 600 trues', async () => {
    const namespace = uniqueId('race');
    // 38,400 consumes on a machine that may be busy: a generous command timeout (this test is about who wins, not how
    // fast; the default failed it at load 20).
    const stores = [newStore(newCluster(), namespace, 60_000), newStore(newCluster(), namespace, 60_000)];
    // A third of the ids share a few hash tags (batches of one slot carry many keys); the rest spread out.
    const ids = Array.from({ length: 600 }, (_, i) => (i % 3 === 0 ? `{tag${i % 4}}:${i}` : `spread:${i}:${uniqueId('r')}`));
    const keyPrefix = stores[0]!.keyPrefix;
    const masters = new Set(ids.map((id) => owner.get(hashSlot(keyPrefix + id))));
    expect(masters.size).toBe(3);
    const exp = Date.now() + 600_000;
    const deadline = Date.now() + 60_000;
    let trues = 0;
    let falses = 0;
    await Promise.all(
      stores.flatMap((store) =>
        Array.from({ length: 32 }, async (_, worker) => {
          const order = worker % 2 === 0 ? ids : [...ids].reverse();
          for (const id of order) {
            if (Date.now() > deadline) throw new Error('race exceeded its time limit');
            if (await store.consume(id, exp)) trues++;
            else falses++;
          }
        }),
      ),
    );
    expect(trues).toBe(600);
    expect(trues + falses).toBe(64 * 600);
    // Batches went out as scripts of several keys, each script within one hash slot.
    expect(scripts.some((keys) => keys.length > 1)).toBe(true);
    for (const keys of scripts) expect(new Set(keys.map(hashSlot)).size).toBe(1);
  });

  it('claim and record across the cluster: 2 clients × 25 identical claims of each of 30 ids (every master) → one first each; the outcome reaches the other client', async () => {
    const namespace = uniqueId('claims');
    // 1,500 claims at once on a machine that may be busy: a generous command timeout (this test is about who wins,
    // not how fast; a 500 ms timeout failed it under CI's loaded pass).
    const stores = [newStore(newCluster(), namespace, 60_000), newStore(newCluster(), namespace, 60_000)];
    const ids = Array.from({ length: 30 }, (_, i) => `claim:${i}:${uniqueId('c')}`);
    const keyPrefix = stores[0]!.keyPrefix;
    expect(new Set(ids.map((id) => owner.get(hashSlot(keyPrefix + id)))).size).toBe(3);
    const exp = Date.now() + 600_000;
    const before = scripts.length;
    await Promise.all(
      ids.map(async (id) => {
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => stores[i % 2]!.claim(id, exp, 'fp')));
        expect(results.filter((r) => r.status === 'first')).toHaveLength(1);
        expect(results.filter((r) => r.status === 'pending')).toHaveLength(49);
        const winner = results.findIndex((r) => r.status === 'first') % 2;
        expect(await stores[winner]!.record(id, 'fp', `out:${id}`)).toBe(true);
        expect(await stores[1 - winner]!.claim(id, exp, 'fp')).toEqual({ status: 'recorded', outcome: `out:${id}` });
        expect(await stores[1 - winner]!.claim(id, exp, 'other')).toEqual({ status: 'replayed' });
        expect(await stores[1 - winner]!.consume(id, exp)).toBe(false);
      }),
    );
    // Claims and records went out batched: script calls of one slot each (a batch is split by hash slot), some
    // carrying several claims, and every id's key in one of them.
    const sent = scripts.slice(before);
    for (const keys of sent) expect(new Set(keys.map(hashSlot)).size).toBe(1);
    expect(sent.some((keys) => keys.length > 1)).toBe(true);
    const touched = new Set(sent.flat());
    for (const id of ids) expect(touched.has(keyPrefix + id)).toBe(true);
  });

  // The replay store's shared suite on the cluster, with the suite's options (outcome bounds included): claims and
  // records batched per slot, the outcome budget leased from its one pair of keys.
  storeCompliance(it, (options) => newStore(newCluster(), options.namespace, 10_000, options), {
    name: 'redis cluster',
    // Redis's clock decides: a consume that reaches it after expiresAtMs is refused (ERR_STATE_EXPIRED), which the
    // suite's real-time expiry test does not expect of its mid-TTL consume; a TTL a loaded cluster does not outlast.
    ttlMs: 2000,
    outcomes: true,
    keyFingerprints: true,
  });

  // The task store on the cluster (before the master is killed): the shared suite, then a check that every
  // script call kept to one slot and that one principal's tasks spread over the masters.
  const taskScripts: string[][] = [];
  const newTaskStore = (limits: { namespace: string; maxLivePerPrincipal?: number; maxPerPrincipal?: number }): RedisTaskStore => {
    const recorded = new Proxy(newCluster(), {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        if (prop !== 'evalsha' && prop !== 'eval') return value.bind(target);
        return (...args: unknown[]) => {
          taskScripts.push(args.slice(2, 2 + Number(args[1])) as string[]);
          return value.apply(target, args);
        };
      },
    });
    // Generous: the suite's concurrent creates and updates test who wins, not how fast.
    return createRedisTaskStore({ client: recorded, commandTimeoutMs: 10_000, ...limits });
  };
  taskStoreCompliance(it, newTaskStore, { name: 'redis cluster tasks' });

  it("task store on the cluster: each script call touches one slot; one principal's tasks land on every master", async () => {
    const store = newTaskStore({ namespace: uniqueId('tasks'), maxLivePerPrincipal: 64, maxPerPrincipal: 64 });
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) {
      const t = Date.now();
      const taskId = uniqueId(`t${i}`);
      ids.push(taskId);
      await store.create({
        taskId,
        principal: '{alice}\n',
        status: 'working',
        createdAt: t,
        lastUpdatedAt: t,
        ttlMs: 60_000,
        inputRequests: {},
        askedKeys: [],
      });
    }
    await Promise.all(ids.map((id) => store.update(id, (r) => ({ ...r, status: 'completed', lastUpdatedAt: r.lastUpdatedAt + 1 }))));
    for (const id of ids) expect((await store.get(id))?.status).toBe('completed');
    expect(taskScripts.length).toBeGreaterThan(60);
    for (const keys of taskScripts) expect(new Set(keys.map(hashSlot)).size).toBe(1);
    const taskKeys = taskScripts.filter((keys) => keys.length === 1).map((keys) => keys[0] as string);
    expect(new Set(taskKeys.map((key) => owner.get(hashSlot(key)))).size).toBe(3);
  });

  it("the epoch per hash slot: a flushed master loses its slots' epochs with their ids; only its ids refuse older states", async () => {
    const reports: string[] = [];
    const namespace = uniqueId('epoch');
    const store = newStore(newCluster(), namespace, 10_000, { onError: (error) => reports.push(error.code) });
    const first = scripts.length;
    // The store that begins the ledger writes every slot's copy of its epoch (before it reports the new ledger).
    expect(await store.consume(uniqueId('warm'), Date.now() + 600_000)).toBe(true);
    await until('the new ledger with its slot copies', async () => reports.includes('STORE_LEDGER_EPOCH'));
    const victim = nodes[2]!;
    const onVictim = (id: string) => owner.get(hashSlot(store.keyPrefix + id)) === victim.port;
    const minted = await store.time();
    const at = minted + 600_000;
    const spent = Array.from({ length: 60 }, (_, i) => uniqueId(`spent${i}`));
    expect(spent.some(onVictim) && !spent.every(onVictim)).toBe(true);
    expect(await Promise.all(spent.map((id) => store.consume(id, at, { mintedAtMs: minted })))).toEqual(spent.map(() => true));
    // A slot whose copy was never used holds the ledger's epoch: no false refusal on its first spend.
    const fresh = Array.from({ length: 60 }, (_, i) => uniqueId(`fresh${i}`));
    const direct = new Redis(victim.port, '127.0.0.1');
    try {
      await direct.flushall();
    } finally {
      direct.disconnect();
    }
    await until("Redis's clock past minted", async () => (await store.time()) > minted);
    const again = await Promise.all(spent.map((id) => outcome(store.consume(id, at, { mintedAtMs: minted }))));
    expect(again).toEqual(spent.map((id) => (onVictim(id) ? 'ERR_LEDGER_LOST' : false)));
    const news = await Promise.all(fresh.map((id) => outcome(store.consume(id, at, { mintedAtMs: minted }))));
    expect(news).toEqual(fresh.map((id) => (onVictim(id) ? 'ERR_LEDGER_LOST' : true)));
    for (const keys of scripts.slice(first)) expect(new Set(keys.map(hashSlot)).size).toBe(1);
  });

  it('ledgerEpoch: the master key at the latest slot copy; after a master lost its data, a spend on its slot raises it, and ledgerEpoch answers the new value', async () => {
    const reports: string[] = [];
    const namespace = uniqueId('master');
    const cluster = newCluster();
    const store = newStore(cluster, namespace, 10_000, { onError: (error) => reports.push(error.message) });
    const base = store.keyPrefix.slice(0, -1);
    const masterKey = `${base}%e`;
    const epoch = await store.ledgerEpoch();
    expect(await cluster.get(masterKey)).toBe(String(epoch));
    // Every slot has its copy, none later than the master key (a sample of slots on every master).
    const copies = epochKeys(base);
    const sample = Array.from({ length: 48 }, (_, i) => copies(i * 341));
    expect(new Set(sample.map((key) => owner.get(hashSlot(key)))).size).toBe(3);
    for (const value of await Promise.all(sample.map((key) => cluster.get(key)))) {
      expect(Number(value)).toBeGreaterThan(0);
      expect(Number(value)).toBeLessThanOrEqual(epoch);
    }
    // The victim: a master that does not hold the master key (its loss must be learned from a spend).
    const victim = nodes.find((node) => node.port !== owner.get(hashSlot(masterKey)))!;
    const onVictim = (id: string) => owner.get(hashSlot(store.keyPrefix + id)) === victim.port;
    const at = (await store.time()) + 600_000;
    const spent = Array.from({ length: 60 }, (_, i) => uniqueId(`spent${i}`));
    expect(spent.some(onVictim) && !spent.every(onVictim)).toBe(true);
    expect(await Promise.all(spent.map((id) => store.consume(id, at, { mintedAtMs: epoch })))).toEqual(spent.map(() => true));
    await until("Redis's clock past the epoch", async () => (await store.time()) > epoch);
    const direct = new Redis(victim.port, '127.0.0.1');
    try {
      await direct.flushall();
    } finally {
      direct.disconnect();
    }
    expect(await cluster.get(masterKey)).toBe(String(epoch)); // the loss is not known yet
    const lost = spent.find(onVictim) as string;
    expect(await outcome(store.consume(lost, at, { mintedAtMs: epoch }))).toBe('ERR_LEDGER_LOST');
    // That spend wrote the slot's new copy and raised the master key to it before it answered.
    const raised = Number(await cluster.get(masterKey));
    expect(raised).toBeGreaterThan(epoch);
    expect(await store.ledgerEpoch()).toBe(raised);
    expect(reports.some((message) => message.includes('began again'))).toBe(true);
    // Another store (which never saw the loss) answers the raised epoch; a state sealed with it is accepted on the
    // slot begun again and on the masters that kept their data (the victim's other slots begin at their first spend).
    const other = newStore(newCluster(), namespace, 10_000);
    expect(await other.ledgerEpoch()).toBe(raised);
    expect(await other.consume(lost, at, { mintedAtMs: raised })).toBe(true);
    const fresh = Array.from({ length: 60 }, (_, i) => uniqueId(`fresh${i}`)).filter((id) => !onVictim(id));
    expect(await Promise.all(fresh.map((id) => other.consume(id, at, { mintedAtMs: raised })))).toEqual(fresh.map(() => true));
    // The states spent on the masters that kept their data stay spent (no refusal, no second use).
    const kept = spent.filter((id) => !onVictim(id));
    expect(await Promise.all(kept.map((id) => other.consume(id, at, { mintedAtMs: raised })))).toEqual(kept.map(() => false));
  });

  it('a master killed mid-run: its consumes fail closed, the others keep answering; restarted, it answers again', async () => {
    const store = newStore(newCluster(), uniqueId('kill'));
    const victim = nodes[1]!;
    const onVictim = (id: string) => owner.get(hashSlot(store.keyPrefix + id)) === victim.port;
    // Warm: every master answers.
    const warm = Array.from({ length: 30 }, (_, i) => uniqueId(`warm${i}`));
    expect(await Promise.all(warm.map((id) => store.consume(id, Date.now() + 600_000)))).toEqual(warm.map(() => true));

    await victim.kill();
    const during: { id: string; result: boolean | string }[] = [];
    // Bursts of 30 fresh ids (one batch each) until the victim's ids have failed and the others answered.
    await until(
      'the outage to show on both sides',
      async () => {
        const burst = Array.from({ length: 30 }, (_, i) => uniqueId(`during${i}`));
        const results = await Promise.all(burst.map((id) => outcome(store.consume(id, Date.now() + 600_000))));
        for (let i = 0; i < burst.length; i++) during.push({ id: burst[i] as string, result: results[i] as boolean | string });
        const victimFailed = during.some((d) => onVictim(d.id) && d.result === 'ERR_STORE_UNAVAILABLE');
        const othersServed = during.some((d) => !onVictim(d.id) && d.result === true);
        return victimFailed && othersServed;
      },
      60_000,
    );
    for (const { id, result } of during) {
      // Fail closed: an id on the dead master is never accepted; a fresh id is never false.
      if (onVictim(id)) expect(result).toBe('ERR_STORE_UNAVAILABLE');
      else expect([true, 'ERR_STORE_UNAVAILABLE']).toContain(result);
    }
    // Ids on the masters that stayed up are still consumed.
    for (const id of warm.filter((w) => !onVictim(w))) expect(await store.consume(id, Date.now() + 600_000)).toBe(false);

    await victim.start(); // same port and nodes.conf: it rejoins with its slots (and, without persistence, no keys)
    await until(`cluster_state:ok on ${victim.port}`, () => clusterOk(victim.port));
    const probe = Array.from({ length: 60 }, (_, i) => uniqueId(`after${i}`)).filter(onVictim);
    expect(probe.length).toBeGreaterThan(0);
    await until('the restarted master to answer through the store', async () => {
      const id = uniqueId('recover');
      return onVictim(id) && (await outcome(store.consume(id, Date.now() + 600_000))) === true;
    });
    const results = await Promise.all(probe.map((id) => store.consume(id, Date.now() + 600_000)));
    expect(results.every((r) => r === true)).toBe(true);
    expect(await Promise.all(probe.map((id) => store.consume(id, Date.now() + 600_000)))).toEqual(probe.map(() => false));
  });
});

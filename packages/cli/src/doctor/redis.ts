// The Redis backend: its replay store with the eviction policy and persistence lines, its task store.
import { redactUrl } from '@mrtr/core/store';
import { loadOptional, STORE_PACKAGES } from '../optional.js';
import type { Backend, Settings, TaskSession } from './backend.js';
import { type Add, type Check, DOCTOR_NAMESPACE, errorText, sha256, withTimeout } from './common.js';
import { noTaskStore } from './task-probe.js';

type EvictionCheck = import('@mrtr/store-redis').EvictionCheck;
type PersistenceCheck = import('@mrtr/store-redis').PersistenceCheck;
type RedisReplayStore = import('@mrtr/store-redis').RedisReplayStore;

const WHAT = 'doctor --store redis';

/** The `redis policy` line: what the store itself does with the policy it reads (by default it refuses all but noeviction). */
function policyLine(policy: EvictionCheck): Check {
  const name = 'redis policy';
  if (policy.status === 'safe') return { name, status: 'ok', detail: `maxmemory-policy ${policy.policy}: consumed ids are never evicted` };
  if (policy.status === 'evicting') {
    return {
      name,
      status: 'fail',
      detail: `maxmemory-policy ${policy.policy}: under memory pressure Redis may evict consumed ids (they carry a TTL), and a used state would be accepted again, so the store refuses to consume on it by default; use noeviction`,
    };
  }
  const why = policy.error === undefined ? '' : ` (${errorText(policy.error)})`;
  return {
    name,
    status: 'fail',
    detail: `cannot read maxmemory-policy from CONFIG or INFO${why}: the store refuses to consume until it can tell (evictionPolicyCheck: 'accept-unknown' accepts it once you know it is noeviction)`,
  };
}

const onOff = (value: boolean | undefined): string => (value === undefined ? 'unknown' : value ? 'on' : 'off');

/** The `redis persistence` line: ok with AOF or RDB snapshots, warn when both are off or it cannot tell. */
function persistenceLine(found: PersistenceCheck): Check {
  const name = 'redis persistence';
  if ('error' in found) {
    return {
      name,
      status: 'warn',
      detail: `cannot read INFO persistence (${errorText(found.error)}): check that Redis persists its data (RDB or AOF); a restart without either empties the ledger`,
    };
  }
  if (found.status === 'persistent') {
    const detail =
      found.aof === true
        ? `AOF on${found.rdb === true ? ', RDB snapshots on' : ''}: a restart keeps the ledger`
        : 'RDB snapshots on, AOF off: a restart keeps the ledger as of the last snapshot (appendonly yes keeps every consume)';
    return { name, status: 'ok', detail };
  }
  if (found.status === 'volatile') {
    return {
      name,
      status: 'warn',
      detail:
        'RDB snapshots and AOF are off: a restart empties the ledger; states minted before it are then refused (ERR_LEDGER_LOST) until they expire. Turn on AOF (appendonly yes) to keep it',
    };
  }
  return {
    name,
    status: 'warn',
    detail: `AOF ${onOff(found.aof)}, RDB snapshots ${onOff(found.rdb)} (INFO persistence does not say, and CONFIG GET save is refused or silent): check that Redis persists its data; a restart without either empties the ledger`,
  };
}

/**
 * The two ways a Redis forgets spent ids: eviction under memory pressure (the policy, read through the store: `CONFIG`,
 * else `INFO memory` on a managed Redis that refuses `CONFIG`) and a restart without persistence (`INFO persistence`).
 * Each read is two commands at most, each bounded by the store's command timeout: twice that here.
 */
async function ledgerLines(store: RedisReplayStore, timeoutMs: number, add: Add): Promise<void> {
  const policy = await withTimeout(store.checkEvictionPolicy(), timeoutMs * 2, 'redis').catch(
    (error: unknown): EvictionCheck => ({ status: 'unknown', error }),
  );
  add(policyLine(policy));
  const persistence = await withTimeout(store.checkPersistence(), timeoutMs * 2, 'redis').catch(
    (error: unknown): PersistenceCheck => ({ status: 'unknown', error }),
  );
  add(persistenceLine(persistence));
}

/** The task store on the same Redis (its own connection), and the keys the probe wrote (see `@mrtr/store-redis`'s tasks.ts). */
function redisTasks(url: string, timeoutMs: number): TaskSession {
  let store: import('@mrtr/store-redis').RedisTaskStore | undefined;
  const name = 'redis tasks';
  return {
    name,
    where: `at ${redactUrl(url)}`,
    place: redactUrl(url),
    async open(add) {
      const mod = await loadOptional(() => import('@mrtr/store-redis'), STORE_PACKAGES.redis, WHAT);
      if (typeof mod.createRedisTaskStore !== 'function') {
        add(noTaskStore(name, '@mrtr/store-redis', 'createRedisTaskStore'));
        return undefined;
      }
      const options = { url, namespace: DOCTOR_NAMESPACE, connectTimeoutMs: timeoutMs, commandTimeoutMs: timeoutMs, onError: () => {} };
      store = mod.createRedisTaskStore(options);
      await withTimeout(store.ready(), timeoutMs * 2, name);
      return store;
    },
    hint(check) {
      if (!/NOPERM/.test(check.detail)) return;
      check.detail +=
        "; the server's Redis user needs +evalsha and +eval (the task store's scripts), +get, +set and +zrem, and inside the scripts +@sortedset, +pexpireat, +getrange and +time";
    },
    async forget(taskId, principal) {
      const client = store!.client as unknown as { del(...keys: string[]): Promise<number> };
      const tag = `${store!.keyPrefix}p:{${sha256(principal)}}`;
      await client.del(`${store!.keyPrefix}t:{${sha256(taskId)}}`, `${tag}:k`, `${tag}:l`);
    },
    close: async () => store?.close(),
  };
}

export const redis: Backend = {
  packages: STORE_PACKAGES.redis,
  byDefault: (s) => s.redisUrl !== undefined,
  unconfigured: (s) => (s.redisUrl === undefined ? 'REDIS_URL is not set' : undefined),
  place: (s) => redactUrl(s.redisUrl!),
  async open(s: Settings) {
    const url = s.redisUrl!;
    const { createRedisStore } = await loadOptional(() => import('@mrtr/store-redis'), STORE_PACKAGES.redis, WHAT);
    // The lines below report a Redis that is down or evicting themselves: no second report on stderr, and the
    // consume runs whatever the policy (the policy line says what the store itself would do).
    const store = createRedisStore({
      url,
      namespace: DOCTOR_NAMESPACE,
      connectTimeoutMs: s.timeoutMs,
      commandTimeoutMs: s.timeoutMs,
      evictionPolicyCheck: 'warn',
      onError: () => {},
    });
    const client = store.client as unknown as { del(key: string): Promise<number> };
    return {
      store,
      where: `at ${redactUrl(url)}`,
      forget: (id) => client.del(`${store.keyPrefix}${id}`),
      after: (add) => ledgerLines(store, s.timeoutMs, add),
      clock: {
        name: 'redis clock',
        note: 'Redis expires consumed ids by its own clock: fix NTP, or set extraRetentionMs of the store to the bound',
        unreadable: 'cannot read TIME',
      },
      close: () => store.close(),
    };
  },
  tasks: (s) => redisTasks(s.redisUrl!, s.timeoutMs),
};

// The Upstash backend (Redis over REST): the replay store with Redis's clock and the ledger epoch, the task store.
import { redactUrl } from '@mrtr/core/store';
import { loadOptional, STORE_PACKAGES } from '../optional.js';
import type { Backend, Settings, TaskSession } from './backend.js';
import { DOCTOR_NAMESPACE, sha256 } from './common.js';
import { noTaskStore } from './task-probe.js';

const WHAT = 'doctor --store upstash';
const load = () => loadOptional(() => import('@mrtr/store-upstash'), STORE_PACKAGES.upstash, WHAT);
const connection = (s: Settings) => ({ url: s.upstashUrl!, token: s.upstashToken!, commandTimeoutMs: s.timeoutMs });

interface Keys {
  del(...keys: string[]): Promise<number>;
  zrem(key: string, member: string): Promise<number>;
}

/** The task store (its own client), and the keys the probe wrote (see `@mrtr/store-upstash`'s tasks.ts). */
function upstashTasks(s: Settings): TaskSession {
  const name = 'upstash tasks';
  let store: import('@mrtr/store-upstash').UpstashTaskStore | undefined;
  return {
    name,
    where: `at ${redactUrl(s.upstashUrl!)}`,
    place: redactUrl(s.upstashUrl!),
    async open(add) {
      const mod = await load();
      if (typeof mod.createUpstashTaskStore !== 'function') {
        add(noTaskStore(name, '@mrtr/store-upstash', 'createUpstashTaskStore'));
        return undefined;
      }
      store = mod.createUpstashTaskStore({ ...connection(s), namespace: DOCTOR_NAMESPACE });
      return store;
    },
    async forget(taskId, principal) {
      const kp = store!.keyPrefix;
      const client = store!.client as unknown as Keys;
      const [task, holder] = [sha256(taskId), sha256(principal)];
      await client.del(`${kp}t:${task}`, `${kp}k:${holder}`, `${kp}l:${holder}`, `${kp}f:${holder}`);
      await client.zrem(`${kp}all`, task);
      await client.zrem(`${kp}heavy`, holder);
    },
    close: async () => store?.close(),
  };
}

/**
 * Upstash Redis over its REST API (`UPSTASH_REDIS_REST_URL` and `_TOKEN`, or Vercel's `KV_REST_API_URL` and `_TOKEN`).
 * The eviction policy and persistence are not readable over REST (no `CONFIG`, no `INFO`): the help says to check
 * them in the Upstash console.
 */
export const upstash: Backend = {
  packages: STORE_PACKAGES.upstash,
  byDefault: (s) => s.upstashUrl !== undefined,
  unconfigured: (s) =>
    s.upstashUrl === undefined
      ? 'UPSTASH_REDIS_REST_URL (or KV_REST_API_URL) is not set'
      : s.upstashToken === undefined
        ? 'UPSTASH_REDIS_REST_TOKEN (or KV_REST_API_TOKEN) is not set'
        : undefined,
  place: (s) => redactUrl(s.upstashUrl!),
  async open(s) {
    const { createUpstashStore } = await load();
    const store = createUpstashStore({ ...connection(s), namespace: DOCTOR_NAMESPACE });
    const client = store.client as unknown as Keys;
    return {
      store,
      where: `at ${redactUrl(s.upstashUrl!)}`,
      forget: (id) => client.del(`${store.keyPrefix}r:${id}`),
      clock: {
        name: 'upstash clock',
        note: "the store judges expiry by Redis's clock (TIME): this host or Upstash is off; past the guard's clockSkewMs it refuses every state (ERR_CLOCK_SKEW): fix NTP",
        unreadable: 'cannot read TIME',
      },
      epoch: 'upstash epoch',
      close: () => store.close(),
    };
  },
  tasks: upstashTasks,
};

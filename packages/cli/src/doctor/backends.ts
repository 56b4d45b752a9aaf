// The table of backends: one entry per store `mrtr doctor --store NAME` knows. Adding a store is adding an entry here
// (and its file, when it has lines of its own); the probes over them are written once, in probes.ts.
import type { Backend } from './backend.js';
import { cloudflare } from './cloudflare.js';
import { dynamodb } from './dynamodb.js';
import { redis } from './redis.js';
import { postgres, sqlite } from './sql.js';
import { upstash } from './upstash.js';

/** The in-process store (a dependency of the CLI): single use works, but for one process only. */
const memory: Backend = {
  packages: [],
  unconfigured: () => undefined,
  place: () => 'memory store',
  async open() {
    const { createMemoryStore } = await import('@mrtr/store-memory');
    const store = createMemoryStore({ maxEntries: 1000 });
    return {
      store,
      where: '',
      consumeTimeouts: 1,
      consumed(check) {
        if (check.status !== 'ok') return;
        check.detail += '; one process only: a fleet of instances needs redis or postgres';
        check.status = 'warn';
      },
      close: () => store.close(),
    };
  },
};

/** Every store, in the order `doctor` checks them by default (the environment's, when no `--store` is given). */
export const BACKENDS = { memory, redis, postgres, sqlite, upstash, dynamodb, cloudflare } satisfies Record<string, Backend>;

export type StoreName = keyof typeof BACKENDS;
export const STORES = Object.keys(BACKENDS) as StoreName[];

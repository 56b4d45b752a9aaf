// The table of backends: one entry per store `mrtr doctor --store NAME` knows. Adding a store is adding an entry here
// (and its file, when it has lines of its own); the probes over them are written once, in probes.ts.
import type { Backend } from './backend.js';
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

/**
 * A Durable Object exists only inside its Worker: its namespace binding is not reachable from a shell, and
 * `@mrtr/store-cloudflare` offers no route to reach it from outside. The CLI says so instead of pretending.
 */
const cloudflare: Backend = {
  packages: ['@mrtr/store-cloudflare'],
  outsideCli:
    'the cloudflare store (a Durable Object) exists only inside its Worker, so the CLI cannot open it. Check it where it runs: at the start of the Worker, await guard.checkKeys() and guard.checkClock() (createMrtr(...).guard), and run @mrtr/test-suite against it in workerd; here, "mrtr doctor --store none" checks MRTR_KEYS and the codecs',
  place: () => 'Durable Object',
  open: () => Promise.reject(new Error('not reachable from the CLI')),
};

/** Every store, in the order `doctor` checks them by default (the environment's, when no `--store` is given). */
export const BACKENDS = { memory, redis, postgres, sqlite, upstash, dynamodb, cloudflare } satisfies Record<string, Backend>;

export type StoreName = keyof typeof BACKENDS;
export const STORES = Object.keys(BACKENDS) as StoreName[];

// The tests that run inside workerd, against the real Durable Object: the shared suites plus this store's own
// lost-reply tests. Imported by the test Worker (which runs them) and by the Node test (which lists them by
// name, so that every test registered here must report a result: none can go missing silently).
import { MrtrError, type ReplayStore } from '@mrtr/core';
// The suites' own modules (the package index also exports a TCP proxy for Node only).
import { type LossyStore, storeCompliance } from '../../../test-suite/src/store.js';
import { taskStoreCompliance } from '../../../test-suite/src/task-store.js';
import type { TestFn } from '../../../test-suite/src/types.js';
import type { DurableObjectNamespaceLike, DurableObjectStubLike } from '../../src/binding.js';
import { createDurableObjectStore, createDurableObjectTaskStore } from '../../src/index.js';
import { loseShard, registerEpochTests } from './epoch-tests.js';
import { registerLeaseTests } from './lease-tests.js';

/** The doctor route's token in these tests (a Worker reads it from a secret). */
export const DOCTOR_TOKEN = 'workerd-doctor-token-0123456789abcdef';

export interface TestEnv {
  /** The namespace of MrtrStoreObject (SQLite-backed). */
  STORE: DurableObjectNamespaceLike;
  /** A namespace whose object throws on every request: a store that cannot reach its backend. */
  BROKEN: DurableObjectNamespaceLike;
}

/** Shards of the replay store under test: more than one, so ids and bounds are spread as in production. */
export const REPLAY_SHARDS = 4;

/** The reply of a request that ran is dropped: what the caller sees when the connection dies after the object acted. */
type Drop = 'none' | 'next' | 'all';

/** A binding whose stubs forward every request to the real object, and can drop the replies after it ran. */
export function droppingBinding(real: DurableObjectNamespaceLike): {
  binding: DurableObjectNamespaceLike;
  /** `'next'`: the next request's reply (of operation `op` only, when given); `'all'`: every reply until `'none'`. */
  drop(mode: Drop, op?: string): void;
} {
  let mode: Drop = 'none';
  let only: string | undefined;
  const binding: DurableObjectNamespaceLike = {
    idFromName: (name) => real.idFromName(name),
    get(id): DurableObjectStubLike {
      return {
        async fetch(input, init) {
          const response = await real.get(id).fetch(input, init);
          const text = await response.text(); // the object has acted and answered
          const op = (JSON.parse(init.body) as { op?: unknown }).op;
          if (mode === 'all' || (mode === 'next' && (only === undefined || only === op))) {
            if (mode === 'next') mode = 'none';
            throw new Error('Network connection lost.');
          }
          return { status: response.status, text: async () => text };
        },
      };
    },
  };
  return {
    binding,
    drop: (next, op) => {
      mode = next;
      only = op;
    },
  };
}

const code = async (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    (value) => value,
    (error: unknown) => (MrtrError.is(error) ? error.code : `not an MrtrError: ${String(error)}`),
  );

function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

let t = 1_700_000_000_000;
/**
 * The one clock of the test Worker: the store clients of the task store and the objects (the test subclass of
 * MrtrStoreObject in suite-worker.ts passes it as the object's clock) share the isolate, so both read it.
 */
export const clock = {
  now: (): number => t,
  advance: (ms: number): void => {
    t += ms;
  },
};

export function registerTests(it: TestFn, env: () => TestEnv): void {
  const replay = (namespace: string, extra: object = {}): ReplayStore =>
    createDurableObjectStore({ objects: env().STORE, namespace, shards: REPLAY_SHARDS, ...extra });

  storeCompliance(it, (options) => replay(options.namespace, options), {
    name: 'durable object store',
    outcomes: true,
    keyFingerprints: true,
    clock,
    // The ledger lost in place: every shard's object loses its epoch row and its ids.
    loseLedger: async (namespace) => {
      for (let shard = 0; shard < REPLAY_SHARDS; shard++) await loseShard(env(), namespace, shard);
    },
    unreachable: () => createDurableObjectStore({ objects: env().BROKEN, namespace: 'down', timeoutMs: 5_000 }),
    lostReply: ({ namespace }): LossyStore => {
      const lossy = droppingBinding(env().STORE);
      const store = createDurableObjectStore({ objects: lossy.binding, namespace, shards: REPLAY_SHARDS });
      return {
        store,
        // 'late' and 'lost' both drop the consume's reply; 'lost' also drops the answer of the owner check.
        loseNextReply: (mode) => lossy.drop(mode === 'late' ? 'next' : 'all'),
        restore: () => lossy.drop('none'),
        close: () => store.close(),
      };
    },
  });

  taskStoreCompliance(it, (options) => createDurableObjectTaskStore({ objects: env().STORE, ...options, now: clock.now }), {
    name: 'durable object task store',
    clock,
  });

  let sequence = 0;
  const unique = (tag: string) => `${tag}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;

  it('lost replies: a claim whose reply is lost is first for its caller, pending or replayed for others, unknown when the check fails', async () => {
    const namespace = unique('lost-claim');
    const lossy = droppingBinding(env().STORE);
    const store = createDurableObjectStore({ objects: lossy.binding, namespace, shards: REPLAY_SHARDS });
    const peer = createDurableObjectStore({ objects: env().STORE, namespace, shards: REPLAY_SHARDS });
    const exp = clock.now() + 60_000;
    const mine = unique('mine');
    lossy.drop('next');
    check((await store.claim(mine, exp, 'fp')).status === 'first', "the claim was this call's: first");
    check((await peer.claim(mine, exp, 'fp')).status === 'pending', 'and the id is held for everyone');
    lossy.drop('next');
    check((await store.record(mine, 'fp', 'the-outcome')) === true, 'a record whose reply is lost but that landed is true');
    const recorded = await peer.claim(mine, exp, 'fp');
    check(recorded.status === 'recorded' && recorded.outcome === 'the-outcome', 'the outcome was stored');
    const theirs = unique('theirs');
    check((await peer.claim(theirs, exp, 'fp')).status === 'first', 'the peer claims first');
    lossy.drop('next');
    check((await store.claim(theirs, exp, 'fp')).status === 'pending', "someone else's claim, same fingerprint: pending");
    lossy.drop('next');
    check((await store.claim(theirs, exp, 'other')).status === 'replayed', "someone else's claim, other fingerprint: replayed");
    const unknown = unique('unknown');
    lossy.drop('all');
    check((await code(store.claim(unknown, exp, 'fp'))) === 'ERR_STORE_UNAVAILABLE', 'reply and check both lost: unavailable');
    check((await code(store.consume(unique('u2'), exp))) === 'ERR_STORE_UNAVAILABLE', 'a consume too');
    lossy.drop('none');
    check((await peer.claim(unknown, exp, 'fp')).status === 'pending', 'the claim landed: never a second first');
    check((await store.claim(unknown, exp, 'fp')).status === 'pending', 'the caller itself sees it held once the link is back');
  });

  it('lost replies: a task create or update whose reply is lost is settled by its version', async () => {
    const lossy = droppingBinding(env().STORE);
    const namespace = unique('lost-task');
    const store = createDurableObjectTaskStore({ objects: lossy.binding, namespace, now: clock.now });
    const peer = createDurableObjectTaskStore({ objects: env().STORE, namespace, now: clock.now });
    const at = clock.now();
    const task = {
      taskId: unique('task'),
      principal: 'alice',
      status: 'working' as const,
      createdAt: at,
      lastUpdatedAt: at,
      ttlMs: 60_000,
      inputRequests: {},
      askedKeys: [],
    };
    lossy.drop('next');
    await store.create(task);
    check((await peer.get(task.taskId))?.status === 'working', 'the create landed and resolved');
    lossy.drop('next', 'tput');
    const updated = await store.update(task.taskId, (r) => ({ ...r, statusMessage: 'half' }));
    check(updated?.statusMessage === 'half', 'a lost update reply that landed resolves with the record');
    check((await peer.get(task.taskId))?.statusMessage === 'half', 'and the peer reads it');
    lossy.drop('all');
    check(
      (await code(store.update(task.taskId, (r) => ({ ...r, statusMessage: 'x' })))) === 'ERR_STORE_UNAVAILABLE',
      'every answer lost: unavailable',
    );
    check((await code(store.create({ ...task, taskId: unique('t2') }))) === 'ERR_STORE_UNAVAILABLE', 'a create too');
    lossy.drop('none');
  });

  it('ids are spread over the shards by hash: the same id always reaches the same object', async () => {
    const namespace = unique('spread');
    const seen = new Set<string>();
    const counting: DurableObjectNamespaceLike = {
      idFromName: (name) => {
        seen.add(name);
        return env().STORE.idFromName(name);
      },
      get: (id) => env().STORE.get(id),
    };
    const store = createDurableObjectStore({ objects: counting, namespace, shards: REPLAY_SHARDS });
    check(seen.size === REPLAY_SHARDS, `one object name per shard, got ${seen.size}`);
    const exp = clock.now() + 60_000;
    const ids = Array.from({ length: 64 }, (_, i) => unique(`spread-${i}`));
    for (const id of ids) check((await store.consume(id, exp)) === true, 'first consume');
    // Another client on the same namespace routes every id to the same object (else these would be true).
    const other = createDurableObjectStore({ objects: env().STORE, namespace, shards: REPLAY_SHARDS });
    for (const id of ids) check((await other.consume(id, exp)) === false, 'the same id reaches the same object');
    // A client with another shard count would route differently: the shard count is part of the deployment.
    const narrow = createDurableObjectStore({ objects: env().STORE, namespace, shards: 1 });
    let fresh = 0;
    for (const id of ids) if ((await narrow.consume(id, exp)) === true) fresh++;
    check(fresh > 0 && fresh < ids.length, `only the ids of shard 0 are seen by a one-shard client (${fresh} of ${ids.length} fresh)`);
  });

  it('maxEntries is split between the objects and fails closed when one is full', async () => {
    const store = createDurableObjectStore({ objects: env().STORE, namespace: unique('full'), shards: 1, maxEntries: 3 });
    const exp = clock.now() + 1_000;
    for (let i = 0; i < 3; i++) check((await store.consume(unique('f'), exp)) === true, 'within maxEntries');
    check((await code(store.consume(unique('f'), exp))) === 'ERR_STORE_FULL', 'past maxEntries: ERR_STORE_FULL');
    clock.advance(1_001);
    check((await store.consume(unique('f'), clock.now() + 1_000)) === true, 'expired ids make room');
  });

  registerLeaseTests(it, env);
  registerEpochTests(it, env);
}

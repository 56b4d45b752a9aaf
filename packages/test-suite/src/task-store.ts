import { MrtrError } from '@mrtr/core';
import type { TaskRecord, TaskStore } from '@mrtr/core/tasks';
import { fail, ok, refusesUnknownOption } from './assert.js';
import type { TestFn } from './types.js';

/**
 * Makes a task store on `namespace` with the given bounds (the suite passes small ones). Pass what it is given through
 * to the store's factory: one test gives a misspelt option, which the store's factory must refuse.
 */
export type TaskStoreFactory = (options: {
  namespace: string;
  maxLivePerPrincipal: number;
  maxPerPrincipal: number;
  /** Passed by the store-wide bound's test only (others leave the store's default). */
  maxTasks?: number;
}) => TaskStore | Promise<TaskStore>;

export interface TaskStoreComplianceOptions {
  /**
   * The fake clock the store judges expiry by. Without it (a backend that expires by its own clock, like Redis)
   * the expiry test runs in real time with a TTL of `ttlMs`, doubled and repeated when a loaded machine overslept.
   */
  clock?: { now(): number; advance(ms: number): void | Promise<void> };
  /** Real-time TTL for the expiry test when there is no fake clock. @default 1000 */
  ttlMs?: number;
  /** Stores made by two factory calls with one namespace share their tasks (false for in-process stores). @default true */
  sharedBackend?: boolean;
  /** Label used in test names. @default "task store" */
  name?: string;
  /** Per-test timeout in ms. @default 30_000 */
  timeoutMs?: number;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
let sequence = 0;
const uniqueId = (tag: string) =>
  `${tag}:${process.pid}:${Date.now().toString(36)}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;

const same = (a: unknown, b: unknown): boolean => JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
  );
}

async function rejectsTaskLimit(fn: () => Promise<unknown>, context: string, limit?: string): Promise<void> {
  try {
    await fn();
  } catch (error) {
    ok(MrtrError.is(error) && error.code === 'ERR_TASK_LIMIT', `${context}: expected ERR_TASK_LIMIT, got ${String(error)}`);
    if (limit !== undefined)
      ok(
        (error as { limit?: unknown }).limit === limit,
        `${context}: expected the "${limit}" bound, got ${String((error as { limit?: unknown }).limit)}`,
      );
    return;
  }
  fail(`${context}: was accepted`);
}

async function rejectsType(fn: () => Promise<unknown>, context: string): Promise<void> {
  try {
    await fn();
  } catch (error) {
    ok(error instanceof TypeError, `${context}: expected a TypeError, got ${String(error)}`);
    return;
  }
  fail(`${context}: was accepted`);
}

/**
 * The contract of a `TaskStore` (see its TSDoc in `@mrtr/core`):
 * `taskStoreCompliance(it, ({ namespace, maxLivePerPrincipal, maxPerPrincipal }) => createMyTaskStore({ … }))`.
 */
export function taskStoreCompliance(it: TestFn, factory: TaskStoreFactory, options: TaskStoreComplianceOptions = {}): void {
  const label = options.name ?? 'task store';
  const timeout = options.timeoutMs ?? 30_000;
  const clock = options.clock;
  const now = () => (clock ? clock.now() : Date.now());
  const test = (name: string, fn: () => Promise<void>): void => it(`${label} compliance: ${name}`, fn, timeout);
  const limits = { maxLivePerPrincipal: 3, maxPerPrincipal: 5 };

  const open = (namespace: string) => factory({ namespace, ...limits });
  const close = async (store: TaskStore) => {
    await store.close?.();
  };
  const withStore = async (fn: (store: TaskStore) => Promise<void>, maxTasks?: number): Promise<void> => {
    const store = await (maxTasks === undefined ? open(uniqueId('ns')) : factory({ namespace: uniqueId('ns'), ...limits, maxTasks }));
    try {
      await fn(store);
    } finally {
      await close(store);
    }
  };

  const record = (principal: string, extra: Partial<TaskRecord> = {}): TaskRecord => {
    const t = now();
    return {
      taskId: uniqueId('task'),
      principal,
      status: 'working',
      createdAt: t,
      lastUpdatedAt: t,
      ttlMs: 3_600_000,
      pollIntervalMs: 1_000,
      inputRequests: {},
      askedKeys: [],
      ...extra,
    };
  };
  const finish = (store: TaskStore, taskId: string) =>
    store.update(taskId, (r) => ({ ...r, status: 'completed', result: { content: [] }, lastUpdatedAt: now() }));

  test('refuses an unknown option with a TypeError naming it', async () => {
    const misspelt = { namespace: uniqueId('strict'), ...limits, maxLivePerPrincipl: 3 } as Parameters<TaskStoreFactory>[0];
    await refusesUnknownOption(() => factory(misspelt), 'maxLivePerPrincipl', close);
  });

  test('create makes the task readable; get answers undefined for an unknown id', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      ok((await store.create(task)) === undefined, 'create must resolve undefined');
      ok(same(await store.get(task.taskId), task), 'get must answer the record created');
      ok((await store.get(uniqueId('nope'))) === undefined, 'an unknown id must be undefined');
      ok((await store.get(`${task.taskId}x`)) === undefined, 'an id with a suffix is another id');
    });
  });

  test('every field round-trips as JSON, with unicode, nested values and a 256 KiB result', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('ünï😀'), {
        taskId: `${uniqueId('t')}:ünï:😀`,
        status: 'input_required',
        statusMessage: 'waiting for “approval” ✓',
        inputRequests: {
          approve: {
            method: 'elicitation/create',
            params: { message: 'Deploy?', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } },
          },
        },
        askedKeys: ['approve', 'earlier'],
        answers: { earlier: { action: 'accept', content: { n: 1.5, s: 'x', list: [null, true, 'ü'] } } },
        leaseUntil: now() + 30_000,
      });
      await store.create(task);
      ok(same(await store.get(task.taskId), task), 'the record must come back unchanged');
      const big = 'x'.repeat(256 * 1024);
      const error = { code: -32603, message: 'Internal error', data: { nested: { deep: [1, 2, 3] } } };
      await store.update(task.taskId, (r) => ({
        ...r,
        status: 'failed',
        error,
        inputRequests: {},
        statusMessage: big,
        lastUpdatedAt: now(),
      }));
      const read = await store.get(task.taskId);
      ok(read?.status === 'failed' && read.statusMessage === big && same(read.error, error), 'a large final record must round-trip');
    });
  });

  test('get and update answer copies: changing them changes nothing stored', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      await store.create(task);
      task.askedKeys.push('mutated-after-create');
      const read = await store.get(task.taskId);
      ok(read !== undefined && read.askedKeys.length === 0, 'create must keep a copy');
      read.askedKeys.push('mutated-after-get');
      read.inputRequests.x = { method: 'elicitation/create' };
      const updated = await store.update(task.taskId, (r) => ({ ...r, statusMessage: 'one' }));
      ok(
        updated !== undefined && updated.askedKeys.length === 0 && Object.keys(updated.inputRequests).length === 0,
        'get must answer a copy',
      );
      updated.askedKeys.push('mutated-after-update');
      const again = await store.get(task.taskId);
      ok(again?.askedKeys.length === 0 && again.statusMessage === 'one', 'update must answer a copy');
    });
  });

  test('update applies the change and answers the new record; undefined from change leaves it; an unknown id is undefined without calling change', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      await store.create(task);
      const next = await store.update(task.taskId, (r) => ({
        ...r,
        status: 'input_required',
        askedKeys: ['k'],
        lastUpdatedAt: r.lastUpdatedAt + 1,
      }));
      ok(next?.status === 'input_required' && next.askedKeys[0] === 'k', 'update must answer the changed record');
      ok(same(await store.get(task.taskId), next), 'get must see the change');
      const kept = await store.update(task.taskId, () => undefined);
      ok(same(kept, next), 'undefined from change must answer the current record unchanged');
      let called = false;
      const unknown = await store.update(uniqueId('nope'), (r) => {
        called = true;
        return r;
      });
      ok(unknown === undefined && !called, 'an unknown id must answer undefined without calling change');
    });
  });

  test('a change may not move a task (taskId, principal, createdAt) nor revive a final one: TypeError, record unchanged', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      await store.create(task);
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, taskId: uniqueId('other') })), 'changing taskId');
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, principal: 'mallory' })), 'changing principal');
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, createdAt: r.createdAt - 1 })), 'changing createdAt');
      ok(same(await store.get(task.taskId), task), 'refused changes must leave the record as it was');
      await store.update(task.taskId, (r) => ({ ...r, status: 'cancelled' }));
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, status: 'working' })), 'reviving a cancelled task');
      ok((await store.get(task.taskId))?.status === 'cancelled', 'a final task must stay final');
    });
  });

  test('create refuses an id already present and keeps the first record', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      await store.create(task);
      let refused = false;
      try {
        await store.create({ ...task, principal: uniqueId('mallory'), statusMessage: 'second' });
      } catch {
        refused = true;
      }
      ok(refused, 'a second create with the same id must reject');
      ok(same(await store.get(task.taskId), task), 'the first record must be kept');
    });
  });

  test('per-principal bounds: unfinished tasks (live) and kept tasks, each principal on its own', async () => {
    await withStore(async (store) => {
      const alice = uniqueId('alice');
      const ids: string[] = [];
      for (let i = 0; i < limits.maxLivePerPrincipal; i++) {
        const task = record(alice);
        await store.create(task);
        ids.push(task.taskId);
      }
      await rejectsTaskLimit(() => store.create(record(alice)), 'one unfinished task too many', 'live');
      await store.create(record(uniqueId('bob'))); // another principal is not affected
      await finish(store, ids[0]!);
      await store.create(record(alice)); // a final task frees its unfinished slot: 3 live, 4 kept
      await store.create(record(alice, { status: 'completed', result: { content: [] } })); // 3 live, 5 kept
      await rejectsTaskLimit(() => store.create(record(alice, { status: 'completed' })), 'one kept task too many', 'kept');
      await finish(store, ids[1]!);
      await rejectsTaskLimit(() => store.create(record(alice)), 'finishing a task does not free a kept slot', 'kept');
      for (const id of ids) ok((await store.get(id)) !== undefined, 'refused creates must not drop other tasks');
    });
  });

  test('the bounds hold under 24 concurrent creates of one principal', async () => {
    await withStore(async (store) => {
      const alice = uniqueId('alice');
      const settled = await Promise.allSettled(Array.from({ length: 24 }, () => store.create(record(alice))));
      const created = settled.filter((s) => s.status === 'fulfilled').length;
      ok(created === limits.maxLivePerPrincipal, `expected exactly ${limits.maxLivePerPrincipal} creates, got ${created}`);
      for (const s of settled) {
        if (s.status === 'rejected')
          ok(
            MrtrError.is(s.reason) && s.reason.code === 'ERR_TASK_LIMIT',
            `a refused create must be ERR_TASK_LIMIT, got ${String(s.reason)}`,
          );
      }
    });
  });

  test('a full store makes room from the heaviest holder of final tasks; only unfinished tasks fill it', async () => {
    await withStore(async (store) => {
      const heavy = uniqueId('heavy');
      const light = uniqueId('light');
      const heavyIds: string[] = [];
      for (let i = 0; i < limits.maxPerPrincipal; i++) {
        const task = record(heavy, { status: 'completed', result: { content: [] } });
        await store.create(task);
        heavyIds.push(task.taskId);
      }
      const lightIds: string[] = [];
      for (let i = 0; i < limits.maxLivePerPrincipal; i++) {
        const task = record(light);
        await store.create(task);
        lightIds.push(task.taskId);
      }
      // 5 + 3 = 8 = maxTasks: full. A newcomer still gets a task, from the heavy holder's final ones.
      const newcomer = record(uniqueId('newcomer'));
      await store.create(newcomer);
      ok((await store.get(newcomer.taskId)) !== undefined, "the newcomer's task must be readable");
      const heavyLeft = (await Promise.all(heavyIds.map((id) => store.get(id)))).filter((t) => t !== undefined).length;
      ok(heavyLeft === limits.maxPerPrincipal - 1, `exactly one of the heaviest holder's final tasks must go, ${heavyLeft} left`);
      for (const id of lightIds) ok((await store.get(id)) !== undefined, 'unfinished tasks are never dropped to make room');
    }, 8);
    await withStore(async (store) => {
      const ids: string[] = [];
      for (let p = 0; p < 2; p++) {
        const who = uniqueId('live');
        for (let i = 0; i < limits.maxLivePerPrincipal; i++) {
          const task = record(who);
          await store.create(task);
          ids.push(task.taskId);
        }
      }
      await rejectsTaskLimit(() => store.create(record(uniqueId('late'))), 'a store full of unfinished tasks', 'store');
      for (const id of ids) ok((await store.get(id)) !== undefined, 'a refused create drops nothing');
    }, 2 * limits.maxLivePerPrincipal);
    await withStore(async (store) => {
      const settled = await Promise.allSettled(Array.from({ length: 12 }, () => store.create(record(uniqueId('racer')))));
      const created = settled.filter((s) => s.status === 'fulfilled').length;
      ok(created === 8, `the store-wide bound must hold under 12 concurrent creates: expected 8, got ${created}`);
    }, 8);
  });

  test("a full store drops a final task only from a holder keeping two more tasks than the newcomer, or the newcomer's own", async () => {
    const done: Partial<TaskRecord> = { status: 'completed', result: { content: [] } };
    await withStore(
      async (store) => {
        // Two busy principals fill the store with unfinished tasks; a light one keeps one finished task: full.
        const busy = [uniqueId('busy'), uniqueId('busy')];
        for (const who of busy) for (let i = 0; i < limits.maxLivePerPrincipal; i++) await store.create(record(who));
        const kept = record(uniqueId('light'), done);
        await store.create(kept);
        // Neither a newcomer nor a busy principal takes the light holder's only finished task: the store refuses.
        await rejectsTaskLimit(
          () => store.create(record(uniqueId('newcomer'))),
          'a newcomer, only a light holder holding a final task',
          'store',
        );
        await rejectsTaskLimit(
          () => store.create(record(busy[0]!, done)),
          'a heavier holder, only a light holder holding a final task',
          'store',
        );
        ok((await store.get(kept.taskId)) !== undefined, "a light holder's final task must stay while heavier holders fill the store");
        // Its holder may give it up for a task of its own (its share does not change).
        const next = record(kept.principal);
        await store.create(next);
        ok(
          (await store.get(next.taskId)) !== undefined && (await store.get(kept.taskId)) === undefined,
          'the newcomer drops its own final task',
        );
      },
      2 * limits.maxLivePerPrincipal + 1,
    );
    await withStore(async (store) => {
      // A heavy holder (3 final tasks) and a light one (1): the heavy holder's go first, never the light one's.
      const heavy = uniqueId('heavy');
      const light = record(uniqueId('light'), done);
      await store.create(light);
      for (let i = 0; i < 3; i++) await store.create(record(heavy, done));
      await store.create(record(uniqueId('newcomer')));
      ok((await store.get(light.taskId)) !== undefined, "a light holder's final task must stay while a heavier holder has one");
    }, 4);
  });

  test('24 concurrent updates of one task lose none', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      await store.create(task);
      await Promise.all(
        Array.from({ length: 24 }, (_, i) => store.update(task.taskId, (r) => ({ ...r, askedKeys: [...r.askedKeys, `k${i}`] }))),
      );
      const keys = new Set((await store.get(task.taskId))?.askedKeys);
      ok(keys.size === 24, `expected 24 keys after 24 concurrent updates, got ${keys.size}`);
    });
  });

  test('a task is readable until lastUpdatedAt + ttlMs; an update restarts the period; an expired task frees its slots', async () => {
    await withStore(async (store) => {
      const alice = uniqueId('alice');
      if (clock) {
        const ttl = 60_000;
        const task = record(alice, { ttlMs: ttl });
        await store.create(task);
        await clock.advance(ttl / 2);
        await store.update(task.taskId, (r) => ({ ...r, statusMessage: 'halfway', lastUpdatedAt: now() }));
        await clock.advance(ttl / 2 + 1);
        ok((await store.get(task.taskId))?.statusMessage === 'halfway', 'an update must restart the readable period');
        await clock.advance(ttl / 2 - 2);
        ok((await store.get(task.taskId)) !== undefined, 'a task must be readable just before lastUpdatedAt + ttlMs');
        await clock.advance(1);
        ok((await store.get(task.taskId)) === undefined, 'a task must be gone at lastUpdatedAt + ttlMs');
        ok((await store.update(task.taskId, (r) => r)) === undefined, 'update of an expired task must answer undefined');
        // Fill both bounds with short-lived tasks, let them expire: the principal can create again.
        for (let i = 0; i < limits.maxLivePerPrincipal; i++) await store.create(record(alice, { ttlMs: 1_000 }));
        await rejectsTaskLimit(() => store.create(record(alice)), 'live bound before expiry', 'live');
        await clock.advance(1_000);
        await store.create(record(alice));
        return;
      }
      let observed = false;
      for (let round = 0, ttl = options.ttlMs ?? 1000; round < 5 && !observed; round++, ttl *= 2) {
        const principal = uniqueId('alice');
        const task = record(principal, { ttlMs: ttl });
        await store.create(task);
        for (let i = 1; i < limits.maxLivePerPrincipal; i++) await store.create(record(principal, { ttlMs: ttl }));
        const read = await store.get(task.taskId);
        const limited = await store.create(record(principal, { ttlMs: ttl })).then(
          () => false,
          (error: unknown) => MrtrError.is(error) && error.code === 'ERR_TASK_LIMIT',
        );
        if (Date.now() < task.lastUpdatedAt + ttl) {
          ok(read !== undefined, 'a task must be readable before lastUpdatedAt + ttlMs');
          ok(limited, 'the live bound must hold before expiry');
          observed = true;
        }
        while (Date.now() <= task.lastUpdatedAt + ttl) await sleep(task.lastUpdatedAt + ttl - Date.now() + 1);
        await sleep(Math.min(250, ttl));
        ok((await store.get(task.taskId)) === undefined, 'a task must be gone after lastUpdatedAt + ttlMs');
        ok((await store.update(task.taskId, (r) => r)) === undefined, 'update of an expired task must answer undefined');
        await store.create(record(principal)); // expired tasks no longer count
      }
      ok(observed, 'the machine never finished a create and a get within the TTL (5 rounds, TTL doubled each time)');
    });
  });

  test('namespaces do not share tasks', async () => {
    const a = await open(uniqueId('nsA'));
    const b = await open(uniqueId('nsB'));
    try {
      const task = record(uniqueId('alice'));
      await a.create(task);
      ok((await b.get(task.taskId)) === undefined, 'another namespace must not see the task');
      await b.create({ ...task, statusMessage: 'b' });
      ok((await a.get(task.taskId))?.statusMessage === undefined, 'namespace A keeps its own record');
    } finally {
      await close(a);
      await close(b);
    }
  });

  if (options.sharedBackend !== false) {
    test('two instances on one namespace share tasks, bounds and updates; a task survives closing every instance', async () => {
      const namespace = uniqueId('shared');
      const a = await open(namespace);
      const b = await open(namespace);
      const alice = uniqueId('alice');
      let task: TaskRecord;
      try {
        task = record(alice);
        await a.create(task);
        ok(same(await b.get(task.taskId), task), 'the other instance must read the task at once');
        await Promise.all(
          Array.from({ length: 24 }, (_, i) =>
            (i % 2 === 0 ? a : b).update(task.taskId, (r) => ({ ...r, askedKeys: [...r.askedKeys, `k${i}`] })),
          ),
        );
        ok(new Set((await a.get(task.taskId))?.askedKeys).size === 24, 'concurrent updates on two instances must lose none');
        const settled = await Promise.allSettled(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? a : b).create(record(alice))));
        const created = settled.filter((s) => s.status === 'fulfilled').length;
        ok(
          created === limits.maxLivePerPrincipal - 1,
          `the live bound must hold across instances: expected ${limits.maxLivePerPrincipal - 1} creates, got ${created}`,
        );
        await finish(b, task.taskId);
      } finally {
        await close(a);
        await close(b);
      }
      const c = await open(namespace);
      try {
        const read = await c.get(task.taskId);
        ok(read?.status === 'completed' && read.askedKeys.length === 24, 'a new instance must read the task after the others closed');
      } finally {
        await close(c);
      }
    });
  }
}

import { MrtrError } from '@mrtr/core';
import type { TaskRecord } from '@mrtr/core/tasks';
import { ok } from '../assert.js';
import { uniqueId } from '../store/context.js';
import { rejectsTaskLimit, type TaskStoreSuite } from './context.js';

/** The bounds: unfinished and kept tasks per principal, under concurrency, and the store-wide bound's eviction. */
export function boundsGroup(s: TaskStoreSuite): void {
  for (const register of [perPrincipalBounds, boundsHoldUnderConcurrentCreates, aFullStoreMakesRoom, aFullStoreDropsOnlyFromHeavierHolders])
    register(s);
}

function perPrincipalBounds(s: TaskStoreSuite): void {
  const { limits, record, finish, withStore } = s;
  s.test('per-principal bounds: unfinished tasks (live) and kept tasks, each principal on its own', async () => {
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
}

function boundsHoldUnderConcurrentCreates(s: TaskStoreSuite): void {
  const { limits, record, withStore } = s;
  s.test('the bounds hold under 24 concurrent creates of one principal', async () => {
    await withStore(async (store) => {
      const alice = uniqueId('alice');
      const settled = await Promise.allSettled(Array.from({ length: 24 }, () => store.create(record(alice))));
      const created = settled.filter((r) => r.status === 'fulfilled').length;
      ok(created === limits.maxLivePerPrincipal, `expected exactly ${limits.maxLivePerPrincipal} creates, got ${created}`);
      for (const r of settled) {
        if (r.status === 'rejected')
          ok(
            MrtrError.is(r.reason) && r.reason.code === 'ERR_TASK_LIMIT',
            `a refused create must be ERR_TASK_LIMIT, got ${String(r.reason)}`,
          );
      }
    });
  });
}

function aFullStoreMakesRoom(s: TaskStoreSuite): void {
  const { limits, record, withStore } = s;
  s.test('a full store makes room from the heaviest holder of final tasks; only unfinished tasks fill it', async () => {
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
      const created = settled.filter((r) => r.status === 'fulfilled').length;
      ok(created === 8, `the store-wide bound must hold under 12 concurrent creates: expected 8, got ${created}`);
    }, 8);
  });
}

function aFullStoreDropsOnlyFromHeavierHolders(s: TaskStoreSuite): void {
  const { limits, record, withStore } = s;
  s.test("a full store drops a final task only from a holder keeping two more tasks than the newcomer, or the newcomer's own", async () => {
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
}

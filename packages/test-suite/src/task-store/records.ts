import type { TaskRecord, TaskStore } from '@mrtr/core/tasks';
import { ok, refusesUnknownOption } from '../assert.js';
import { uniqueId } from '../store/context.js';
import { rejectsType, same, type TaskStoreSuite } from './context.js';
import type { TaskStoreFactory } from './options.js';

/** Records: options, create and get, JSON round trips, copies, updates and what a change may not do, duplicates. */
export function recordsGroup(s: TaskStoreSuite): void {
  for (const register of [
    refusesAnUnknownOption,
    createMakesTheTaskReadable,
    everyFieldRoundTrips,
    getAndUpdateAnswerCopies,
    updateAppliesTheChange,
    aChangeMayNotMoveATask,
    createRefusesAnIdAlreadyPresent,
    concurrentUpdatesLoseNone,
  ])
    register(s);
}

/** A store holding one new unfinished task of a principal of its own, closed afterwards. */
function withTask(s: TaskStoreSuite, fn: (store: TaskStore, task: TaskRecord) => Promise<void>): Promise<void> {
  return s.withStore(async (store) => {
    const task = s.record(uniqueId('alice'));
    await store.create(task);
    await fn(store, task);
  });
}

function refusesAnUnknownOption(s: TaskStoreSuite): void {
  const { factory, limits, close } = s;
  s.test('refuses an unknown option with a TypeError naming it', async () => {
    const misspelt = { namespace: uniqueId('strict'), ...limits, maxLivePerPrincipl: 3 } as Parameters<TaskStoreFactory>[0];
    await refusesUnknownOption(() => factory(misspelt), 'maxLivePerPrincipl', close);
  });
}

function createMakesTheTaskReadable(s: TaskStoreSuite): void {
  const { record, withStore } = s;
  s.test('create makes the task readable; get answers undefined for an unknown id', async () => {
    await withStore(async (store) => {
      const task = record(uniqueId('alice'));
      ok((await store.create(task)) === undefined, 'create must resolve undefined');
      ok(same(await store.get(task.taskId), task), 'get must answer the record created');
      ok((await store.get(uniqueId('nope'))) === undefined, 'an unknown id must be undefined');
      ok((await store.get(`${task.taskId}x`)) === undefined, 'an id with a suffix is another id');
    });
  });
}

function everyFieldRoundTrips(s: TaskStoreSuite): void {
  const { now, record, withStore } = s;
  s.test('every field round-trips as JSON, with unicode, nested values and a 256 KiB result', async () => {
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
}

function getAndUpdateAnswerCopies(s: TaskStoreSuite): void {
  s.test('get and update answer copies: changing them changes nothing stored', async () => {
    await withTask(s, async (store, task) => {
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
}

function updateAppliesTheChange(s: TaskStoreSuite): void {
  s.test(
    'update applies the change and answers the new record; undefined from change leaves it; an unknown id is undefined without calling change',
    async () => {
      await withTask(s, async (store, task) => {
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
    },
  );
}

function aChangeMayNotMoveATask(s: TaskStoreSuite): void {
  s.test('a change may not move a task (taskId, principal, createdAt) nor revive a final one: TypeError, record unchanged', async () => {
    await withTask(s, async (store, task) => {
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, taskId: uniqueId('other') })), 'changing taskId');
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, principal: 'mallory' })), 'changing principal');
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, createdAt: r.createdAt - 1 })), 'changing createdAt');
      ok(same(await store.get(task.taskId), task), 'refused changes must leave the record as it was');
      await store.update(task.taskId, (r) => ({ ...r, status: 'cancelled' }));
      await rejectsType(() => store.update(task.taskId, (r) => ({ ...r, status: 'working' })), 'reviving a cancelled task');
      ok((await store.get(task.taskId))?.status === 'cancelled', 'a final task must stay final');
    });
  });
}

function createRefusesAnIdAlreadyPresent(s: TaskStoreSuite): void {
  s.test('create refuses an id already present and keeps the first record', async () => {
    await withTask(s, async (store, task) => {
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
}

function concurrentUpdatesLoseNone(s: TaskStoreSuite): void {
  s.test('24 concurrent updates of one task lose none', async () => {
    await withTask(s, async (store, task) => {
      await Promise.all(
        Array.from({ length: 24 }, (_, i) => store.update(task.taskId, (r) => ({ ...r, askedKeys: [...r.askedKeys, `k${i}`] }))),
      );
      const keys = new Set((await store.get(task.taskId))?.askedKeys);
      ok(keys.size === 24, `expected 24 keys after 24 concurrent updates, got ${keys.size}`);
    });
  });
}

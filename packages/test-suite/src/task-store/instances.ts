import type { TaskRecord } from '@mrtr/core/tasks';
import { ok } from '../assert.js';
import { uniqueId } from '../store/context.js';
import { same, type TaskStoreSuite } from './context.js';

/** Instances: namespaces keep apart, and (a shared backend) two instances on one namespace share everything. */
export function instancesGroup(s: TaskStoreSuite): void {
  for (const register of [namespacesDoNotShareTasks, twoInstancesOnOneNamespaceShare]) register(s);
}

function namespacesDoNotShareTasks(s: TaskStoreSuite): void {
  const { open, close, record } = s;
  s.test('namespaces do not share tasks', async () => {
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
}

function twoInstancesOnOneNamespaceShare(s: TaskStoreSuite): void {
  const { options, limits, open, close, record, finish } = s;
  if (options.sharedBackend !== false) {
    s.test('two instances on one namespace share tasks, bounds and updates; a task survives closing every instance', async () => {
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
        const created = settled.filter((r) => r.status === 'fulfilled').length;
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

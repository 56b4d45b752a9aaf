import type { TaskRecord, TaskStore } from '@mrtr/core/tasks';
import { uniqueId } from './store/context.js';
import { boundsGroup } from './task-store/bounds.js';
import type { TaskStoreSuite } from './task-store/context.js';
import { expiryGroup } from './task-store/expiry.js';
import { instancesGroup } from './task-store/instances.js';
import type { TaskStoreComplianceOptions, TaskStoreFactory } from './task-store/options.js';
import { recordsGroup } from './task-store/records.js';
import type { TestFn } from './types.js';

export type { TaskStoreComplianceOptions, TaskStoreFactory } from './task-store/options.js';

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

  const suite: TaskStoreSuite = { label, factory, options, clock, limits, now, test, open, close, withStore, record, finish };
  recordsGroup(suite);
  boundsGroup(suite);
  expiryGroup(suite);
  instancesGroup(suite);
}

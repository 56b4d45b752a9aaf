import { MrtrError } from '@mrtr/core';
import type { TaskRecord, TaskStore } from '@mrtr/core/tasks';
import { fail, ok } from '../assert.js';
import type { TaskStoreComplianceOptions, TaskStoreFactory } from './options.js';

/** The per-principal bounds every store of the suite is made with (the store-wide bound is given per test). */
export interface TaskLimits {
  readonly maxLivePerPrincipal: number;
  readonly maxPerPrincipal: number;
}

/** What the groups of `taskStoreCompliance` share: its options, its test registration, its stores and records. */
export interface TaskStoreSuite {
  readonly label: string;
  readonly factory: TaskStoreFactory;
  readonly options: TaskStoreComplianceOptions;
  /** The suite's fake clock, when the store was built on one. */
  readonly clock: TaskStoreComplianceOptions['clock'];
  readonly limits: TaskLimits;
  /** The suite's time: the fake clock's, else this process's. */
  now(): number;
  test(name: string, fn: () => Promise<void>): void;
  /** A store on `namespace` with the suite's bounds. */
  open(namespace: string): TaskStore | Promise<TaskStore>;
  /** Closes a store (when it has `close`). */
  close(store: TaskStore): Promise<void>;
  /** A store on a fresh namespace (with a store-wide bound of `maxTasks` when given), closed afterwards. */
  withStore(fn: (store: TaskStore) => Promise<void>, maxTasks?: number): Promise<void>;
  /** A fresh unfinished task of `principal`, made now, with `extra` over it. */
  record(principal: string, extra?: Partial<TaskRecord>): TaskRecord;
  /** Completes the task `taskId`. */
  finish(store: TaskStore, taskId: string): Promise<TaskRecord | undefined>;
}

/** Whether two values are the same JSON, whatever the order of their keys. */
export const same = (a: unknown, b: unknown): boolean => JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
  );
}

/** Fails unless `fn` rejects with `ERR_TASK_LIMIT` (of the bound `limit`, when given). */
export async function rejectsTaskLimit(fn: () => Promise<unknown>, context: string, limit?: string): Promise<void> {
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

/** Fails unless `fn` rejects with a TypeError. */
export async function rejectsType(fn: () => Promise<unknown>, context: string): Promise<void> {
  try {
    await fn();
  } catch (error) {
    ok(error instanceof TypeError, `${context}: expected a TypeError, got ${String(error)}`);
    return;
  }
  fail(`${context}: was accepted`);
}

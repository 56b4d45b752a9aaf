// The task store suite bites: a correct reference task store passes it, and each deliberately broken one fails
// it on the test meant to catch its flaw.
import type { TaskRecord, TaskStore } from '@mrtr/core';
import { assertTaskChange, isTerminalStatus, TaskLimitError, taskExpiresAt } from '@mrtr/core/authoring';
import { describe, expect, it } from 'vitest';
import { taskStoreCompliance } from '../src/index.js';
import { collect, runCollected } from './fixtures.js';

interface Flaws {
  /** Awaits between counting a principal's tasks and inserting (the count is stale under concurrency). */
  racyBounds?: boolean;
  /** Awaits between reading a record and writing the change back (a concurrent update is lost). */
  lostUpdates?: boolean;
  /** Never expires a task. */
  noExpiry?: boolean;
  /** Hands out and keeps the caller's objects instead of copies. */
  sharesObjects?: boolean;
  /** Does not check what a change alters. */
  noChangeCheck?: boolean;
  /** Bounds only unfinished tasks. */
  noKeptBound?: boolean;
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * An async in-process task store over one shared map per namespace (so two instances on one namespace share it,
 * as a backend would): correct without flaws.
 */
function referenceTaskStores(flaws: Flaws, now: () => number) {
  const backends = new Map<string, Map<string, TaskRecord>>();
  return ({
    namespace,
    maxLivePerPrincipal,
    maxPerPrincipal,
  }: {
    namespace: string;
    maxLivePerPrincipal: number;
    maxPerPrincipal: number;
  }): TaskStore => {
    let tasks = backends.get(namespace);
    if (tasks === undefined) backends.set(namespace, (tasks = new Map()));
    const map = tasks;
    const copy = <T>(value: T): T => (flaws.sharesObjects ? value : structuredClone(value));
    const live = (id: string): TaskRecord | undefined => {
      const record = map.get(id);
      if (record === undefined) return undefined;
      if (!flaws.noExpiry && now() >= taskExpiresAt(record)) {
        map.delete(id);
        return undefined;
      }
      return record;
    };
    return {
      async create(record) {
        await tick();
        const mine = [...map.keys()].map(live).filter((r) => r?.principal === record.principal) as TaskRecord[];
        const unfinished = mine.filter((r) => !isTerminalStatus(r.status)).length;
        if (flaws.racyBounds) await tick();
        if (!isTerminalStatus(record.status) && unfinished >= maxLivePerPrincipal) throw new TaskLimitError('live', maxLivePerPrincipal);
        if (!flaws.noKeptBound && mine.length >= maxPerPrincipal) throw new TaskLimitError('kept', maxPerPrincipal);
        if (live(record.taskId) !== undefined) throw new Error('task id already present');
        map.set(record.taskId, copy(record));
      },
      async get(taskId) {
        await tick();
        const record = live(taskId);
        return record === undefined ? undefined : copy(record);
      },
      async update(taskId, change) {
        await tick();
        const record = live(taskId);
        if (record === undefined) return undefined;
        const next = change(copy(record));
        if (next === undefined) return copy(record);
        if (!flaws.noChangeCheck) assertTaskChange('reference task store', record, next);
        if (flaws.lostUpdates) await tick();
        map.set(taskId, copy(next));
        return copy(next);
      },
    };
  };
}

async function run(flaws: Flaws) {
  let t = 1_000_000;
  const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
  return runCollected(collect((it) => taskStoreCompliance(it, referenceTaskStores(flaws, clock.now), { clock })));
}

describe('the task store suite', () => {
  it('passes a correct reference task store', async () => {
    const { failed, passed } = await run({});
    expect(failed).toEqual([]);
    expect(passed.length).toBe(12);
  });

  it.each([
    ['a store whose bounds race (count, then insert)', { racyBounds: true }, ['24 concurrent creates', 'two instances']],
    ['a store that loses concurrent updates (read, then write)', { lostUpdates: true }, ['24 concurrent updates', 'two instances']],
    ['a store that never expires tasks', { noExpiry: true }, ['readable until lastUpdatedAt + ttlMs']],
    ['a store that shares objects with its callers', { sharesObjects: true }, ['answer copies']],
    ['a store that lets a change move a task', { noChangeCheck: true }, ['may not move a task']],
    ['a store without the kept bound', { noKeptBound: true }, ['per-principal bounds']],
  ] as const)('fails %s', async (_label, flaws, mustFail) => {
    const { failed } = await run(flaws);
    for (const name of mustFail)
      expect(
        failed.some((f) => f.includes(name)),
        `${name} in ${JSON.stringify(failed)}`,
      ).toBe(true);
  });
});

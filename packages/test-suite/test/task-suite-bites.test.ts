// The task store suite bites: a correct reference task store passes it, and each deliberately broken one fails
// it on the test meant to catch its flaw.
import { TaskLimitError } from '@mrtr/core/errors';
import { rejectUnknownOptions } from '@mrtr/core/options';
import { assertTaskChange, isTerminalStatus, roomFromAtLeast, taskExpiresAt, type TaskRecord, type TaskStore } from '@mrtr/core/tasks';
import { describe, expect, it } from 'vitest';
import { taskStoreCompliance } from '../src/index.js';
import { collect, runCollected } from './fixtures.js';

interface Flaws {
  /** Ignores an option it does not know (a misspelt bound is silently dropped). */
  laxOptions?: boolean;
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
  /** Has no store-wide bound. */
  noStoreBound?: boolean;
  /** Refuses a create when full instead of dropping the heaviest holder's oldest final task. */
  refusesWhenFull?: boolean;
  /** When full, drops the heaviest holder's final task however light it is (even for a heavier newcomer). */
  dropsLightHolders?: boolean;
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * An async in-process task store over one shared map per namespace (so two instances on one namespace share it,
 * as a backend would): correct without flaws.
 */
function referenceTaskStores(flaws: Flaws, now: () => number) {
  const backends = new Map<string, Map<string, TaskRecord>>();
  return (options: { namespace: string; maxLivePerPrincipal: number; maxPerPrincipal: number; maxTasks?: number }): TaskStore => {
    if (!flaws.laxOptions)
      rejectUnknownOptions('referenceTaskStore', options, {
        namespace: true,
        maxLivePerPrincipal: true,
        maxPerPrincipal: true,
        maxTasks: true,
      });
    const { namespace, maxLivePerPrincipal, maxPerPrincipal, maxTasks = 100_000 } = options;
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
        const all = [...map.keys()].map(live).filter((r) => r !== undefined) as TaskRecord[];
        if (!flaws.noStoreBound && all.length >= maxTasks) {
          // Full: the oldest final task of the heaviest holder of final tasks keeping two more than the newcomer
          // (or of the newcomer) goes, else the store refuses.
          const held = new Map<string, TaskRecord[]>();
          for (const r of all) held.set(r.principal, [...(held.get(r.principal) ?? []), r]);
          const least = roomFromAtLeast(mine.length);
          const holders = [...held.entries()]
            .filter(
              ([who, rs]) =>
                rs.some((r) => isTerminalStatus(r.status)) && (flaws.dropsLightHolders || who === record.principal || rs.length >= least),
            )
            .map(([, rs]) => rs);
          if (flaws.refusesWhenFull || holders.length === 0) throw new TaskLimitError('store', maxTasks);
          const heaviest = holders.reduce((a, b) => (b.length > a.length ? b : a));
          const oldest = heaviest.filter((r) => isTerminalStatus(r.status)).sort((a, b) => a.lastUpdatedAt - b.lastUpdatedAt)[0]!;
          map.delete(oldest.taskId);
        }
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
    // 13, plus the two-more-than-the-newcomer rule (issue 41 item 5) and the unknown-option refusal (item 9).
    expect(passed.length).toBe(15);
  });

  it.each([
    ['a store whose bounds race (count, then insert)', { racyBounds: true }, ['24 concurrent creates', 'two instances']],
    ['a store that loses concurrent updates (read, then write)', { lostUpdates: true }, ['24 concurrent updates', 'two instances']],
    ['a store that never expires tasks', { noExpiry: true }, ['readable until lastUpdatedAt + ttlMs']],
    ['a store that shares objects with its callers', { sharesObjects: true }, ['answer copies']],
    ['a store that lets a change move a task', { noChangeCheck: true }, ['may not move a task']],
    ['a store without the kept bound', { noKeptBound: true }, ['per-principal bounds']],
    ['a store without a store-wide bound', { noStoreBound: true }, ['a full store makes room']],
    ['a store that refuses when full instead of making room', { refusesWhenFull: true }, ['a full store makes room']],
    ["a store that drops a light holder's final task when full", { dropsLightHolders: true }, ['two more tasks than the newcomer']],
    ['a store that ignores an unknown option', { laxOptions: true }, ['refuses an unknown option']],
  ] as const)('fails %s', async (_label, flaws, mustFail) => {
    const { failed } = await run(flaws);
    for (const name of mustFail)
      expect(
        failed.some((f) => f.includes(name)),
        `${name} in ${JSON.stringify(failed)}`,
      ).toBe(true);
  });
});

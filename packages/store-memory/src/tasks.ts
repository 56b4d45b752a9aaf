/**
 * The task store of the tasks extension (`TaskStore` of `@mrtr/core`) in this process's memory: the store
 * `@mrtr/mcp-server`'s `tasks` option takes for one instance (stdio, a single server) and tests.
 */
import { TaskLimitError } from '@mrtr/core/errors';
import { optionsObject } from '@mrtr/core/options';
import {
  assertTaskChange,
  isTerminalStatus,
  parseTaskStoreLimits,
  roomFromAtLeast,
  TASK_STORE_LIMIT_OPTIONS,
  taskExpiresAt,
  type TaskRecord,
  type TaskStore,
  type TaskStoreLimits,
} from '@mrtr/core/tasks';

/** Options of {@link createMemoryTaskStore}: the bounds (16 unfinished and 256 kept per principal, 10,000 in all) and these. */
export interface MemoryTaskStoreOptions extends TaskStoreLimits {
  /** Clock in ms (tests). @default Date.now */
  now?: (() => number) | undefined;
}

const clone = <T>(value: T): T => structuredClone(value);

/** One principal's tasks: unfinished ones counted, final ones in the order they became final (oldest first). */
interface Holder {
  live: number;
  kept: number;
  finals: Set<string>;
}

/**
 * A task store in this process's memory: tasks end with the process, and every instance has its own. For one
 * instance (stdio, a single server) and tests; a fleet needs a shared store (Redis, SQL).
 *
 * Every operation is O(1) amortized: tasks are kept in the order of their last update (an update moves a task to
 * the end), so expired ones are dropped from the front, and each principal's live and kept counts are tallied. A
 * full store (`maxTasks`) drops the oldest final task of its heaviest holder (see `TaskStoreLimits.maxTasks`),
 * found in O(principals).
 */
export function createMemoryTaskStore(options?: MemoryTaskStoreOptions): TaskStore {
  options = optionsObject('createMemoryTaskStore', options, { ...TASK_STORE_LIMIT_OPTIONS, now: true });
  const {
    maxLivePerPrincipal: maxLive,
    maxPerPrincipal: maxKept,
    maxTasks,
  } = parseTaskStoreLimits('createMemoryTaskStore', options, 10_000);
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createMemoryTaskStore: now must be a function');
  /** Tasks by id, in the order of their last update. */
  const tasks = new Map<string, TaskRecord>();
  const holders = new Map<string, Holder>();
  const expired = (record: TaskRecord, t: number): boolean => t >= taskExpiresAt(record);
  const holderOf = (principal: string): Holder => {
    let holder = holders.get(principal);
    if (holder === undefined) holders.set(principal, (holder = { live: 0, kept: 0, finals: new Set() }));
    return holder;
  };
  const add = (record: TaskRecord): void => {
    const holder = holderOf(record.principal);
    holder.kept++;
    if (isTerminalStatus(record.status)) holder.finals.add(record.taskId);
    else holder.live++;
  };
  const drop = (id: string, record: TaskRecord): void => {
    tasks.delete(id);
    const holder = holders.get(record.principal)!;
    holder.kept--;
    if (isTerminalStatus(record.status)) holder.finals.delete(id);
    else holder.live--;
    if (holder.kept === 0) holders.delete(record.principal);
  };
  /** Drops expired tasks from the front; stops at the first live one (a task with a longer ttl may wait behind it). */
  const sweep = (): void => {
    const t = now();
    for (const [id, record] of tasks) {
      if (!expired(record, t)) break;
      drop(id, record);
    }
  };
  /**
   * Full: drops the oldest final task of the principal holding the most tasks among those holding a final one and
   * keeping at least `roomFromAtLeast` of the newcomer's count, else the newcomer's own oldest final task.
   */
  const makeRoom = (newcomer: Holder | undefined): boolean => {
    let heaviest: Holder | undefined;
    for (const holder of holders.values()) {
      if (holder.finals.size > 0 && (heaviest === undefined || holder.kept > heaviest.kept)) heaviest = holder;
    }
    if (heaviest !== undefined && heaviest !== newcomer && heaviest.kept < roomFromAtLeast(newcomer?.kept ?? 0)) heaviest = newcomer;
    if (heaviest === undefined || heaviest.finals.size === 0) return false;
    const id = heaviest.finals.values().next().value!;
    drop(id, tasks.get(id)!);
    return true;
  };
  const live = (id: string): TaskRecord | undefined => {
    const record = tasks.get(id);
    if (record === undefined) return undefined;
    if (expired(record, now())) {
      drop(id, record);
      return undefined;
    }
    return record;
  };
  return {
    async create(record) {
      sweep();
      const holder = holders.get(record.principal);
      const c = holder ?? { live: 0, kept: 0 };
      if (!isTerminalStatus(record.status) && c.live >= maxLive) throw new TaskLimitError('live', maxLive);
      if (c.kept >= maxKept) throw new TaskLimitError('kept', maxKept);
      if (tasks.has(record.taskId)) throw new Error('task id collision');
      if (tasks.size >= maxTasks && !makeRoom(holder)) throw new TaskLimitError('store', maxTasks);
      tasks.set(record.taskId, clone(record));
      add(record);
    },
    async get(taskId) {
      const record = live(taskId);
      return record === undefined ? undefined : clone(record);
    },
    async update(taskId, change) {
      const record = live(taskId);
      if (record === undefined) return undefined;
      const next = change(clone(record));
      if (next === undefined) return clone(record);
      assertTaskChange('createMemoryTaskStore: update', record, next);
      // Re-inserted at the end: the map stays in the order of the last update.
      tasks.delete(taskId);
      tasks.set(taskId, clone(next));
      if (!isTerminalStatus(record.status) && isTerminalStatus(next.status)) {
        const holder = holders.get(record.principal)!;
        holder.live--;
        holder.finals.add(taskId);
      }
      return clone(next);
    },
  };
}

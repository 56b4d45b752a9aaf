import { StoreUnavailableError, TaskLimitError } from '@mrtr/core/errors';
import { fnOption, intOption, optionsObject, stringOption } from '@mrtr/core/options';
import { ownerValues } from '@mrtr/core/store';
import {
  assertTaskUpdateArguments,
  asTaskRecord,
  isTerminalStatus,
  parseTaskStoreLimits,
  runTaskUpdate,
  TASK_STORE_LIMIT_OPTIONS,
  taskExpiresAt,
  type TaskRecord,
  type TaskStore,
  type TaskStoreLimits,
} from '@mrtr/core/tasks';
import type { DurableObjectNamespaceLike } from './binding.js';
import { fail, ObjectRefused, type Objects, objectsOf } from './client.js';

/** Options of {@link createDurableObjectTaskStore}: the bounds (16 unfinished and 256 kept per principal, 100,000 in all) and these. */
export interface DurableObjectTaskStoreOptions extends TaskStoreLimits {
  /** The Durable Object namespace binding of {@link MrtrStoreObject} (`env.MRTR_STORE`). */
  objects: DurableObjectNamespaceLike;
  /** Keeps these tasks apart from every other task store on the same binding. @default '' */
  namespace?: string | undefined;
  /**
   * How many objects the tasks are spread over (by a hash of the task id). With one, every bound holds for the whole
   * store, atomically. With more, each object applies the bounds to the tasks it holds: a principal may then hold up to
   * `shards` times its bounds, and `maxTasks` is split between the objects (each keeps `maxTasks / shards`).
   * @default 1
   */
  shards?: number | undefined;
  /** Largest task record kept, in characters of JSON; a larger create or update fails with `ERR_STORE_UNAVAILABLE`. @default 1_048_576 */
  maxRecordChars?: number | undefined;
  /** Most compare-and-set attempts of one `update` under contention. @default 64 */
  maxUpdateAttempts?: number | undefined;
  /** Most time one call to an object may take, in ms. @default 5_000 */
  timeoutMs?: number | undefined;
  /** The clock (ms since the epoch) the objects judge expiry by, sent with every call (for tests). @default Date.now */
  now?: (() => number) | undefined;
}

const LABEL = 'createDurableObjectTaskStore';

/** The record and its version, or `undefined` (unknown or expired). A corrupt record fails closed. */
async function readTask(objects: Objects, now: () => number, taskId: string): Promise<{ record: TaskRecord; version: string } | undefined> {
  let answer: Record<string, unknown>;
  try {
    answer = await objects.call(taskId, { op: 'tget', taskId, t: now() });
  } catch (error) {
    return fail(error);
  }
  if (answer.found !== true) return undefined;
  if (typeof answer.body !== 'string' || typeof answer.version !== 'string') return fail(new Error('unexpected answer to get'));
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body);
  } catch (cause) {
    return fail(cause);
  }
  const record = asTaskRecord(parsed);
  if (record === undefined || record.taskId !== taskId) return fail(new Error('the stored task is not a task record'));
  return { record, version: answer.version };
}

/** After a lost reply to a write: whether the task now holds `version` (this call's write landed); else fail closed. */
async function landedWrite(objects: Objects, now: () => number, taskId: string, version: string, original: unknown): Promise<void> {
  let held: { version: string } | undefined;
  try {
    held = await readTask(objects, now, taskId);
  } catch {
    return fail(original);
  }
  if (held?.version !== version) fail(original);
}

/**
 * A {@link TaskStore} on Cloudflare Durable Objects. `create` counts and inserts in one SQLite transaction of the
 * object holding the task (per-principal bounds, `maxTasks` making room from the heaviest holder's final tasks);
 * `update` is optimistic: it reads the record and its version, runs `change`, and writes only if the version is
 * unchanged (else reads again, at most `maxUpdateAttempts` times). A lost reply to a write is settled by reading
 * the task's version back (this call's → done; else `ERR_STORE_UNAVAILABLE`).
 */
export function createDurableObjectTaskStore(options: DurableObjectTaskStoreOptions): TaskStore {
  options = optionsObject(LABEL, options, {
    ...TASK_STORE_LIMIT_OPTIONS,
    objects: true,
    namespace: true,
    shards: true,
    maxRecordChars: true,
    maxUpdateAttempts: true,
    timeoutMs: true,
    now: true,
  });
  if (options.objects === undefined) throw new TypeError(`${LABEL}: objects (the Durable Object namespace binding) is required`);
  const limits = parseTaskStoreLimits(LABEL, options, 100_000);
  const namespace = stringOption(`${LABEL}: namespace`, options.namespace, '');
  const shards = intOption(`${LABEL}: shards`, options.shards, 1, 1, 1024);
  if (limits.maxTasks < shards) throw new RangeError(`${LABEL}: maxTasks must be at least shards`);
  const maxRecordChars = intOption(`${LABEL}: maxRecordChars`, options.maxRecordChars, 1_048_576, 1024, 2_000_000);
  const maxUpdateAttempts = intOption(`${LABEL}: maxUpdateAttempts`, options.maxUpdateAttempts, 64, 1, 10_000);
  const timeoutMs = intOption(`${LABEL}: timeoutMs`, options.timeoutMs, 5_000, 1, 600_000);
  const now = fnOption(`${LABEL}: now`, options.now, Date.now);
  const objects: Objects = objectsOf(LABEL, options.objects, 'tasks', namespace, shards, timeoutMs);
  const maxTasksPerObject = Math.floor(limits.maxTasks / shards);
  let closed = false;

  const open = (): void => {
    if (closed) throw new StoreUnavailableError();
  };
  const serialize = (record: TaskRecord): string => {
    const body = JSON.stringify(record);
    if (body.length > maxRecordChars) fail(new Error(`a task record of ${body.length} characters is over maxRecordChars`));
    return body;
  };
  const expiryOf = (record: TaskRecord): number => {
    const at = taskExpiresAt(record);
    if (!Number.isSafeInteger(at)) throw new TypeError(`${LABEL}: lastUpdatedAt + ttlMs must be a safe integer`);
    return at;
  };

  const read = (taskId: string) => readTask(objects, now, taskId);
  const landed = (taskId: string, version: string, original: unknown) => landedWrite(objects, now, taskId, version, original);

  const create = async (record: TaskRecord): Promise<void> => {
    if (asTaskRecord(record) === undefined) throw new TypeError(`${LABEL}: create: record must be a task record`);
    if (record.taskId.length === 0 || record.taskId.length > 256) throw new TypeError(`${LABEL}: create: taskId must be 1-256 characters`);
    open();
    const expires = expiryOf(record);
    const body = serialize(record);
    const [version] = ownerValues(1) as [string];
    let answer: Record<string, unknown>;
    try {
      answer = await objects.call(record.taskId, {
        op: 'tcreate',
        taskId: record.taskId,
        principal: record.principal,
        final: isTerminalStatus(record.status),
        expires,
        t: now(),
        version,
        body,
        maxLive: limits.maxLivePerPrincipal,
        maxKept: limits.maxPerPrincipal,
        maxTasks: maxTasksPerObject,
      });
    } catch (error) {
      if (error instanceof ObjectRefused) return fail(error);
      return landed(record.taskId, version, error);
    }
    if (answer.created === true) return;
    switch (answer.error) {
      case 'exists':
        throw new Error(`${LABEL}: create: a task with this id already exists`);
      case 'live':
      case 'kept':
      case 'store':
        throw new TaskLimitError(answer.error, typeof answer.max === 'number' ? answer.max : 0);
    }
    return fail(new Error('unexpected answer to create'));
  };

  const get = async (taskId: string): Promise<TaskRecord | undefined> => {
    if (typeof taskId !== 'string') throw new TypeError(`${LABEL}: get: taskId must be a string`);
    open();
    if (taskId.length === 0) return undefined;
    return (await read(taskId))?.record;
  };

  const update = async (taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined> => {
    assertTaskUpdateArguments(LABEL, taskId, change);
    open();
    if (taskId.length === 0) return undefined;
    return runTaskUpdate(LABEL, taskId, change, maxUpdateAttempts, {
      read: () => read(taskId),
      write: async (current, next) => {
        const body = serialize(next);
        const [version] = ownerValues(1) as [string];
        let answer: Record<string, unknown>;
        try {
          answer = await objects.call(taskId, {
            op: 'tput',
            taskId,
            version: current.version,
            next: version,
            body,
            final: isTerminalStatus(next.status),
            expires: expiryOf(next),
            t: now(),
          });
        } catch (error) {
          if (error instanceof ObjectRefused) return fail(error);
          await landed(taskId, version, error);
          return JSON.parse(body) as TaskRecord;
        }
        if (answer.put === 'ok') return JSON.parse(body) as TaskRecord;
        if (answer.put === 'gone') return undefined;
        if (answer.put !== 'conflict') return fail(new Error('unexpected answer to update'));
        return 'conflict';
      },
    });
  };

  return {
    create,
    get,
    update,
    async close(): Promise<void> {
      closed = true;
    },
  };
}

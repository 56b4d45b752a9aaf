import { StoreUnavailableError } from '@mrtr/core/errors';
import { boolOption, fnOption, intOption, type OptionNames } from '@mrtr/core/options';
import {
  assertTaskChange,
  asTaskRecord,
  isTerminalStatus,
  parseTaskStoreLimits,
  TASK_STORE_LIMIT_OPTIONS,
  taskExpiresAt,
  type TaskRecord,
  type TaskStore,
  type TaskStoreLimits,
} from '@mrtr/core/tasks';
import { checkNamespace, LONE_SURROGATE } from './arguments.js';
import { quoteIdentifier } from './options.js';

/** Options shared by both dialects' task stores. */
export interface SqlTaskStoreCommonOptions extends TaskStoreLimits {
  /**
   * Table that holds the tasks. Letters, digits and `_`, starting with a letter or `_`, at most 48 characters;
   * it is always quoted. @default "mrtr_tasks"
   */
  table?: string;
  /**
   * Task namespace: stores with different namespaces never see each other's tasks, even in one table. Any
   * string up to 256 UTF-8 bytes. @default ""
   */
  namespace?: string;
  /**
   * Run `ensureSchema()` automatically before the first operation (once; retried after a failure). Turn it off
   * when the schema is managed by a migration tool and the role cannot create tables. @default true
   */
  ensureSchema?: boolean;
  /** Clock in epoch ms by which the store judges whether a task has expired. @default Date.now */
  now?: () => number;
  /**
   * Largest record (its JSON) the store writes, in UTF-8 bytes; a larger one is refused with a `RangeError`
   * and nothing is written. @default 8388608 (8 MiB)
   */
  maxRecordBytes?: number;
  /**
   * Most expired tasks of other principals one `create` deletes besides the creating principal's own (which it
   * always deletes), so the table does not grow without bound. `0` turns it off. @default 100
   */
  purgeBatchSize?: number;
}

/** A task store on a SQL table. */
export interface SqlTaskStore extends TaskStore {
  /** `'postgres'` or `'sqlite'`. */
  readonly dialect: 'postgres' | 'sqlite';
  /** The quoted, possibly schema-qualified table name used in statements. */
  readonly table: string;
  /** Creates the table and its indexes when missing. Idempotent and safe to run concurrently. */
  ensureSchema(): Promise<void>;
  /** Closes a pool/database the store created itself (not an injected one). Idempotent. */
  close(): Promise<void>;
}

/** The names of {@link SqlTaskStoreCommonOptions}, for a task store's list of known options. */
export const SQL_TASK_STORE_OPTIONS: OptionNames<SqlTaskStoreCommonOptions> = {
  ...TASK_STORE_LIMIT_OPTIONS,
  table: true,
  namespace: true,
  ensureSchema: true,
  now: true,
  maxRecordBytes: true,
  purgeBatchSize: true,
};

export const DEFAULT_TASK_TABLE = 'mrtr_tasks';
/** Tries of one `update` whose conditional write found the record changed meanwhile. */
export const UPDATE_TRIES = 32;
const MAX_TASK_ID_LENGTH = 256;

export interface TaskSettings {
  table: string;
  tableName: string;
  namespace: string;
  autoSchema: boolean;
  now: () => number;
  maxLive: number;
  maxKept: number;
  maxRecordBytes: number;
  purgeBatchSize: number;
}

/** Parses the options both dialects share. */
export function taskSettings(label: string, options: SqlTaskStoreCommonOptions): Omit<TaskSettings, 'table'> & { maxTasks: number } {
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept, maxTasks } = parseTaskStoreLimits(label, options);
  const tableName = options.table ?? DEFAULT_TASK_TABLE;
  quoteIdentifier(`${label}: table`, tableName);
  return {
    tableName,
    namespace: checkNamespace(label, options.namespace),
    autoSchema: boolOption(`${label}: ensureSchema`, options.ensureSchema, true),
    now: fnOption(`${label}: now`, options.now, Date.now),
    maxLive,
    maxKept,
    maxTasks,
    maxRecordBytes: intOption(`${label}: maxRecordBytes`, options.maxRecordBytes, 8_388_608, 1024, 268_435_456),
    purgeBatchSize: intOption(`${label}: purgeBatchSize`, options.purgeBatchSize, 100, 0, 10_000),
  };
}

/** Text a SQL key column holds unchanged: no NUL (PostgreSQL's `text` cannot hold it), no lone surrogate (UTF-8 would replace it). */
const storableKey = (value: string): boolean => !value.includes('\u0000') && !LONE_SURROGATE.test(value);

/** Whether `taskId` can name a stored task (else `get`/`update` answer `undefined` without asking the database). */
export const isTaskId = (taskId: unknown): taskId is string =>
  typeof taskId === 'string' && taskId.length >= 1 && taskId.length <= MAX_TASK_ID_LENGTH && storableKey(taskId);

/** What `create` writes: the checked record's key columns and its JSON. Misuse is a `TypeError`/`RangeError`. */
export interface TaskRow {
  taskId: string;
  principal: string;
  live: boolean;
  expiresAt: number;
  json: string;
}

export function toTaskRow(label: string, record: TaskRecord, maxRecordBytes: number): TaskRow {
  if (asTaskRecord(record) === undefined) throw new TypeError(`${label}: not a task record`);
  if (!isTaskId(record.taskId)) {
    throw new TypeError(`${label}: taskId must be 1–${MAX_TASK_ID_LENGTH} characters of well-formed Unicode without NUL`);
  }
  if (record.principal.length === 0 || !storableKey(record.principal)) {
    throw new TypeError(`${label}: principal must be non-empty well-formed Unicode without NUL`);
  }
  const expiresAt = taskExpiresAt(record);
  if (!Number.isSafeInteger(expiresAt)) throw new RangeError(`${label}: lastUpdatedAt + ttlMs is out of range`);
  const json = JSON.stringify(record);
  // Between 1 and 3 UTF-8 bytes per UTF-16 code unit (JSON escapes lone surrogates): count only when in doubt.
  if (json.length > maxRecordBytes || (json.length * 3 > maxRecordBytes && Buffer.byteLength(json, 'utf8') > maxRecordBytes)) {
    throw new RangeError(`${label}: the task record is larger than maxRecordBytes (${maxRecordBytes} UTF-8 bytes)`);
  }
  return { taskId: record.taskId, principal: record.principal, live: !isTerminalStatus(record.status), expiresAt, json };
}

/**
 * Parses a record read back from the table: it must be a task record with the id asked for and the principal
 * of its row. Anything else (a corrupted or foreign row) fails closed with `ERR_STORE_UNAVAILABLE`, never
 * reaching the runtime and never reported as an unknown task.
 */
export function fromTaskRow(taskId: string, principal: unknown, json: unknown): TaskRecord {
  let parsed: unknown;
  try {
    parsed = typeof json === 'string' ? JSON.parse(json) : undefined;
  } catch {
    parsed = undefined;
  }
  const record = asTaskRecord(parsed);
  if (record === undefined || record.taskId !== taskId || record.principal !== principal) {
    throw new StoreUnavailableError({ cause: new Error(`task store: the stored record of task ${JSON.stringify(taskId)} is corrupt`) });
  }
  return record;
}

export const taskIdExistsError = (): Error => new Error('task store: a task with this id already exists');

export const unsettledUpdateError = (): StoreUnavailableError =>
  new StoreUnavailableError({ cause: new Error(`task store: the record changed under ${UPDATE_TRIES} updates in a row; not updated`) });

export const closedTaskStoreError = (): StoreUnavailableError => new StoreUnavailableError({ cause: new Error('task store is closed') });

/** A task read back with the version of its row (the condition of an optimistic update). */
export interface VersionedTask {
  record: TaskRecord;
  version: string | number;
}

/** What a dialect's task store does on its database; {@link sqlTaskStore} answers `create`, `get` and `update` with it. */
export interface TaskBackend {
  dialect: 'postgres' | 'sqlite';
  table: string;
  /** Runs one operation and maps its failures: a database failure to `ERR_STORE_UNAVAILABLE`, a refusal as it is. */
  run<T>(work: () => Promise<T>): Promise<T>;
  /** Writes a new task under the bounds (a refusal: TaskLimitError, a duplicate id). */
  insert(row: TaskRow): Promise<void>;
  read(taskId: string): Promise<VersionedTask | undefined>;
  /** The conditional write of an update: `false` when the row changed since `current` was read. */
  write(taskId: string, current: VersionedTask, row: TaskRow, next: TaskRecord): Promise<boolean>;
  /** An error of `change` (or of the record it made) as `run` passes it on unchanged. */
  refuse(error: unknown): unknown;
  assertOpen(): void;
  ensureSchema(): Promise<void>;
  close(): Promise<void>;
}

/**
 * A task store on a backend: `create` checks the record and inserts it; `get` reads a live task; `update` is
 * optimistic (re-read, change a copy, check the change, write on the version read; re-run on a conflict, at most
 * {@link UPDATE_TRIES} tries).
 */
export function sqlTaskStore(label: string, maxRecordBytes: number, backend: TaskBackend): SqlTaskStore {
  const tryUpdate = async (
    taskId: string,
    change: (record: TaskRecord) => TaskRecord | undefined,
  ): Promise<{ done: boolean; value?: TaskRecord }> => {
    const current = await backend.read(taskId);
    if (current === undefined) return { done: true };
    let next: TaskRecord | undefined;
    let row: TaskRow;
    try {
      next = change(structuredClone(current.record));
      if (next === undefined) return { done: true, value: current.record };
      assertTaskChange(`${label}: update`, current.record, next);
      row = toTaskRow(`${label}: update`, next, maxRecordBytes);
    } catch (error) {
      throw backend.refuse(error);
    }
    if (!(await backend.write(taskId, current, row, next))) return { done: false };
    return { done: true, value: JSON.parse(row.json) as TaskRecord };
  };
  return {
    dialect: backend.dialect,
    table: backend.table,
    async create(record) {
      const row = toTaskRow(`${label}: create`, record, maxRecordBytes);
      await backend.run(() => backend.insert(row));
    },
    async get(taskId) {
      if (!isTaskId(taskId)) return undefined;
      return backend.run(async () => (await backend.read(taskId))?.record);
    },
    async update(taskId, change) {
      if (typeof change !== 'function') throw new TypeError(`${label}: update: change must be a function`);
      if (!isTaskId(taskId)) return undefined;
      return backend.run(async () => {
        for (let attempt = 0; attempt < UPDATE_TRIES; attempt++) {
          backend.assertOpen();
          const { done, value } = await tryUpdate(taskId, change);
          if (done) return value;
        }
        throw unsettledUpdateError();
      });
    },
    ensureSchema: () => backend.ensureSchema(),
    close: () => backend.close(),
  };
}

/**
 * For task-store authors: the optimistic `update` every shared task store runs (read the task, run `change` on a copy,
 * write it only if nobody changed it meanwhile, else read again) and its one option.
 */
import { StoreUnavailableError } from '../errors.js';
import { asTaskRecord, assertTaskChange, type TaskRecord, taskExpiresAt } from './tasks.js';
import { intOption, type OptionNames } from '../util/validate.js';

/** The option of a task store whose `update` is optimistic: how many rounds it tries under contention. */
export interface TaskUpdateOptions {
  /**
   * Most reads-and-writes one `update` tries when other instances change the task at the same moment (1–1000);
   * then it rejects `ERR_STORE_UNAVAILABLE`, the record as the others left it.
   * @default 32
   */
  maxUpdateAttempts?: number | undefined;
}

/** The names of {@link TaskUpdateOptions}, for a task store's list of known options (spread into it). */
export const TASK_UPDATE_OPTIONS: OptionNames<TaskUpdateOptions> = { maxUpdateAttempts: true };

/** For store authors: `maxUpdateAttempts` checked (an integer 1–1000, labelled `TypeError`/`RangeError`), default 32. */
export function parseTaskUpdateOptions(label: string, options: TaskUpdateOptions): { readonly maxUpdateAttempts: number } {
  return { maxUpdateAttempts: intOption(`${label}: maxUpdateAttempts`, options.maxUpdateAttempts, 32, 1, 1000) };
}

/** One round of {@link runTaskUpdate}: what the store reads and how it writes. */
export interface TaskUpdateSteps<C extends { readonly record: TaskRecord }> {
  /** The task as stored now (with whatever the write needs, e.g. its version); `undefined` when absent or expired. */
  read(): Promise<C | undefined>;
  /** The copy `change` gets. @default structuredClone of the record */
  copy?(current: C): TaskRecord;
  /** Writes `next` over `current`: the record written, `undefined` when the task is gone, `'conflict'` when it changed. */
  write(current: C, next: TaskRecord): Promise<TaskRecord | undefined | 'conflict'>;
  /** The rejection once every round met a conflict. @default ERR_STORE_UNAVAILABLE, "the task kept changing" as cause */
  exhausted?(attempts: number): Error;
}

/**
 * For store authors: `TaskStore.update` on optimistic writes. Checks the arguments (`TypeError`, labelled with `label`),
 * then up to `maxAttempts` rounds: read the task (absent → `undefined`), run `change` on a copy (`undefined` → the
 * record read, unchanged), check the change (`assertTaskChange`), write it; on a conflict read again, from the third
 * round on after a short random pause that spreads the contenders.
 */
export async function runTaskUpdate<C extends { readonly record: TaskRecord }>(
  label: string,
  taskId: unknown,
  change: unknown,
  maxAttempts: number,
  steps: TaskUpdateSteps<C>,
): Promise<TaskRecord | undefined> {
  assertTaskUpdateArguments(label, taskId, change);
  for (let attempt = 0; attempt < maxAttempts; attempt++) {
    const current = await steps.read();
    if (current === undefined) return undefined;
    const before = current.record;
    const next = change(steps.copy === undefined ? structuredClone(before) : steps.copy(current));
    if (next === undefined) return before;
    assertTaskChange(`${label}: update`, before, next);
    const written = await steps.write(current, next);
    if (written !== 'conflict') return written;
    if (attempt >= 2) await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(20, attempt * 2)));
  }
  throw (
    steps.exhausted?.(maxAttempts) ??
    new StoreUnavailableError({ cause: new Error(`update: the task kept changing during ${maxAttempts} attempts`) })
  );
}

/** For store authors: `update`'s arguments checked (`TypeError`, labelled with `label`). */
export function assertTaskUpdateArguments(
  label: string,
  taskId: unknown,
  change: unknown,
): asserts change is (record: TaskRecord) => TaskRecord | undefined {
  if (typeof taskId !== 'string') throw new TypeError(`${label}: update: taskId must be a string`);
  if (typeof change !== 'function') throw new TypeError(`${label}: update: change must be a function`);
}

/** Longest `taskId` {@link assertTaskCreateArguments} accepts, in UTF-16 code units. */
const MAX_TASK_ID_LENGTH = 256;

/**
 * For store authors: `create`'s record checked — a task record, a `taskId` of 1 to 256 characters, an expiry
 * (`lastUpdatedAt + ttlMs`) that is a safe integer (`TypeError`, labelled with `label`). Answers that expiry.
 */
export function assertTaskCreateArguments(label: string, record: unknown): number {
  if (asTaskRecord(record) === undefined) throw new TypeError(`${label}: create: record must be a task record`);
  const { taskId } = record as TaskRecord;
  if (taskId.length === 0 || taskId.length > MAX_TASK_ID_LENGTH) {
    throw new TypeError(`${label}: create: taskId must have 1 to ${MAX_TASK_ID_LENGTH} characters`);
  }
  const at = taskExpiresAt(record as TaskRecord);
  if (!Number.isSafeInteger(at)) throw new TypeError(`${label}: create: lastUpdatedAt + ttlMs must be a safe integer`);
  return at;
}

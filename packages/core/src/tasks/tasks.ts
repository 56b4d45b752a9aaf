/**
 * The task store contract (tasks extension, `io.modelcontextprotocol/tasks`, 2026-07-28): what a store keeps for
 * one task, and the promises every store makes. `@mrtr/mcp-server` runs the tasks and keeps them in memory;
 * `@mrtr/store-redis` and `@mrtr/store-sql` keep them in a shared backend; `@mrtr/test-suite`'s
 * `taskStoreCompliance` checks a store.
 */
import type { JsonValue } from '../protocol.js';
import { intOption, isObject, type OptionNames } from '../util/validate.js';

/** A task's status (SEP-2663). */
export type TaskStatus = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';

const TERMINAL: ReadonlySet<string> = new Set(['completed', 'failed', 'cancelled']);
const STATUSES: ReadonlySet<string> = new Set(['working', 'input_required', 'completed', 'failed', 'cancelled']);

/** Whether a status is final (`completed`, `failed`, `cancelled`): a final task never changes again. */
export const isTerminalStatus = (status: TaskStatus): boolean => TERMINAL.has(status);

/** An input request embedded in a task (`elicitation/create`, …), as `tasks/get` lists it. */
export interface TaskInputRequest {
  method: string;
  params?: Record<string, JsonValue>;
}

/** A JSON-RPC error a failed task carries. */
export interface TaskError {
  code: number;
  message: string;
  data?: JsonValue;
}

/** What a task store keeps for one task (JSON only; times in ms since the epoch). */
export interface TaskRecord {
  /** 1–256 characters, unique in the store. */
  taskId: string;
  /** The user principal that created it: every later request for it must come from the same one. Never changes. */
  principal: string;
  status: TaskStatus;
  createdAt: number;
  lastUpdatedAt: number;
  /** The task stays readable until `lastUpdatedAt + ttlMs`. */
  ttlMs: number;
  pollIntervalMs?: number;
  statusMessage?: string;
  /** The input requests still waiting for an answer, by key. */
  inputRequests: Record<string, TaskInputRequest>;
  /** Every key ever asked in this task (keys are unique for the task's life). */
  askedKeys: string[];
  /** Answers `tasks/update` accepted that the running work has not taken yet, by key. */
  answers?: Record<string, JsonValue>;
  /**
   * Until when (ms) the instance running the work vouches for it; it renews this while the work runs. A task
   * still unfinished after it has lost the process that ran it (a restart, a crash) and is reported failed.
   */
  leaseUntil?: number;
  /** The tool result (`completed`, also with `isError: true`). */
  result?: Record<string, JsonValue>;
  /** The JSON-RPC error (`failed`). */
  error?: TaskError;
}

/** When a record stops being readable. */
export const taskExpiresAt = (record: TaskRecord): number => record.lastUpdatedAt + record.ttlMs;

/**
 * Where tasks live. Every store keeps these promises (`taskStoreCompliance` checks them):
 * - `create` makes the task readable by `get` (on every instance sharing the backend) before it resolves, or
 *   rejects: `TaskLimitError` when the principal holds its most unfinished tasks or its most kept tasks, or the
 *   store is full and no final task may go (a full store first drops a final task of a holder heavier than the
 *   newcomer, or the newcomer's own: see {@link TaskStoreLimits.maxTasks}); any error for an id already present.
 *   The bounds hold under concurrent creates.
 * - `get` answers a copy of the record, or `undefined` for an unknown task and for one past
 *   `lastUpdatedAt + ttlMs`.
 * - `update` applies `change` to the current record atomically: concurrent updates of one task never lose one.
 *   `change` may run more than once (a store with optimistic concurrency re-runs it when the record changed
 *   meanwhile), so it must be pure. `undefined` from `change` leaves the record as it is. `update` answers the
 *   record after the change, or `undefined` (and never calls `change`) for an unknown or expired task. A change
 *   may not alter `taskId`, `principal` or `createdAt` (`TypeError`). The readable period restarts from the new
 *   `lastUpdatedAt`; a task that becomes final frees its principal's unfinished slot.
 */
export interface TaskStore {
  create(record: TaskRecord): Promise<void>;
  get(taskId: string): Promise<TaskRecord | undefined>;
  update(taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined>;
  /** Releases what the store opened itself (connections it owns). */
  close?(): Promise<void>;
}

/** The bounds every task store takes (each store documents its own defaults; these are the usual ones). */
export interface TaskStoreLimits {
  /** Most unfinished tasks of one principal; one more is refused with `TaskLimitError('live')`. @default 16 */
  maxLivePerPrincipal?: number | undefined;
  /**
   * Most tasks one principal may have kept at once, unfinished or final (a final task stays readable until its
   * `ttlMs` passes); one more is refused with `TaskLimitError('kept')`. @default 256
   */
  maxPerPrincipal?: number | undefined;
  /**
   * Most tasks kept in all, every principal together. When the store is full, `create` makes room by dropping the
   * oldest final task of the principal that holds the most tasks among those holding a final one and keeping at
   * least {@link roomFromAtLeast} (two more than the newcomer), or else the newcomer's own oldest final task;
   * otherwise it refuses, with `TaskLimitError('store')`. So no principal can take the store from the others: its
   * unfinished tasks are bounded by `maxLivePerPrincipal`, its final ones go first, and a light holder's finished
   * task stays readable until its `ttlMs` passes while heavier holders fill the store.
   * @default 10_000 in memory, 100_000 in a shared backend
   */
  maxTasks?: number | undefined;
}

/**
 * The fewest tasks another principal must keep for a full store to drop one of its final tasks for a newcomer that
 * keeps `newcomerKept`: two more, so the holder still keeps at least as many as the newcomer afterwards (equal
 * holders never take from each other, and a light holder's finished task is never taken for a heavier newcomer).
 * The newcomer may always give up its own oldest final task. Every store's `maxTasks` follows this rule.
 */
export const roomFromAtLeast = (newcomerKept: number): number => newcomerKept + 2;

/** The names of {@link TaskStoreLimits}, for a task store's list of known options (spread into it). */
export const TASK_STORE_LIMIT_OPTIONS: OptionNames<TaskStoreLimits> = { maxLivePerPrincipal: true, maxPerPrincipal: true, maxTasks: true };

/** The parsed {@link TaskStoreLimits}. */
export interface ParsedTaskStoreLimits {
  maxLivePerPrincipal: number;
  maxPerPrincipal: number;
  maxTasks: number;
}

/** Parses {@link TaskStoreLimits} (labelled `TypeError`/`RangeError` on misuse). */
export function parseTaskStoreLimits(label: string, options: TaskStoreLimits, defaultMaxTasks = 100_000): ParsedTaskStoreLimits {
  const maxLivePerPrincipal = intOption(`${label}: maxLivePerPrincipal`, options.maxLivePerPrincipal, 16, 1, 100_000);
  const maxPerPrincipal = intOption(`${label}: maxPerPrincipal`, options.maxPerPrincipal, 256, 1, 1_000_000);
  if (maxPerPrincipal < maxLivePerPrincipal) throw new RangeError(`${label}: maxPerPrincipal must be at least maxLivePerPrincipal`);
  const maxTasks = intOption(`${label}: maxTasks`, options.maxTasks, defaultMaxTasks, 1, 100_000_000);
  return { maxLivePerPrincipal, maxPerPrincipal, maxTasks };
}

const isTime = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * Checks that a value read back from a backend is a task record (a store parses JSON it did not write in this
 * process: a corrupted or foreign value must not reach the runtime). Returns it, or `undefined` when it is not.
 */
export function asTaskRecord(value: unknown): TaskRecord | undefined {
  if (!isObject(value)) return undefined;
  const r = value;
  if (typeof r.taskId !== 'string' || typeof r.principal !== 'string' || typeof r.status !== 'string' || !STATUSES.has(r.status))
    return undefined;
  if (!isTime(r.createdAt) || !isTime(r.lastUpdatedAt) || !isTime(r.ttlMs)) return undefined;
  if (!isObject(r.inputRequests) || !Array.isArray(r.askedKeys)) return undefined;
  return value as unknown as TaskRecord;
}

/**
 * Checks a change made by `TaskStore.update`'s `change` against the record it was given (for store authors:
 * call it on every change). Throws a labelled `TypeError` when the change moves the task to another id or
 * principal, rewrites `createdAt`, or brings a final task back.
 */
export function assertTaskChange(label: string, before: TaskRecord, after: TaskRecord): void {
  if (asTaskRecord(after) === undefined) throw new TypeError(`${label}: a change must return a task record`);
  if (after.taskId !== before.taskId || after.principal !== before.principal || after.createdAt !== before.createdAt) {
    throw new TypeError(`${label}: a change may not alter taskId, principal or createdAt`);
  }
  if (isTerminalStatus(before.status) && after.status !== before.status) {
    throw new TypeError(`${label}: a final task (${before.status}) cannot change its status`);
  }
}

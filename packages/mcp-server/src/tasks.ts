/**
 * The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, 2026-07-28) on the server side, combined with
 * protected MRTR: a `tools/call` may run ordinary sealed `input_required` rounds first and then become a task;
 * input during the task flows through `tasks/get` (outstanding `inputRequests`) and `tasks/update`.
 *
 * Every task is bound to the user principal that created it (the principal function of `createMrtr`), its id
 * carries 128 random bits, and the number of live tasks per principal is bounded by the task store.
 */
import {
  CLIENT_CAPABILITIES_META_KEY,
  type CallToolResult,
  type ClientCapabilities,
  type McpServer,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  type ServerContext,
} from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import { base64urlEncode } from '@mrtr/core/authoring';
import { type FormContent, type FormSchema, validateFormAnswer } from './answers.js';
import type { ElicitAnswer, ElicitFormQuestion } from './types.js';
import { PRINCIPAL_REQUIRED_MESSAGE, WireError } from './wire.js';

/** The extension id, under `capabilities.extensions` (server) and the request's client capabilities. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

const INVALID_REQUEST = -32600;
const INVALID_PARAMS = -32602;
const INTERNAL_ERROR = -32603;

/** A task's status (SEP-2663). */
export type TaskStatus = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';
const TERMINAL: ReadonlySet<TaskStatus> = new Set(['completed', 'failed', 'cancelled']);
/** Whether a status is final (`completed`, `failed`, `cancelled`). */
export const isTerminalStatus = (status: TaskStatus): boolean => TERMINAL.has(status);

/** An input request embedded in a task (`elicitation/create`, …), as `tasks/get` lists it. */
export interface TaskInputRequest {
  method: string;
  params?: Record<string, unknown>;
}

/** A JSON-RPC error a failed task carries. */
export interface TaskError {
  code: number;
  message: string;
  data?: JsonValue;
}

/** What a task store keeps for one task (JSON only; times in ms since the epoch). */
export interface TaskRecord {
  taskId: string;
  /** The user principal that created it: every later request for it must come from the same one. */
  principal: string;
  status: TaskStatus;
  createdAt: number;
  lastUpdatedAt: number;
  ttlMs: number;
  pollIntervalMs?: number;
  statusMessage?: string;
  /** The input requests still waiting for an answer, by key. */
  inputRequests: Record<string, TaskInputRequest>;
  /** Every key ever asked in this task (keys are unique for the task's life). */
  askedKeys: string[];
  /** The tool result (`completed`, also with `isError: true`). */
  result?: Record<string, JsonValue>;
  /** The JSON-RPC error (`failed`). */
  error?: TaskError;
}

/** Thrown by {@link TaskStore.create} when the principal already holds its most live tasks. */
export class TaskLimitError extends Error {
  constructor(message = 'Too many tasks for this user') {
    super(message);
    this.name = 'TaskLimitError';
  }
}

/**
 * Where tasks live. `create` must make the task readable by `get` before it resolves (the `CreateTaskResult` is
 * sent only then); `get` answers `undefined` for an unknown task or one past its `ttlMs`; `update` applies `change`
 * atomically to the current record (returning `undefined` from `change` leaves it as it is) and answers the
 * record after the change (`undefined` if there is none).
 */
export interface TaskStore {
  create(record: TaskRecord): Promise<void>;
  get(taskId: string): Promise<TaskRecord | undefined>;
  update(taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined>;
}

/** Options of {@link createMemoryTaskStore}. */
export interface MemoryTaskStoreOptions {
  /** Most live (not finished) tasks of one principal; one more is refused with `-32600`. @default 16 */
  maxLivePerPrincipal?: number | undefined;
  /**
   * Most tasks one principal may have kept at once, live or finished (a finished task stays readable until its
   * `ttlMs` passes); one more is refused with `-32600`. No principal can fill the store that others share.
   * @default 256
   */
  maxPerPrincipal?: number | undefined;
  /** Most tasks kept in all, live or finished. @default 10_000 */
  maxTasks?: number | undefined;
  /** Clock in ms (tests). @default Date.now */
  now?: (() => number) | undefined;
}

function boundedInt(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new TypeError(`${name} must be an integer`);
  if (value < min || value > max) throw new RangeError(`${name} must be between ${min} and ${max}`);
  return value;
}

const clone = <T>(value: T): T => structuredClone(value);

/**
 * A task store in this process's memory: tasks end with the process, and every instance has its own. For one
 * instance (stdio, a single server) and tests; a fleet needs a shared store (not in this release).
 *
 * Every operation is O(1) amortized: tasks are kept in the order of their last update (an update moves a task to
 * the end), so expired ones are dropped from the front, and each principal's live and kept counts are tallied.
 */
export function createMemoryTaskStore(options: MemoryTaskStoreOptions = {}): TaskStore {
  if (options === null || typeof options !== 'object') throw new TypeError('createMemoryTaskStore: options must be an object');
  const maxLive = boundedInt('createMemoryTaskStore: maxLivePerPrincipal', options.maxLivePerPrincipal, 16, 1, 100_000);
  const maxKept = boundedInt('createMemoryTaskStore: maxPerPrincipal', options.maxPerPrincipal, 256, 1, 1_000_000);
  if (maxKept < maxLive) throw new RangeError('createMemoryTaskStore: maxPerPrincipal must be at least maxLivePerPrincipal');
  const maxTasks = boundedInt('createMemoryTaskStore: maxTasks', options.maxTasks, 10_000, 1, 10_000_000);
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createMemoryTaskStore: now must be a function');
  /** Tasks by id, in the order of their last update. */
  const tasks = new Map<string, TaskRecord>();
  const counts = new Map<string, { live: number; kept: number }>();
  const expired = (record: TaskRecord, t: number): boolean => t >= record.lastUpdatedAt + record.ttlMs;
  const tally = (principal: string, live: number, kept: number): void => {
    const c = counts.get(principal) ?? { live: 0, kept: 0 };
    c.live += live;
    c.kept += kept;
    if (c.kept === 0) counts.delete(principal);
    else counts.set(principal, c);
  };
  const drop = (id: string, record: TaskRecord): void => {
    tasks.delete(id);
    tally(record.principal, isTerminalStatus(record.status) ? 0 : -1, -1);
  };
  /** Drops expired tasks from the front; stops at the first live one (a task with a longer ttl may wait behind it). */
  const sweep = (): void => {
    const t = now();
    for (const [id, record] of tasks) {
      if (!expired(record, t)) break;
      drop(id, record);
    }
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
      const c = counts.get(record.principal) ?? { live: 0, kept: 0 };
      if (c.live >= maxLive) throw new TaskLimitError(`Too many tasks in progress for this user (at most ${maxLive}); wait for one to finish or cancel one`);
      if (c.kept >= maxKept) throw new TaskLimitError(`Too many tasks kept for this user (at most ${maxKept}); finished ones are kept until their ttlMs passes`);
      if (tasks.size >= maxTasks) throw new TaskLimitError('Too many tasks on this server; try again later');
      if (tasks.has(record.taskId)) throw new Error('task id collision');
      tasks.set(record.taskId, clone(record));
      tally(record.principal, isTerminalStatus(record.status) ? 0 : 1, 1);
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
      if (next.principal !== record.principal || next.taskId !== record.taskId) throw new TypeError('TaskStore.update: a change may not move a task');
      // Re-inserted at the end: the map stays in the order of the last update.
      tasks.delete(taskId);
      tasks.set(taskId, clone(next));
      const wasLive = !isTerminalStatus(record.status);
      const isLive = !isTerminalStatus(next.status);
      if (wasLive !== isLive) tally(record.principal, isLive ? 1 : -1, 0);
      return clone(next);
    },
  };
}

/** Options of the tasks support (`tasks` of `createMrtr`). */
export interface TaskOptions {
  /** Where tasks live, e.g. {@link createMemoryTaskStore}. */
  store: TaskStore;
  /** How long a task stays readable after its last change, in ms (the wire `ttlMs`). @default 3_600_000 */
  ttlMs?: number | undefined;
  /** The poll interval suggested to clients, in ms (the wire `pollIntervalMs`). @default 1_000 */
  pollIntervalMs?: number | undefined;
  /** Clock in ms (tests). @default Date.now */
  now?: (() => number) | undefined;
}

/** Per-task options of `need.task`. */
export interface TaskStartOptions {
  /** Overrides {@link TaskOptions.ttlMs} for this task. */
  ttlMs?: number;
  /** Overrides {@link TaskOptions.pollIntervalMs} for this task. */
  pollIntervalMs?: number;
}

/** What the work of a task receives. */
export interface TaskHandle {
  /** The task id, or `undefined` when the tool runs synchronously (the client did not declare the extension). */
  readonly taskId: string | undefined;
  /** Aborted when the task is cancelled (`tasks/cancel`). */
  readonly signal: AbortSignal;
  /**
   * Asks a form elicitation during the task: the task goes to `input_required` and `tasks/get` lists the question
   * under `key` until `tasks/update` brings a valid answer. Keys are unique for the task's life (a reused key is a
   * `TypeError`). Without a task (synchronous run) it fails with `-32021` naming the tasks extension.
   */
  elicit<const S extends FormSchema>(key: string, question: ElicitFormQuestion<S>): Promise<ElicitAnswer<FormContent<S>>>;
}

/** The work of a task: returns the tool result (`isError: true` for a tool error), or throws (a failed task). */
export type TaskWork = (task: TaskHandle) => Promise<CallToolResult>;

const TASK = Symbol('mrtr.task');
/** What `need.task(work)` returns: the adapter turns it into a task (or runs it at once). */
export interface TaskMarker extends CallToolResult {
  readonly [TASK]: { work: TaskWork; options: TaskStartOptions };
}
export function taskMarker(work: TaskWork, options: TaskStartOptions = {}): TaskMarker {
  if (typeof work !== 'function') throw new TypeError('need.task: work must be an async function');
  if (options === null || typeof options !== 'object') throw new TypeError('need.task: options must be an object');
  const marker = { content: [] } as unknown as TaskMarker;
  Object.defineProperty(marker, TASK, { value: { work, options: { ...options } }, enumerable: false });
  return marker;
}
export const isTaskMarker = (value: unknown): value is TaskMarker =>
  value !== null && typeof value === 'object' && Object.hasOwn(value, TASK);

const KEY_PATTERN = /^[\x21-\x7e]{1,128}$/;
const MAX_TTL_MS = 30 * 24 * 3_600_000;
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `-32021` naming the tasks extension. */
export function missingTasksExtensionError(what: string): MissingRequiredClientCapabilityError {
  return new MissingRequiredClientCapabilityError(
    { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } as never },
    `${what} needs the ${TASKS_EXTENSION} extension: declare it in the client's capabilities (capabilities.extensions)`,
  );
}

/** Whether this request's client capabilities declare the tasks extension (its own `_meta`, else its session's). */
export function declaresTasks(ctx: ServerContext, session: () => ClientCapabilities | undefined): boolean {
  const envelope = ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  const caps = (envelope !== undefined ? envelope[CLIENT_CAPABILITIES_META_KEY] : session()) as { extensions?: unknown } | undefined;
  return isObject(caps) && isObject(caps.extensions) && isObject(caps.extensions[TASKS_EXTENSION]);
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** The flat task fields of `CreateTaskResult` and `tasks/get` (never `requestState`). */
function taskFields(record: TaskRecord): Record<string, unknown> {
  const out: Record<string, unknown> = {
    taskId: record.taskId,
    status: record.status,
    createdAt: iso(record.createdAt),
    lastUpdatedAt: iso(record.lastUpdatedAt),
    ttlMs: record.ttlMs,
  };
  if (record.pollIntervalMs !== undefined) out.pollIntervalMs = record.pollIntervalMs;
  if (record.statusMessage !== undefined) out.statusMessage = record.statusMessage;
  return out;
}

/** The JSON-RPC error a failed task reports for what its work threw (never an internal message). */
function taskErrorOf(error: unknown): TaskError {
  const wire = error instanceof WireError ? error.error : error instanceof ProtocolError ? error : undefined;
  if (wire !== undefined) {
    return { code: wire.code, message: wire.message, ...(wire.data !== undefined && { data: wire.data as JsonValue }) };
  }
  return { code: INTERNAL_ERROR, message: 'Internal error' };
}

interface Waiter {
  validate(answer: unknown): JsonValue | undefined;
  resolve(answer: JsonValue): void;
  reject(error: unknown): void;
}
interface Run {
  controller: AbortController;
  waiters: Map<string, Waiter>;
}

/** The tasks support of one `createMrtr`: starts tasks and answers `tasks/get`, `tasks/update`, `tasks/cancel`. */
export interface TaskRuntime {
  /** Runs `marker`'s work: as a task when the request declares the extension, else at once. */
  start(marker: TaskMarker, ctx: ServerContext, principal: string, declared: boolean): Promise<CallToolResult>;
  /** Registers `tasks/get`, `tasks/update`, `tasks/cancel` on `server` (once) and advertises the extension. */
  install(server: McpServer): void;
}

export function createTaskRuntime(
  options: TaskOptions,
  principalOf: (ctx: ServerContext) => string | undefined,
  maxAnswerChars: number,
): TaskRuntime {
  if (!isObject(options)) throw new TypeError('createMrtr: tasks must be { store, ttlMs?, pollIntervalMs? }');
  const { store } = options;
  if (!isObject(store) || typeof store.create !== 'function' || typeof store.get !== 'function' || typeof store.update !== 'function') {
    throw new TypeError('createMrtr: tasks.store must be a TaskStore (create, get, update)');
  }
  const ttlMs = boundedInt('createMrtr: tasks.ttlMs', options.ttlMs, 3_600_000, 1_000, MAX_TTL_MS);
  const pollIntervalMs = boundedInt('createMrtr: tasks.pollIntervalMs', options.pollIntervalMs, 1_000, 1, 3_600_000);
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createMrtr: tasks.now must be a function');
  const limits = { maxChars: maxAnswerChars };
  const runs = new Map<string, Run>();
  const installed = new WeakSet<object>();

  const newTaskId = (): string => {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return base64urlEncode(bytes);
  };

  /** Settles a task unless it already ended (a cancelled task stays cancelled). */
  const settle = async (taskId: string, change: Partial<TaskRecord>): Promise<void> => {
    await store.update(taskId, (record) =>
      isTerminalStatus(record.status) ? undefined : { ...record, ...change, inputRequests: {}, lastUpdatedAt: now() },
    );
  };

  async function start(marker: TaskMarker, _ctx: ServerContext, principal: string, declared: boolean): Promise<CallToolResult> {
    const { work, options: startOptions } = marker[TASK];
    const controller = new AbortController();
    if (!declared) {
      // No task without the extension: the work runs now and its result is the call's result.
      const sync: TaskHandle = {
        taskId: undefined,
        signal: controller.signal,
        elicit: async () => {
          throw new WireError(missingTasksExtensionError('Asking for input while this tool runs'));
        },
      };
      return await work(sync);
    }
    const t = now();
    const record: TaskRecord = {
      taskId: newTaskId(),
      principal,
      status: 'working',
      createdAt: t,
      lastUpdatedAt: t,
      ttlMs: boundedInt('need.task: ttlMs', startOptions.ttlMs, ttlMs, 1_000, MAX_TTL_MS),
      pollIntervalMs: boundedInt('need.task: pollIntervalMs', startOptions.pollIntervalMs, pollIntervalMs, 1, 3_600_000),
      inputRequests: {},
      askedKeys: [],
    };
    try {
      await store.create(record);
    } catch (error) {
      if (error instanceof TaskLimitError) throw new WireError(new ProtocolError(INVALID_REQUEST, error.message, { reason: 'task_limit' }));
      throw error;
    }
    const { taskId } = record;
    const run: Run = { controller, waiters: new Map() };
    runs.set(taskId, run);
    const asked = new Set<string>();
    const handle: TaskHandle = {
      taskId,
      signal: controller.signal,
      async elicit(key, question) {
        if (typeof key !== 'string' || !KEY_PATTERN.test(key)) throw new TypeError('task.elicit: key must be 1-128 printable ASCII characters');
        if (asked.has(key)) throw new TypeError(`task.elicit: key "${key}" was already used in this task (keys are unique for a task's life)`);
        if (!isObject(question) || typeof question.message !== 'string' || !isObject(question.requestedSchema)) {
          throw new TypeError('task.elicit: question must be { message, requestedSchema }');
        }
        controller.signal.throwIfAborted();
        asked.add(key);
        const schema = question.requestedSchema;
        const request: TaskInputRequest = { method: 'elicitation/create', params: { message: question.message, requestedSchema: schema } };
        const answer = new Promise<JsonValue>((resolve, reject) => {
          run.waiters.set(key, { validate: (a) => validateFormAnswer(schema, a, limits), resolve, reject });
        });
        const updated = await store.update(taskId, (current) => {
          if (isTerminalStatus(current.status)) return undefined;
          return {
            ...current,
            status: 'input_required',
            inputRequests: { ...current.inputRequests, [key]: request },
            askedKeys: [...current.askedKeys, key],
            lastUpdatedAt: now(),
          };
        });
        if (updated === undefined || isTerminalStatus(updated.status)) {
          run.waiters.delete(key);
          controller.signal.throwIfAborted();
          throw new Error('task ended');
        }
        return (await answer) as unknown as ElicitAnswer<FormContent<typeof schema>>;
      },
    } as TaskHandle;
    // The CreateTaskResult leaves only after the store has the task; the work starts once this call returns.
    queueMicrotask(() => {
      void (async () => {
        try {
          const result = await work(handle);
          if (!isObject(result)) throw new TypeError('task work must return a tool result');
          const { resultType: _drop, ...rest } = result as Record<string, unknown>;
          await settle(taskId, { status: 'completed', result: JSON.parse(JSON.stringify(rest)) as Record<string, JsonValue> });
        } catch (error) {
          await settle(taskId, { status: 'failed', error: taskErrorOf(error) });
        } finally {
          for (const waiter of run.waiters.values()) waiter.reject(new Error('task ended'));
          runs.delete(taskId);
        }
      })().catch(() => undefined);
    });
    return { resultType: 'task', ...taskFields(record) } as unknown as CallToolResult;
  }

  /** The task of this request's principal, or the `-32602` an unknown one gets (another user's task included). */
  async function own(taskId: string, ctx: ServerContext, server: McpServer): Promise<TaskRecord> {
    if (!declaresTasks(ctx, () => server.server.getClientCapabilities())) throw missingTasksExtensionError(ctx.mcpReq.method);
    const principal = principalOf(ctx);
    if (principal === undefined) throw new ProtocolError(INVALID_REQUEST, PRINCIPAL_REQUIRED_MESSAGE);
    const record = await store.get(taskId);
    if (record === undefined || record.principal !== principal) throw new ProtocolError(INVALID_PARAMS, 'Unknown task', { reason: 'unknown_task' });
    return record;
  }

  /** `{ taskId, ... }` as a Standard Schema (the SDK validates custom-method params with one). */
  const TaskIdParams = {
    '~standard': {
      version: 1 as const,
      vendor: 'mrtr',
      types: undefined as unknown as { input: unknown; output: { taskId: string } },
      validate: (value: unknown) =>
        isObject(value) && typeof value.taskId === 'string' && value.taskId.length > 0 && value.taskId.length <= 256
          ? { value: value as { taskId: string } & Record<string, unknown> }
          : { issues: [{ message: 'taskId must be a non-empty string' }] },
    },
  };

  function install(server: McpServer): void {
    if (installed.has(server)) return;
    installed.add(server);
    server.server.registerCapabilities({ extensions: { [TASKS_EXTENSION]: {} } } as never);
    const low = server.server;
    low.setRequestHandler('tasks/get', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx, server);
      const out: Record<string, unknown> = { resultType: 'complete', ...taskFields(record) };
      if (record.status === 'input_required') out.inputRequests = record.inputRequests;
      if (record.status === 'completed' && record.result !== undefined) out.result = record.result;
      if (record.status === 'failed' && record.error !== undefined) out.error = record.error;
      return out as never;
    });
    low.setRequestHandler('tasks/update', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx, server);
      // The SDK lifts `inputResponses` out of every request's params; they are answers to this task's
      // outstanding requests, never an MRTR retry (no requestState is read here).
      const responses = isObject(ctx.mcpReq.inputResponses) ? ctx.mcpReq.inputResponses : {};
      const run = runs.get(record.taskId);
      const accepted = new Map<string, JsonValue>();
      if (run !== undefined) {
        for (const [key, value] of Object.entries(responses)) {
          if (!Object.hasOwn(record.inputRequests, key)) continue; // not outstanding: ignored
          const waiter = run.waiters.get(key);
          const answer = waiter?.validate(value);
          if (answer !== undefined) accepted.set(key, answer);
        }
      }
      if (accepted.size > 0) {
        await store.update(record.taskId, (current) => {
          if (isTerminalStatus(current.status)) return undefined;
          const inputRequests = { ...current.inputRequests };
          for (const key of accepted.keys()) delete inputRequests[key];
          const status = Object.keys(inputRequests).length === 0 ? 'working' : 'input_required';
          return { ...current, inputRequests, status, lastUpdatedAt: now() };
        });
        for (const [key, answer] of accepted) {
          const waiter = run!.waiters.get(key);
          run!.waiters.delete(key);
          waiter?.resolve(answer);
        }
      }
      return { resultType: 'complete' } as never;
    });
    low.setRequestHandler('tasks/cancel', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx, server);
      await store.update(record.taskId, (current) =>
        isTerminalStatus(current.status) ? undefined : { ...current, status: 'cancelled', inputRequests: {}, lastUpdatedAt: now() },
      );
      const run = runs.get(record.taskId);
      if (run !== undefined) {
        run.controller.abort(new Error('Task cancelled'));
        for (const waiter of run.waiters.values()) waiter.reject(run.controller.signal.reason);
        run.waiters.clear();
      }
      return { resultType: 'complete' } as never;
    });
  }

  return { start, install };
}

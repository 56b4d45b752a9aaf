/**
 * The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, 2026-07-28) on the server side, combined with
 * protected MRTR: a `tools/call` may run ordinary sealed `input_required` rounds first and then become a task;
 * input during the task flows through `tasks/get` (outstanding `inputRequests`) and `tasks/update`.
 *
 * Every task is bound to the user principal that created it (the principal policy of `createMrtr`, the one its
 * MRTR rounds are bound by: `principal`, then `unauthenticated`), its id carries 128 random bits, and the number
 * of live tasks per principal is bounded by the task store.
 */
import {
  CLIENT_CAPABILITIES_META_KEY,
  type CallToolResult,
  type CreateMessageRequestParams,
  type CreateMessageResult,
  type McpServer,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  type Root,
  type ServerContext,
} from '@modelcontextprotocol/server';
import { type JsonValue, MrtrError, type TaskError, type TaskInputRequest, type TaskRecord, type TaskStore } from '@mrtr/core';
import {
  allowedKinds,
  base64urlEncode,
  type InputRequest,
  type InputRequestKind,
  intOption,
  isObject,
  isTerminalStatus,
  requiredKind,
  TaskLimitError,
  taskExpiresAt,
} from '@mrtr/core/authoring';
import type { FormContent, FormSchema } from './answers.js';
import type { RequestPrincipal } from './principal.js';
import { answerCheckFor, formRequest, ROOTS_REQUEST, samplingRequest, urlRequest } from './questions.js';
import type { ElicitAnswer, ElicitFormQuestion, ElicitUrlQuestion, UrlAnswer } from './types.js';
import { kindNames, missingCapabilityError, PRINCIPAL_REQUIRED_MESSAGE, WireError } from './wire.js';

export type { TaskError, TaskInputRequest, TaskRecord, TaskStatus, TaskStore } from '@mrtr/core';
export { isTerminalStatus, TaskLimitError } from '@mrtr/core/authoring';

/** The extension id, under `capabilities.extensions` (server) and the request's client capabilities. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

const INVALID_REQUEST = -32600;
const INVALID_PARAMS = -32602;
const INTERNAL_ERROR = -32603;

/** Options of the tasks support (`tasks` of `createMrtr`). */
export interface TaskOptions {
  /** Where tasks live, e.g. `createMemoryTaskStore()` of `@mrtr/store-memory`. */
  store: TaskStore;
  /** How long a task stays readable after its last change, in ms (the wire `ttlMs`). @default 3_600_000 */
  ttlMs?: number | undefined;
  /** The poll interval suggested to clients, in ms (the wire `pollIntervalMs`). @default 1_000 */
  pollIntervalMs?: number | undefined;
  /**
   * How often the instance running a task reads it back from the store, in ms: how soon an answer or a cancel
   * that reached another instance gets to the work (on the same instance they arrive at once). @default 1_000
   */
  watchIntervalMs?: number | undefined;
  /**
   * How long the instance running a task vouches for it without renewing, in ms (it renews at a third of it). An
   * unfinished task whose lease has passed lost the process that ran it (a restart, a crash): `tasks/get` reports
   * it failed. @default 30_000
   */
  leaseMs?: number | undefined;
  /**
   * How long a question asked during a task waits for its answer, in ms (from when the work asked it). Past it,
   * unanswered, the task is `failed` (`-32600` "… ran out of time waiting for input …", `data.reason:
   * 'input_timeout'`) and its work's `signal` aborts: a task waiting for input always ends, and frees its slot in
   * the store's bounds (the lease renewal keeps a waiting task readable, so nothing else would end it). Checked by
   * the instance running the work at each `watchIntervalMs`. @default 3_600_000 (1 h)
   */
  inputTimeoutMs?: number | undefined;
  /**
   * Most unfinished tasks that callers without a principal (the fixed `unauthenticated: { principal }` of
   * `createMrtr`) may have running on this instance; one more is `-32600`. Those callers all share one principal, so
   * the store's per-principal bound (`maxLivePerPrincipal`) is a single bucket for all of them: this smaller one
   * keeps some of it free of any one anonymous caller, and `inputTimeoutMs` frees every slot a waiting task holds.
   * Counted per instance (the tasks whose work runs here); the store's bound still caps a fleet. @default 4
   */
  maxLiveUnauthenticated?: number | undefined;
  /** Clock in ms (tests). @default Date.now */
  now?: (() => number) | undefined;
}

/** Per-task options of `need.task`. */
export interface TaskStartOptions {
  /** Overrides {@link TaskOptions.ttlMs} for this task. @default the `ttlMs` of `createMrtr`'s `tasks` */
  ttlMs?: number;
  /** Overrides {@link TaskOptions.pollIntervalMs} for this task. @default the `pollIntervalMs` of `createMrtr`'s `tasks` */
  pollIntervalMs?: number;
  /** Overrides {@link TaskOptions.inputTimeoutMs} for this task. @default the `inputTimeoutMs` of `createMrtr`'s `tasks` */
  inputTimeoutMs?: number;
}

/** What the work of a task receives. */
export interface TaskHandle {
  /** The task id, or `undefined` when the tool runs synchronously (the request cannot follow a task). */
  readonly taskId: string | undefined;
  /** Aborted when the task is cancelled (`tasks/cancel`). */
  readonly signal: AbortSignal;
  /**
   * Whether the client may be asked `kind` during this task: the capabilities the request that started the task
   * declared (an entry of `inputRequests` is subject to them as the standalone request would be). `false` for every
   * kind without a task (synchronous run). A kind the tool does not list in `taskInput` may be asked only after
   * this said `true` for it.
   */
  can(kind: InputRequestKind): boolean;
  /**
   * Asks a form elicitation during the task: the task goes to `input_required` and `tasks/get` lists the question
   * under `key` until `tasks/update` brings a valid answer (checked against `requestedSchema`; an invalid one is
   * ignored and the question stays outstanding). Keys are unique for the task's life, across every kind (a reused
   * key is a `TypeError`). The kind must be in the tool's `taskInput` (then the call was refused before its first
   * round unless the client can be asked it) or {@link can} must have said `true` for it first; anything else is a
   * `TypeError` (uncaught, the task fails with `-32603`), also without a task (synchronous run).
   */
  elicit<const S extends FormSchema>(key: string, question: ElicitFormQuestion<S>): Promise<ElicitAnswer<FormContent<S>>>;
  /** A URL elicitation during the task (needs `elicitation.url`); `accept` is consent, not completion. As {@link elicit}. */
  elicitUrl(key: string, question: ElicitUrlQuestion): Promise<UrlAnswer>;
  /** Sampling during the task (`sampling/createMessage`; with `tools`/`toolChoice` it needs `sampling.tools`). As {@link elicit}. */
  sample(key: string, params: CreateMessageRequestParams): Promise<CreateMessageResult>;
  /** The client's roots during the task (`roots/list`); only `file://` URIs are accepted. As {@link elicit}. */
  roots(key: string): Promise<Root[]>;
  /**
   * Sets the task's `statusMessage` (what `tasks/get` shows while it runs, e.g. "canary: 1 of 10 instances"), at
   * most 1,024 characters. Without a task (synchronous run) it does nothing.
   */
  status(message: string): Promise<void>;
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

/** Every kind of input a task may ask, in the order `taskInput` is checked and named. */
const INPUT_KINDS: readonly InputRequestKind[] = ['elicitation.form', 'elicitation.url', 'sampling', 'sampling.tools', 'roots'];

/**
 * Whether this request can follow a task: `'task'` for a 2026-07-28 request (client capabilities in its own
 * `_meta`) that declares the extension; `'undeclared'` for one that does not; `'legacy'` for a 2025-era request
 * (a session or the stateless fallback), whatever its `initialize` declared: the extension is defined for
 * 2026-07-28 requests only, and a 2025-era client cannot read a `CreateTaskResult` (it shows an empty result).
 */
export type TaskLane = 'task' | 'undeclared' | 'legacy';

export function taskLaneOf(ctx: ServerContext): TaskLane {
  const envelope = ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  if (envelope === undefined) return 'legacy';
  const caps = envelope[CLIENT_CAPABILITIES_META_KEY] as { extensions?: unknown } | undefined;
  return isObject(caps) && isObject(caps.extensions) && isObject(caps.extensions[TASKS_EXTENSION]) ? 'task' : 'undeclared';
}

/** `-32021` naming the tasks extension, and for a 2025-era request the protocol version it needs. */
export function missingTasksExtensionError(what: string, lane: TaskLane = 'undeclared'): MissingRequiredClientCapabilityError {
  const message =
    lane === 'legacy'
      ? `${what} needs the ${TASKS_EXTENSION} extension, which only 2026-07-28 requests can use: this request came from a ` +
        '2025-era client, which cannot follow a task. Connect with a 2026-07-28 client that declares the extension'
      : `${what} needs the ${TASKS_EXTENSION} extension: declare it in the client's capabilities (capabilities.extensions)`;
  return new MissingRequiredClientCapabilityError({ requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } as never }, message);
}

/** Validates `taskInput` of `registerTool`: the kinds the task's work asks without checking `task.can` first. */
export function parseTaskInput(taskSupport: unknown, taskInput: unknown): ReadonlySet<InputRequestKind> {
  if (taskInput === undefined) return new Set();
  if (taskSupport === undefined) throw new TypeError('mrtr.registerTool: taskInput needs task: "optional" or "required"');
  if (!Array.isArray(taskInput) || taskInput.some((kind) => !INPUT_KINDS.includes(kind as InputRequestKind))) {
    throw new TypeError(`mrtr.registerTool: taskInput must be an array of ${INPUT_KINDS.map((k) => `"${k}"`).join(', ')}`);
  }
  return new Set(INPUT_KINDS.filter((kind) => taskInput.includes(kind)));
}

/**
 * Decides, before any round of a `tools/call` runs, whether it may become a task (the answer), or refuses it at
 * once with `-32021` naming what is missing, so that no user answers a round for work that cannot go on:
 * - a request that cannot follow a task (see {@link TaskLane}) gets no task: a `'required'` tool, or one whose work
 *   asks for input during the task (`needs`, its `taskInput`), is refused; any other runs its work synchronously;
 * - a request that can follow one must declare every kind in `needs`.
 */
export function gateTaskCall(
  ctx: ServerContext,
  name: string,
  support: 'optional' | 'required',
  needs: ReadonlySet<InputRequestKind>,
): boolean {
  const lane = taskLaneOf(ctx);
  if (lane !== 'task') {
    if (support === 'required') throw new WireError(missingTasksExtensionError(`The tool ${name}`, lane));
    if (needs.size > 0)
      throw new WireError(missingTasksExtensionError(`The tool ${name} asks for ${kindNames(needs)} while it runs as a task, so it`, lane));
    return false;
  }
  const envelope = ctx.mcpReq.envelope as Record<string, unknown>;
  const allowed = allowedKinds(envelope[CLIENT_CAPABILITIES_META_KEY] as Parameters<typeof allowedKinds>[0]);
  const missing = [...needs].filter((kind) => !allowed.has(kind));
  if (missing.length > 0) throw missingCapabilityError(missing);
  return true;
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
  resolve(answer: JsonValue): void;
  reject(error: unknown): void;
  /** When (ms) the question stops waiting: past it, unanswered, the task fails (`inputTimeoutMs`). */
  deadline: number;
}
/** A task whose work runs in this process. */
interface Run {
  controller: AbortController;
  /** The task's `inputTimeoutMs`. */
  inputTimeoutMs: number;
  /** Keys asked by the work and not yet answered. */
  waiters: Map<string, Waiter>;
  /** Makes the watch loop read the record now. */
  wake(): void;
  done: boolean;
}

function checkStatusMessage(message: unknown): void {
  if (typeof message !== 'string' || message.length > 1_024)
    throw new TypeError('task.status: message must be a string of at most 1,024 characters');
}

/** The error a task reports when the process running it stopped before it finished. */
const LOST_RUNNER: TaskError = { code: INTERNAL_ERROR, message: 'The server running this task stopped before it finished' };

/** How the round that returned `need.task()` starts it. */
export interface TaskStart {
  /** Whether it becomes a task ({@link gateTaskCall}); else the work runs at once. */
  task: boolean;
  /** Who the round is: the task is bound to its {@link RequestPrincipal.key}. */
  principal: RequestPrincipal;
  /** The kinds of input the request's client declared (the task may ask only those). */
  can: (kind: InputRequestKind) => boolean;
  /** The tool's `taskInput`: the kinds the work may ask without checking `task.can` (the gate checked them). */
  needs: ReadonlySet<InputRequestKind>;
}

/** The tasks support of one `createMrtr`: starts tasks and answers `tasks/get`, `tasks/update`, `tasks/cancel`. */
export interface TaskRuntime {
  /** Runs `marker`'s work: as a task when `how.task`, else at once. */
  start(marker: TaskMarker, how: TaskStart): Promise<CallToolResult>;
  /** Registers `tasks/get`, `tasks/update`, `tasks/cancel` on `server` (once) and advertises the extension. */
  install(server: McpServer): void;
}

export function createTaskRuntime(
  options: TaskOptions,
  principalOf: (ctx: ServerContext) => RequestPrincipal,
  maxAnswerChars: number,
): TaskRuntime {
  if (!isObject(options))
    throw new TypeError(
      'createMrtr: tasks must be { store, ttlMs?, pollIntervalMs?, watchIntervalMs?, leaseMs?, inputTimeoutMs?, maxLiveUnauthenticated? }',
    );
  const { store } = options;
  if (!isObject(store) || typeof store.create !== 'function' || typeof store.get !== 'function' || typeof store.update !== 'function') {
    throw new TypeError('createMrtr: tasks.store must be a TaskStore (create, get, update)');
  }
  const ttlMs = intOption('createMrtr: tasks.ttlMs', options.ttlMs, 3_600_000, 1_000, MAX_TTL_MS);
  const pollIntervalMs = intOption('createMrtr: tasks.pollIntervalMs', options.pollIntervalMs, 1_000, 1, 3_600_000);
  const watchIntervalMs = intOption('createMrtr: tasks.watchIntervalMs', options.watchIntervalMs, 1_000, 1, 60_000);
  const leaseMs = intOption('createMrtr: tasks.leaseMs', options.leaseMs, 30_000, 1_000, 3_600_000);
  if (leaseMs < 3 * watchIntervalMs) throw new RangeError('createMrtr: tasks.leaseMs must be at least three times watchIntervalMs');
  const inputTimeoutMs = intOption('createMrtr: tasks.inputTimeoutMs', options.inputTimeoutMs, 3_600_000, 1_000, MAX_TTL_MS);
  const maxLiveUnauthenticated = intOption('createMrtr: tasks.maxLiveUnauthenticated', options.maxLiveUnauthenticated, 4, 1, 1_000_000);
  /** Unfinished tasks of the fixed unauthenticated principal whose work runs here (or is being created). */
  let unauthenticatedLive = 0;
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
    await store.update(taskId, (record) => {
      if (isTerminalStatus(record.status)) return undefined;
      const { answers: _answers, leaseUntil: _lease, ...rest } = record;
      return { ...rest, ...change, inputRequests: {}, lastUpdatedAt: now() };
    });
  };

  /** Ends a run: the work's signal aborts and every question it waits on fails. */
  const stop = (run: Run, reason: unknown): void => {
    if (!run.controller.signal.aborted) run.controller.abort(reason);
    for (const waiter of run.waiters.values()) waiter.reject(run.controller.signal.reason);
    run.waiters.clear();
  };

  /**
   * While a task's work runs here: reads the record every `watchIntervalMs` (at once when woken) to hand the work
   * the answers `tasks/update` stored (on any instance), to stop it when the task was cancelled or is gone, and to
   * renew the lease. A store that fails a read or a write is tried again at the next tick.
   */
  const watch = async (taskId: string, run: Run, sleep: () => Promise<void>): Promise<void> => {
    while (!run.done) {
      await sleep();
      if (run.done) return;
      let record: TaskRecord | undefined;
      try {
        record = await store.get(taskId);
      } catch {
        continue;
      }
      if (record === undefined || isTerminalStatus(record.status)) {
        stop(run, new Error(record === undefined ? 'Task expired' : 'Task cancelled'));
        return;
      }
      const taken = Object.keys(record.answers ?? {}).filter((key) => run.waiters.has(key));
      if (await timedOut(taskId, run, new Set(taken))) return;
      const renew = record.leaseUntil === undefined || now() >= record.leaseUntil - (2 * leaseMs) / 3;
      if (taken.length === 0 && !renew) continue;
      let updated: TaskRecord | undefined;
      try {
        updated = await store.update(taskId, (current) => {
          if (isTerminalStatus(current.status)) return undefined;
          const answers = { ...current.answers };
          for (const key of taken) delete answers[key];
          const { answers: _drop, ...rest } = current;
          const t = now();
          // A task the work is still on must not expire under it: close to the end of its readable period the
          // renewal counts as a change (lastUpdatedAt moves), otherwise lastUpdatedAt is left alone.
          const lastUpdatedAt = t + 2 * leaseMs >= taskExpiresAt(current) ? t : current.lastUpdatedAt;
          return { ...rest, ...(Object.keys(answers).length > 0 && { answers }), leaseUntil: t + leaseMs, lastUpdatedAt };
        });
      } catch {
        continue;
      }
      if (updated === undefined || isTerminalStatus(updated.status)) continue; // seen at the next read
      for (const key of taken) {
        const waiter = run.waiters.get(key);
        run.waiters.delete(key);
        waiter?.resolve(record.answers![key]!);
      }
    }
  };

  /**
   * Fails the task when a question the work waits on is still unanswered past its deadline (`inputTimeoutMs`),
   * and stops the work. An answer that `tasks/update` stored meanwhile wins: the change checks the question is
   * still outstanding. `true` when the task ended here. A store that fails the write is tried at the next tick.
   */
  const timedOut = async (taskId: string, run: Run, taken: ReadonlySet<string>): Promise<boolean> => {
    const t = now();
    const late = [...run.waiters].filter(([key, waiter]) => t >= waiter.deadline && !taken.has(key)).map(([key]) => key);
    if (late.length === 0) return false;
    const error: TaskError = {
      code: INVALID_REQUEST,
      message:
        `This task ran out of time waiting for input: "${late[0]}" was not answered within ${Math.ceil(run.inputTimeoutMs / 1000)} s ` +
        '(inputTimeoutMs). Start it again',
      data: { reason: 'input_timeout' },
    };
    let updated: TaskRecord | undefined;
    try {
      updated = await store.update(taskId, (current) => {
        if (isTerminalStatus(current.status) || !late.some((key) => Object.hasOwn(current.inputRequests, key))) return undefined;
        const { answers: _answers, leaseUntil: _lease, ...rest } = current;
        return { ...rest, status: 'failed', error, inputRequests: {}, lastUpdatedAt: now() };
      });
    } catch {
      return false;
    }
    if (updated?.status !== 'failed') return false; // answered meanwhile, or ended otherwise (seen at the next read)
    stop(run, new ProtocolError(error.code, error.message, error.data));
    return true;
  };

  /** A sleep of `watchIntervalMs` that `wake()` cuts short; its timer never keeps the process alive. */
  const napper = (): { sleep: () => Promise<void>; wake: () => void } => {
    let woken = false;
    let release: (() => void) | undefined;
    return {
      sleep: () =>
        new Promise<void>((resolve) => {
          if (woken) {
            woken = false;
            resolve();
            return;
          }
          const timer = setTimeout(() => {
            release = undefined;
            resolve();
          }, watchIntervalMs);
          (timer as { unref?: () => void }).unref?.();
          release = () => {
            clearTimeout(timer);
            release = undefined;
            resolve();
          };
        }),
      wake: () => {
        if (release !== undefined) release();
        else woken = true;
      },
    };
  };

  async function start(marker: TaskMarker, how: TaskStart): Promise<CallToolResult> {
    const { work, options: startOptions } = marker[TASK];
    const { needs } = how;
    const controller = new AbortController();
    /** Kinds `task.can` answered `true` for in this task: the work checked them before asking. */
    const confirmed = new Set<InputRequestKind>();
    /**
     * The rule that makes every refusal come before the first round ({@link gateTaskCall}): the work asks a kind
     * only if the tool lists it in `taskInput` (then the call was refused up front unless the client declared it)
     * or `task.can(kind)` said `true` first. Anything else is a bug in the tool, a `TypeError` whatever the client
     * declared, so it shows on the first run instead of after a user answered the rounds.
     */
    const checkKind = (label: string, kind: InputRequestKind): void => {
      if (!needs.has(kind) && !confirmed.has(kind)) {
        throw new TypeError(
          `${label}: "${kind}" is neither in the tool's taskInput nor checked with task.can("${kind}") first ` +
            '(list the kinds the work asks in taskInput, or ask only after task.can says true)',
        );
      }
    };
    if (!how.task) {
      // No task (this request cannot follow one): the work runs now and its result is the call's result. Nothing
      // can be asked: can() is false for every kind, and the gate refused a tool that lists kinds in taskInput.
      const noTask = async (label: string, request: InputRequest): Promise<never> => {
        checkKind(label, requiredKind(request));
        throw new WireError(missingTasksExtensionError('Asking for input while this tool runs')); // not reached: fail closed
      };
      const sync: TaskHandle = {
        taskId: undefined,
        signal: controller.signal,
        can: () => false,
        elicit: async (_key, question) => noTask('task.elicit', formRequest('task.elicit', question)),
        elicitUrl: async (_key, question) => noTask('task.elicitUrl', urlRequest('task.elicitUrl', question)),
        sample: async (_key, params) => noTask('task.sample', samplingRequest('task.sample', params)),
        roots: async () => noTask('task.roots', ROOTS_REQUEST),
        status: async (message) => {
          checkStatusMessage(message);
        },
      };
      return await work(sync);
    }
    const principal = how.principal.key;
    const taskTtlMs = intOption('need.task: ttlMs', startOptions.ttlMs, ttlMs, 1_000, MAX_TTL_MS);
    const taskPollIntervalMs = intOption('need.task: pollIntervalMs', startOptions.pollIntervalMs, pollIntervalMs, 1, 3_600_000);
    const taskInputTimeoutMs = intOption('need.task: inputTimeoutMs', startOptions.inputTimeoutMs, inputTimeoutMs, 1_000, MAX_TTL_MS);
    // Callers without a principal all share one: they get a bound of their own, taken before the store is asked
    // (synchronously, so concurrent calls cannot pass it together) and given back when the work ends.
    const anonymous = how.principal.principal === undefined;
    if (anonymous && unauthenticatedLive >= maxLiveUnauthenticated) {
      throw new WireError(
        new ProtocolError(
          INVALID_REQUEST,
          `Too many tasks in progress for unauthenticated callers (at most ${maxLiveUnauthenticated}); wait for one to finish, or authenticate`,
          { reason: 'task_limit' },
        ),
      );
    }
    let released = !anonymous;
    const release = (): void => {
      if (released) return;
      released = true;
      unauthenticatedLive--;
    };
    if (anonymous) unauthenticatedLive++;
    const t = now();
    const record: TaskRecord = {
      taskId: newTaskId(),
      principal,
      status: 'working',
      createdAt: t,
      lastUpdatedAt: t,
      ttlMs: taskTtlMs,
      pollIntervalMs: taskPollIntervalMs,
      inputRequests: {},
      askedKeys: [],
      leaseUntil: t + leaseMs,
    };
    try {
      await store.create(record);
    } catch (error) {
      release();
      if (error instanceof TaskLimitError)
        throw new WireError(new ProtocolError(INVALID_REQUEST, taskLimitMessage(error), { reason: 'task_limit' }));
      throw error;
    }
    const { taskId } = record;
    const nap = napper();
    const run: Run = { controller, inputTimeoutMs: taskInputTimeoutMs, waiters: new Map(), wake: nap.wake, done: false };
    runs.set(taskId, run);
    const asked = new Set<string>();
    /**
     * Puts `request` among the task's outstanding `inputRequests` under `key` and waits for the answer `tasks/update`
     * stores (checked there against the question, on whichever instance takes it).
     */
    const ask = async (label: string, key: unknown, request: InputRequest): Promise<JsonValue> => {
      if (typeof key !== 'string' || !KEY_PATTERN.test(key)) throw new TypeError(`${label}: key must be 1-128 printable ASCII characters`);
      if (asked.has(key)) throw new TypeError(`${label}: key "${key}" was already used in this task (keys are unique for a task's life)`);
      const kind = requiredKind(request);
      checkKind(label, kind);
      if (!how.can(kind)) throw missingCapabilityError([kind]); // not reached for a listed kind (the gate checked it): fail closed
      controller.signal.throwIfAborted();
      asked.add(key);
      const entry = request as unknown as TaskInputRequest;
      const answer = new Promise<JsonValue>((resolve, reject) => {
        run.waiters.set(key, { resolve, reject, deadline: now() + run.inputTimeoutMs });
      });
      answer.catch(() => undefined); // rejected only when the run stops; the work sees it through its await
      const updated = await store.update(taskId, (current) => {
        if (isTerminalStatus(current.status)) return undefined;
        return {
          ...current,
          status: 'input_required',
          inputRequests: { ...current.inputRequests, [key]: entry },
          askedKeys: [...current.askedKeys, key],
          lastUpdatedAt: now(),
        };
      });
      if (updated === undefined || isTerminalStatus(updated.status)) {
        run.waiters.delete(key);
        controller.signal.throwIfAborted();
        throw new Error('task ended');
      }
      return await answer;
    };
    const handle: TaskHandle = {
      taskId,
      signal: controller.signal,
      can: (kind) => {
        const yes = how.can(kind);
        if (yes) confirmed.add(kind);
        return yes;
      },
      elicit: async (key, question) => (await ask('task.elicit', key, formRequest('task.elicit', question))) as never,
      elicitUrl: async (key, question) => (await ask('task.elicitUrl', key, urlRequest('task.elicitUrl', question))) as never,
      sample: async (key, params) => (await ask('task.sample', key, samplingRequest('task.sample', params))) as never,
      roots: async (key) => ((await ask('task.roots', key, ROOTS_REQUEST)) as unknown as { roots: Root[] }).roots,
      async status(message) {
        checkStatusMessage(message);
        controller.signal.throwIfAborted();
        await store.update(taskId, (current) =>
          isTerminalStatus(current.status) || current.statusMessage === message
            ? undefined
            : { ...current, statusMessage: message, lastUpdatedAt: now() },
        );
      },
    } as TaskHandle;
    void watch(taskId, run, nap.sleep).catch(() => undefined);
    // The CreateTaskResult leaves only after the store has the task; the work starts once this call returns.
    queueMicrotask(() => {
      void (async () => {
        try {
          const result = await work(handle);
          if (!isObject(result)) throw new TypeError('task work must return a tool result');
          // A CallToolResult as the 2026-07-28 base defines it, resultType included (the official ext-tasks
          // client decodes the inlined result with the base schema, which requires it).
          const complete = { ...(result as Record<string, unknown>), resultType: 'complete' };
          await settle(taskId, { status: 'completed', result: JSON.parse(JSON.stringify(complete)) as Record<string, JsonValue> });
        } catch (error) {
          await settle(taskId, { status: 'failed', error: taskErrorOf(error) });
        } finally {
          run.done = true;
          run.wake();
          stop(run, new Error('task ended'));
          runs.delete(taskId);
          release();
        }
      })().catch(() => undefined);
    });
    return { resultType: 'task', ...taskFields(record) } as unknown as CallToolResult;
  }

  /** An unfinished task whose lease passed and that no work here runs: its process is gone, so it failed. */
  const orphaned = (record: TaskRecord): boolean =>
    !isTerminalStatus(record.status) && record.leaseUntil !== undefined && now() > record.leaseUntil && !runs.has(record.taskId);

  /**
   * Who a task request is: the principal policy the rounds apply (`principalOf`), so that a task answers exactly the
   * principal a round of the same request would be bound to; none is the `-32600` a protected call gets.
   */
  const keyOf = (ctx: ServerContext): string => {
    try {
      return principalOf(ctx).key;
    } catch (error) {
      if (MrtrError.is(error) && error.code === 'ERR_PRINCIPAL_REQUIRED')
        throw new ProtocolError(INVALID_REQUEST, PRINCIPAL_REQUIRED_MESSAGE);
      throw error;
    }
  };

  /** The task of this request's principal, or the `-32602` an unknown one gets (another user's task included). */
  async function own(taskId: string, ctx: ServerContext): Promise<TaskRecord> {
    const lane = taskLaneOf(ctx);
    if (lane !== 'task') throw missingTasksExtensionError(ctx.mcpReq.method, lane);
    const principal = keyOf(ctx);
    let record = await store.get(taskId);
    if (record === undefined || record.principal !== principal)
      throw new ProtocolError(INVALID_PARAMS, 'Unknown task', { reason: 'unknown_task' });
    if (orphaned(record)) {
      record =
        (await store.update(taskId, (current) => {
          if (!orphaned(current)) return undefined;
          const { answers: _answers, leaseUntil: _lease, ...rest } = current;
          return { ...rest, status: 'failed', error: LOST_RUNNER, inputRequests: {}, lastUpdatedAt: now() };
        })) ?? record;
    }
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
      const record = await own(params.taskId, ctx);
      const out: Record<string, unknown> = { resultType: 'complete', ...taskFields(record) };
      if (record.status === 'input_required') out.inputRequests = record.inputRequests;
      if (record.status === 'completed' && record.result !== undefined) out.result = record.result;
      if (record.status === 'failed' && record.error !== undefined) out.error = record.error;
      return out as never;
    });
    low.setRequestHandler('tasks/update', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx);
      // The SDK lifts `inputResponses` out of every request's params; they are answers to this task's
      // outstanding requests, never an MRTR retry (no requestState is read here). Each is checked against the
      // question as the store keeps it, so any instance can take it; keys not outstanding are ignored.
      const responses = isObject(ctx.mcpReq.inputResponses) ? ctx.mcpReq.inputResponses : {};
      const accepted = new Map<string, JsonValue>();
      for (const [key, value] of Object.entries(responses)) {
        const request = Object.hasOwn(record.inputRequests, key) ? record.inputRequests[key] : undefined;
        const check = request === undefined ? undefined : answerCheckFor(request);
        const answer = check?.(value, limits);
        if (answer !== undefined) accepted.set(key, answer);
      }
      if (accepted.size > 0) {
        await store.update(record.taskId, (current) => {
          if (isTerminalStatus(current.status)) return undefined;
          const inputRequests = { ...current.inputRequests };
          const answers = { ...current.answers };
          for (const [key, answer] of accepted) {
            if (!Object.hasOwn(inputRequests, key)) continue; // answered meanwhile
            delete inputRequests[key];
            answers[key] = answer;
          }
          const status = Object.keys(inputRequests).length === 0 ? 'working' : 'input_required';
          return { ...current, inputRequests, answers, status, lastUpdatedAt: now() };
        });
        runs.get(record.taskId)?.wake();
      }
      return { resultType: 'complete' } as never;
    });
    low.setRequestHandler('tasks/cancel', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx);
      await store.update(record.taskId, (current) => {
        if (isTerminalStatus(current.status)) return undefined;
        const { answers: _answers, leaseUntil: _lease, ...rest } = current;
        return { ...rest, status: 'cancelled', inputRequests: {}, lastUpdatedAt: now() };
      });
      const run = runs.get(record.taskId);
      if (run !== undefined) stop(run, new Error('Task cancelled'));
      return { resultType: 'complete' } as never;
    });
  }

  return { start, install };
}

/** What a client is told when a task store refuses a new task. */
function taskLimitMessage(error: TaskLimitError): string {
  if (error.limit === 'live')
    return `Too many tasks in progress for this user (at most ${error.max}); wait for one to finish or cancel one`;
  if (error.limit === 'kept')
    return `Too many tasks kept for this user (at most ${error.max}); finished ones are kept until their ttlMs passes`;
  return 'Too many tasks on this server; try again later';
}

/**
 * Starting the work a round handed over (`need.task(work)`): at once when the request cannot follow a task, else as
 * a task created in the store, whose work runs here with a {@link TaskHandle} that asks through the task's record.
 */
import { type CallToolResult, ProtocolError, type Root } from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import type { InputRequest, Principal } from '@mrtr/core/adapter';
import { base64urlEncode } from '@mrtr/core/encoding';
import { TaskLimitError } from '@mrtr/core/errors';
import { intOption, isObject } from '@mrtr/core/options';
import { isTerminalStatus, type TaskInputRequest, type TaskRecord } from '@mrtr/core/tasks';
import { isAuthenticated, taskOwner } from '../identity.js';
import { type InputRequestKind, requiredKind } from '../protocol/capabilities.js';
import { handoffOf, type TaskHandle, type TaskMarker, type TaskWork } from '../rounds/handoff.js';
import { formRequest, ROOTS_REQUEST, samplingRequest, urlRequest } from '../rounds/questions.js';
import { INVALID_REQUEST, missingCapabilityError, WireError } from '../protocol/wire.js';
import { missingTasksExtensionError } from './gate.js';
import { MAX_TTL_MS, type TaskSettings } from './options.js';
import { checkStatusMessage, taskErrorOf, taskFields, taskLimitMessage } from './records.js';
import { napper, type Run, settleTask, stopRun, watchRun } from './run.js';

const KEY_PATTERN = /^[\x21-\x7e]{1,128}$/;

/** How the round that returned `need.task()` starts it. */
export interface TaskStart {
  /** Whether it becomes a task (`gateTaskCall`); else the work runs at once. */
  task: boolean;
  /** Who the round is: the task is bound to it (`taskOwner`). */
  principal: Principal;
  /** The request's client address (`clientAddressOf`): `undefined` without an HTTP request (stdio). */
  address: string | undefined;
  /** The kinds of input the request's client declared (the task may ask only those). */
  can: (kind: InputRequestKind) => boolean;
  /** The tool's `taskInput`: the kinds the work may ask without checking `task.can` (the gate checked them). */
  needs: ReadonlySet<InputRequestKind>;
}

/** Which kinds the work may ask: those in `taskInput`, and those `task.can` said `true` for. */
interface KindRule {
  /** Throws the `TypeError` for a kind neither listed nor confirmed. */
  check(label: string, kind: InputRequestKind): void;
  /** `task.can(kind)` said `true`: the work checked it before asking. */
  confirm(kind: InputRequestKind): void;
}

/**
 * The rule that makes every refusal come before the first round (`gateTaskCall`): the work asks a kind only if the
 * tool lists it in `taskInput` (then the call was refused up front unless the client declared it) or `task.can(kind)`
 * said `true` first. Anything else is a bug in the tool, a `TypeError` whatever the client declared, so it shows on
 * the first run instead of after a user answered the rounds.
 */
function kindRule(needs: ReadonlySet<InputRequestKind>): KindRule {
  /** Kinds `task.can` answered `true` for in this task: the work checked them before asking. */
  const confirmed = new Set<InputRequestKind>();
  return {
    check(label, kind) {
      if (!needs.has(kind) && !confirmed.has(kind)) {
        throw new TypeError(
          `${label}: "${kind}" is neither in the tool's taskInput nor checked with task.can("${kind}") first ` +
            '(list the kinds the work asks in taskInput, or ask only after task.can says true)',
        );
      }
    },
    confirm(kind) {
      confirmed.add(kind);
    },
  };
}

/**
 * The handle of work that runs without a task (this request cannot follow one): nothing can be asked, `can()` is
 * false for every kind, and the gate refused a tool that lists kinds in `taskInput`.
 */
function syncHandle(signal: AbortSignal, kinds: KindRule): TaskHandle {
  const noTask = async (label: string, request: InputRequest): Promise<never> => {
    kinds.check(label, requiredKind(request));
    throw new WireError(missingTasksExtensionError('Asking for input while this tool runs')); // not reached: fail closed
  };
  return {
    taskId: undefined,
    signal,
    can: () => false,
    elicit: async (_key, question) => noTask('task.elicit', formRequest('task.elicit', question)),
    elicitUrl: async (_key, question) => noTask('task.elicitUrl', urlRequest('task.elicitUrl', question)),
    sample: async (_key, params) => noTask('task.sample', samplingRequest('task.sample', params)),
    roots: async () => noTask('task.roots', ROOTS_REQUEST),
    status: async (message) => {
      checkStatusMessage(message);
    },
  };
}

/**
 * The ask of a task: puts `request` among the task's outstanding `inputRequests` under `key` and waits for the answer
 * `tasks/update` stores (checked there against the question, on whichever instance takes it).
 */
function taskAsk(
  { store, now }: TaskSettings,
  taskId: string,
  run: Run,
  how: TaskStart,
  kinds: KindRule,
): (label: string, key: unknown, request: InputRequest) => Promise<JsonValue> {
  const { controller } = run;
  const asked = new Set<string>();
  return async (label, key, request) => {
    if (typeof key !== 'string' || !KEY_PATTERN.test(key)) throw new TypeError(`${label}: key must be 1-128 printable ASCII characters`);
    if (asked.has(key)) throw new TypeError(`${label}: key "${key}" was already used in this task (keys are unique for a task's life)`);
    const kind = requiredKind(request);
    kinds.check(label, kind);
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
}

/** The handle of work that runs as the task `taskId`: its questions and status go through the task's record. */
function taskHandle(settings: TaskSettings, taskId: string, run: Run, how: TaskStart, kinds: KindRule): TaskHandle {
  const { store, now } = settings;
  const { controller } = run;
  const ask = taskAsk(settings, taskId, run, how, kinds);
  return {
    taskId,
    signal: controller.signal,
    can: (kind) => {
      const yes = how.can(kind);
      if (yes) kinds.confirm(kind);
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
}

/** Runs the work of a task to its end: settles the task with its result or error, and ends the run. */
async function runWork(
  settings: TaskSettings,
  runs: Map<string, Run>,
  taskId: string,
  run: Run,
  work: TaskWork,
  handle: TaskHandle,
  release: () => void,
): Promise<void> {
  try {
    const result = await work(handle);
    if (!isObject(result)) throw new TypeError('task work must return a tool result');
    // A CallToolResult as the 2026-07-28 base defines it, resultType included (the official ext-tasks
    // client decodes the inlined result with the base schema, which requires it).
    const complete = { ...(result as Record<string, unknown>), resultType: 'complete' };
    await settleTask(settings, taskId, { status: 'completed', result: JSON.parse(JSON.stringify(complete)) as Record<string, JsonValue> });
  } catch (error) {
    await settleTask(settings, taskId, { status: 'failed', error: taskErrorOf(error) });
  } finally {
    run.done = true;
    run.wake();
    stopRun(run, new Error('task ended'));
    runs.delete(taskId);
    release();
  }
}

const newTaskId = (): string => {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return base64urlEncode(bytes);
};

/**
 * The start of tasks for one runtime: `start(marker, how)` runs the handed-over work, at once when `how.task` is
 * false, else as a new task (its `CreateTaskResult` is the answer). `runs` holds the tasks whose work runs here.
 */
export function createTaskStarter(
  settings: TaskSettings,
  runs: Map<string, Run>,
): (marker: TaskMarker, how: TaskStart) => Promise<CallToolResult> {
  const { store, now, leaseMs, maxLiveUnauthenticated, maxLiveUnauthenticatedPerAddress } = settings;
  /** Unfinished tasks of the fixed unauthenticated principal whose work runs here (or is being created). */
  let unauthenticatedLive = 0;
  /** The same by client address (HTTP requests only); an address with none is not kept. */
  const liveAt = new Map<string, number>();
  const refuse = (message: string): never => {
    throw new WireError(new ProtocolError(INVALID_REQUEST, message, { reason: 'task_limit' }));
  };

  /**
   * Callers without a principal all share one: they get a bound of their own, as a class and per client address,
   * taken before the store is asked (synchronously, so concurrent calls cannot pass it together) and given back when
   * the work ends (the release).
   */
  const admit = (who: Principal, address: string | undefined): (() => void) => {
    if (isAuthenticated(who)) return () => {};
    if (unauthenticatedLive >= maxLiveUnauthenticated) {
      refuse(
        `Too many tasks in progress for unauthenticated callers (at most ${maxLiveUnauthenticated}); wait for one to finish, or authenticate`,
      );
    }
    const here = address === undefined ? 0 : (liveAt.get(address) ?? 0);
    if (here >= maxLiveUnauthenticatedPerAddress) {
      refuse(
        `Too many tasks in progress for unauthenticated callers from this address (at most ${maxLiveUnauthenticatedPerAddress}); wait for one to finish, or authenticate`,
      );
    }
    unauthenticatedLive++;
    if (address !== undefined) liveAt.set(address, here + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      unauthenticatedLive--;
      if (address === undefined) return;
      const left = (liveAt.get(address) ?? 1) - 1;
      if (left > 0) liveAt.set(address, left);
      else liveAt.delete(address);
    };
  };

  return async function start(marker, how) {
    const { work, options: startOptions } = handoffOf(marker);
    const controller = new AbortController();
    const kinds = kindRule(how.needs);
    // No task (this request cannot follow one): the work runs now and its result is the call's result.
    if (!how.task) return await work(syncHandle(controller.signal, kinds));
    const principal = taskOwner(how.principal);
    const taskTtlMs = intOption('need.task: ttlMs', startOptions.ttlMs, settings.ttlMs, 1_000, MAX_TTL_MS);
    const taskPollIntervalMs = intOption('need.task: pollIntervalMs', startOptions.pollIntervalMs, settings.pollIntervalMs, 1, 3_600_000);
    const taskInputTimeoutMs = intOption(
      'need.task: inputTimeoutMs',
      startOptions.inputTimeoutMs,
      settings.inputTimeoutMs,
      1_000,
      MAX_TTL_MS,
    );
    const release = admit(how.principal, how.address);
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
    const nap = napper(settings.watchIntervalMs);
    const run: Run = { controller, inputTimeoutMs: taskInputTimeoutMs, waiters: new Map(), wake: nap.wake, done: false };
    runs.set(taskId, run);
    const handle = taskHandle(settings, taskId, run, how, kinds);
    void watchRun(settings, taskId, run, nap.sleep).catch(() => undefined);
    // The CreateTaskResult leaves only after the store has the task; the work starts once this call returns.
    let ended!: () => void;
    const finished = new Promise<void>((resolve) => (ended = resolve));
    queueMicrotask(() => {
      void runWork(settings, runs, taskId, run, work, handle, release)
        .catch(() => undefined)
        .finally(ended);
    });
    // On a platform that ends a request's work with its response, the work is handed over to stay alive.
    if (settings.background !== undefined) {
      try {
        settings.background(finished);
      } catch {}
    }
    return { resultType: 'task', ...taskFields(record) } as unknown as CallToolResult;
  };
}

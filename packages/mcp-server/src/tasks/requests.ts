/**
 * The task requests a client sends: `tasks/get`, `tasks/update` (answers to the task's outstanding questions) and
 * `tasks/cancel`, each for a task of the request's own principal, answered by whichever instance takes it.
 */
import { type McpServer, ProtocolError, type ServerContext } from '@modelcontextprotocol/server';
import { MrtrError, type JsonValue } from '@mrtr/core';
import type { Principal } from '@mrtr/core/adapter';
import { isObject } from '@mrtr/core/options';
import { isTerminalStatus, type TaskRecord } from '@mrtr/core/tasks';
import { taskOwner } from '../identity.js';
import type { AnswerLimits } from '../rounds/answers.js';
import { answerCheckFor } from '../rounds/questions.js';
import { INVALID_PARAMS, INVALID_REQUEST, PRINCIPAL_REQUIRED_MESSAGE } from '../protocol/wire.js';
import { missingTasksExtensionError, TASKS_EXTENSION, taskLaneOf } from './gate.js';
import type { TaskSettings } from './options.js';
import { LOST_RUNNER, taskFields } from './records.js';
import { type Run, stopRun } from './run.js';

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

/** Reads the task a request names, for its own principal only. */
type Own = (taskId: string, ctx: ServerContext) => Promise<TaskRecord>;

/**
 * The task of a request's principal, or the `-32602` an unknown one gets (another user's task included). A task
 * whose runner is gone (lease passed, no work here) is failed on the way.
 */
function ownership(settings: TaskSettings, runs: Map<string, Run>, principalOf: (ctx: ServerContext) => Principal): Own {
  const { store, now } = settings;
  /** An unfinished task whose lease passed and that no work here runs: its process is gone, so it failed. */
  const orphaned = (record: TaskRecord): boolean =>
    !isTerminalStatus(record.status) && record.leaseUntil !== undefined && now() > record.leaseUntil && !runs.has(record.taskId);

  /**
   * Who a task request is: the principal policy the rounds apply (`principalOf`), so that a task answers exactly the
   * principal a round of the same request would be bound to; none is the `-32600` a protected call gets.
   */
  const keyOf = (ctx: ServerContext): string => {
    try {
      return taskOwner(principalOf(ctx));
    } catch (error) {
      if (MrtrError.is(error) && error.code === 'ERR_PRINCIPAL_REQUIRED')
        throw new ProtocolError(INVALID_REQUEST, PRINCIPAL_REQUIRED_MESSAGE);
      throw error;
    }
  };

  return async function own(taskId, ctx) {
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
  };
}

/** `tasks/get`: the task's fields, its outstanding questions, and its result or error once it ended. */
function getTask(record: TaskRecord): Record<string, unknown> {
  const out: Record<string, unknown> = { resultType: 'complete', ...taskFields(record) };
  if (record.status === 'input_required') out.inputRequests = record.inputRequests;
  if (record.status === 'completed' && record.result !== undefined) out.result = record.result;
  if (record.status === 'failed' && record.error !== undefined) out.error = record.error;
  return out;
}

/**
 * `tasks/update`: stores the valid answers to the task's outstanding questions and wakes its work when it runs
 * here. The SDK lifts `inputResponses` out of every request's params; they are answers to this task's outstanding
 * requests, never an MRTR retry (no requestState is read here). Each is checked against the question as the store
 * keeps it, so any instance can take it; keys not outstanding are ignored.
 */
async function updateTask(
  { store, now }: TaskSettings,
  runs: Map<string, Run>,
  limits: AnswerLimits,
  record: TaskRecord,
  ctx: ServerContext,
): Promise<void> {
  const responses = isObject(ctx.mcpReq.inputResponses) ? ctx.mcpReq.inputResponses : {};
  const accepted = new Map<string, JsonValue>();
  for (const [key, value] of Object.entries(responses)) {
    const request = Object.hasOwn(record.inputRequests, key) ? record.inputRequests[key] : undefined;
    const check = request === undefined ? undefined : answerCheckFor(request);
    const answer = check?.(value, limits);
    if (answer !== undefined) accepted.set(key, answer);
  }
  if (accepted.size === 0) return;
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

/** `tasks/cancel`: ends the task `cancelled` (unless it already ended) and stops its work when it runs here. */
async function cancelTask({ store, now }: TaskSettings, runs: Map<string, Run>, record: TaskRecord): Promise<void> {
  await store.update(record.taskId, (current) => {
    if (isTerminalStatus(current.status)) return undefined;
    const { answers: _answers, leaseUntil: _lease, ...rest } = current;
    return { ...rest, status: 'cancelled', inputRequests: {}, lastUpdatedAt: now() };
  });
  const run = runs.get(record.taskId);
  if (run !== undefined) stopRun(run, new Error('Task cancelled'));
}

/** What a `Server` keeps of its `initialize` handler (`Protocol._getRequestHandler`, protected in the SDK's types). */
type InitializeHandler = (request: never, ctx: ServerContext) => Promise<Record<string, unknown>>;

/**
 * Advertises the extension where a client can use it: in `server/discover` (2026-07-28) but not in the answer to
 * `initialize`, which only a 2025-era client sends and whose requests can never follow a task (see `taskLaneOf`).
 * The SDK builds both answers from one capability set, so the `initialize` answer is filtered on its way out; the
 * server's own handler still runs (it negotiates the version and keeps the client's capabilities).
 */
function advertise(low: McpServer['server']): void {
  low.registerCapabilities({ extensions: { [TASKS_EXTENSION]: {} } } as never);
  const initialize = (low as unknown as { _getRequestHandler(method: string): InitializeHandler | undefined })._getRequestHandler(
    'initialize',
  );
  if (initialize === undefined) throw new Error('mrtr tasks: the SDK server has no initialize handler to filter');
  low.setRequestHandler('initialize', async (request, ctx) => {
    const result = await initialize(request as never, ctx);
    const { extensions = {}, ...capabilities } = result.capabilities as { extensions?: Record<string, unknown> };
    const { [TASKS_EXTENSION]: _tasks, ...others } = extensions;
    return { ...result, capabilities: Object.keys(others).length > 0 ? { ...capabilities, extensions: others } : capabilities } as never;
  });
}

/**
 * The installer of the task requests for one runtime: `install(server)` registers `tasks/get`, `tasks/update` and
 * `tasks/cancel` on `server` (once) and advertises the extension to 2026-07-28 clients.
 */
export function createTaskRequests(
  settings: TaskSettings,
  runs: Map<string, Run>,
  principalOf: (ctx: ServerContext) => Principal,
  maxAnswerChars: number,
): (server: McpServer) => void {
  const limits: AnswerLimits = { maxChars: maxAnswerChars };
  const installed = new WeakSet<object>();
  const own = ownership(settings, runs, principalOf);
  return function install(server) {
    if (installed.has(server)) return;
    installed.add(server);
    const low = server.server;
    advertise(low);
    low.setRequestHandler('tasks/get', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx);
      return getTask(record) as never;
    });
    low.setRequestHandler('tasks/update', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx);
      await updateTask(settings, runs, limits, record, ctx);
      return { resultType: 'complete' } as never;
    });
    low.setRequestHandler('tasks/cancel', { params: TaskIdParams }, async (params, ctx) => {
      const record = await own(params.taskId, ctx);
      await cancelTask(settings, runs, record);
      return { resultType: 'complete' } as never;
    });
  };
}

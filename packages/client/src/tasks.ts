import { type Client, ProtocolError } from '@modelcontextprotocol/client';
import { TaskCancelledError, TaskPollsExceededError } from './errors.js';
import { answer } from './input.js';
import { DEFAULT_TASK_LIMITS, type Settings } from './options.js';
import { retrying } from './retry.js';
import { isObject, type Json, tasksMeta } from './sdk.js';

/** Accepts any object result: the task views are read field by field below. */
const ANY_OBJECT = {
  '~standard': {
    version: 1,
    vendor: '@mrtr/client',
    validate: (value: unknown) => (isObject(value) ? { value } : { issues: [{ message: 'expected an object' }] }),
  },
} as const;

/** One `tasks/*` request declaring the extension, re-sent after a lost response (each is safe to repeat). */
export function taskRequest(
  client: Client,
  settings: Settings,
  method: string,
  taskId: string,
  extra: Json,
  signal: AbortSignal | undefined,
): Promise<Json> {
  const request = { method, params: { taskId, ...extra, _meta: tasksMeta(client) } };
  const options = signal === undefined ? undefined : { signal };
  return retrying(settings, () => client.request(request as never, ANY_OBJECT as never, options) as Promise<Json>, true, signal);
}

/**
 * Follows a task to its end: `tasks/get` every `pollIntervalMs` (within the bounds), each new question answered once
 * through the input handlers with `tasks/update` (a key is never reused over a task's life), `completed` → its result,
 * `failed` → its JSON-RPC error as a `ProtocolError`, `cancelled` → {@link TaskCancelledError}. When `signal` aborts,
 * the task is cancelled (`tasks/cancel`, best effort) and the abort reason thrown.
 */
export async function followTask(client: Client, settings: Settings, created: Json, signal: AbortSignal | undefined): Promise<Json> {
  const limits = settings.tasks === false ? DEFAULT_TASK_LIMITS : settings.tasks;
  const taskId = String(created.taskId);
  const interval = (view: Json, previous: number): number => {
    const wanted = typeof view.pollIntervalMs === 'number' && Number.isFinite(view.pollIntervalMs) ? view.pollIntervalMs : previous;
    return Math.min(limits.maxPollMs, Math.max(limits.minPollMs, wanted));
  };
  const answered = new Set<string>();
  let wait = interval(created, 1_000);
  try {
    for (let poll = 0; poll < limits.maxPolls; poll++) {
      await settings.sleep(wait, signal);
      const view = await taskRequest(client, settings, 'tasks/get', taskId, {}, signal);
      wait = interval(view, wait);
      if (view.status === 'completed') return isObject(view.result) ? view.result : { content: [] };
      if (view.status === 'cancelled') throw new TaskCancelledError(taskId);
      if (view.status === 'failed') {
        const error = isObject(view.error) ? view.error : {};
        throw new ProtocolError(typeof error.code === 'number' ? error.code : -32603, String(error.message ?? 'Task failed'), error.data);
      }
      if (view.status === 'input_required' && isObject(view.inputRequests)) {
        const fresh = Object.fromEntries(Object.entries(view.inputRequests).filter(([key]) => !answered.has(key)));
        if (Object.keys(fresh).length === 0) continue;
        const inputResponses = await answer(client, settings, fresh, signal ?? new AbortController().signal);
        for (const key of Object.keys(fresh)) answered.add(key);
        await taskRequest(client, settings, 'tasks/update', taskId, { inputResponses }, signal);
      }
    }
    throw new TaskPollsExceededError(taskId);
  } catch (error) {
    if (signal?.aborted) {
      await taskRequest(client, settings, 'tasks/cancel', taskId, {}, undefined).catch(() => {});
      throw signal.reason;
    }
    throw error;
  }
}

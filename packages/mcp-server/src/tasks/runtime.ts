/**
 * The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, 2026-07-28) on the server side, combined with
 * protected MRTR: a `tools/call` may run ordinary sealed `input_required` rounds first and then become a task;
 * input during the task flows through `tasks/get` (outstanding `inputRequests`) and `tasks/update`.
 *
 * Every task is bound to the user principal that created it (the principal policy of `createMrtr`, the one its
 * MRTR rounds are bound by: `principal`, then `unauthenticated`), its id carries 128 random bits, and the number
 * of live tasks per principal is bounded by the task store.
 */
import type { CallToolResult, McpServer, ServerContext } from '@modelcontextprotocol/server';
import type { Principal } from '@mrtr/core/adapter';
import type { TaskMarker } from '../rounds/handoff.js';
import { resolveTaskOptions, type TaskOptions } from './options.js';
import { createTaskRequests } from './requests.js';
import type { Run } from './run.js';
import { createTaskStarter, type TaskStart } from './start.js';

/** The tasks support of one `createMrtr`: starts tasks and answers `tasks/get`, `tasks/update`, `tasks/cancel`. */
export interface TaskRuntime {
  /** Runs `marker`'s work: as a task when `how.task`, else at once. */
  start(marker: TaskMarker, how: TaskStart): Promise<CallToolResult>;
  /** Registers `tasks/get`, `tasks/update`, `tasks/cancel` on `server` (once) and advertises the extension. */
  install(server: McpServer): void;
}

/**
 * The tasks runtime of one `createMrtr`: `options` validated (`tasks` of `createMrtr`), tasks bound by the rounds'
 * principal policy (`principalOf`), answers during a task checked with the rounds' `maxAnswerChars`.
 */
export function createTaskRuntime(
  options: TaskOptions,
  principalOf: (ctx: ServerContext) => Principal,
  maxAnswerChars: number,
): TaskRuntime {
  const settings = resolveTaskOptions(options);
  /** The tasks whose work runs in this process, by id. */
  const runs = new Map<string, Run>();
  return { start: createTaskStarter(settings, runs), install: createTaskRequests(settings, runs, principalOf, maxAnswerChars) };
}

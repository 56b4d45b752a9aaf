/**
 * Whether a `tools/call` may become a task, decided before any of its rounds runs: the request's era and declared
 * extension (the task lane), the tool's `taskInput` against what the client declared.
 */
import { CLIENT_CAPABILITIES_META_KEY, MissingRequiredClientCapabilityError, type ServerContext } from '@modelcontextprotocol/server';
import { isObject } from '@mrtr/core/options';
import { allowedKinds, type InputRequestKind } from '../protocol/capabilities.js';
import { kindNames, missingCapabilityError, WireError } from '../protocol/wire.js';

/** The extension id, under `capabilities.extensions` (server) and the request's client capabilities. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

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

/**
 * How a round hands a tool call over to a task (the tasks extension): `need.task(work, options)` ends the
 * protected rounds with a marker carrying the work, and the tasks runtime (`../tasks`) runs it. The contract is
 * declared here, on the rounds' side, so that the rounds never depend on the tasks runtime: what the work receives
 * (`TaskHandle`), the work (`TaskWork`) and its per-task options (`TaskStartOptions`).
 */
import type { CallToolResult, CreateMessageRequestParams, CreateMessageResult, Root } from '@modelcontextprotocol/server';
import type { InputRequestKind } from '../protocol/capabilities.js';
import type { FormContent, FormSchema } from './answers.js';
import type { ElicitAnswer, ElicitFormQuestion, ElicitUrlQuestion, UrlAnswer } from './questions.js';

/** Per-task options of `need.task`. */
export interface TaskStartOptions {
  /** Overrides `TaskOptions.ttlMs` for this task. @default the `ttlMs` of `createMrtr`'s `tasks` */
  ttlMs?: number;
  /** Overrides `TaskOptions.pollIntervalMs` for this task. @default the `pollIntervalMs` of `createMrtr`'s `tasks` */
  pollIntervalMs?: number;
  /** Overrides `TaskOptions.inputTimeoutMs` for this task. @default the `inputTimeoutMs` of `createMrtr`'s `tasks` */
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
/** The work and per-task options `need.task` was given. */
export const handoffOf = (marker: TaskMarker): { work: TaskWork; options: TaskStartOptions } => marker[TASK];

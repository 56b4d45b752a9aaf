import type {
  CallToolRequest,
  CallToolResult,
  Client,
  GetPromptRequest,
  GetPromptResult,
  ReadResourceRequest,
  ReadResourceResult,
} from '@modelcontextprotocol/client';
import { RoundsExceededError } from './errors.js';
import { answer } from './input.js';
import { type MrtrClientOptions, type Settings, settle } from './options.js';
import { backoff, retrying } from './retry.js';
import { catchTasks, isObject, type Json, serverHasTasks, taskOf, tasksMeta } from './sdk.js';
import { followTask, taskRequest } from './tasks.js';
import { ToolCatalog } from './tools.js';

/** Where a first-round call carries its idempotency key. */
export const IDEMPOTENCY_KEY_META = 'dev.mrtr/idempotency-key';
/** Where a server marks an answer it replayed from its record instead of running the request again. */
export const REPLAYED_META = 'dev.mrtr/replayed';
/** An idempotency key: 1 to 255 characters of printable ASCII, no space (what an mrtr server accepts). */
const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

/** Options of one call. */
export interface MrtrCallOptions {
  /** Stops the call; a task it started is cancelled (`tasks/cancel`). */
  signal?: AbortSignal;
  /** Per-request timeout (ms), passed to the SDK client for each request sent. */
  timeout?: number;
  /**
   * This logical call's idempotency key, for a host that keeps it across restarts (sent on the first round whether or
   * not the tool declares keys). By default, under `idempotency: 'auto'`, a tool that declares keys gets a new one.
   */
  idempotencyKey?: string;
  /** Told the task id as soon as the call becomes a task. */
  onTask?: (taskId: string) => void;
}

/** A result, and whether the server answered it from its record (`_meta["dev.mrtr/replayed"]`) rather than running the request. */
export type Replayable<R> = R & { readonly replayed: boolean };

/** The calls that may take rounds, made safe to retry; see {@link withMrtr}. */
export interface MrtrClient {
  /** The client underneath, for everything else. */
  readonly client: Client;
  callTool(params: CallToolRequest['params'], options?: MrtrCallOptions): Promise<Replayable<CallToolResult>>;
  getPrompt(params: GetPromptRequest['params'], options?: MrtrCallOptions): Promise<Replayable<GetPromptResult>>;
  readResource(params: ReadResourceRequest['params'], options?: MrtrCallOptions): Promise<Replayable<ReadResourceResult>>;
  /** Cancels a task (`tasks/cancel`); resolves also for a task that already ended. */
  cancelTask(taskId: string, options?: { signal?: AbortSignal }): Promise<void>;
}

type RoundMethod = 'tools/call' | 'prompts/get' | 'resources/read';
interface FirstRound {
  /** The idempotency key of this logical call, sent on its first round only. */
  key: string | undefined;
  /** Whether the first round may be sent again after a lost response. */
  resend: boolean;
}

const replayable = <R>(result: Json): Replayable<R> =>
  ({ ...result, replayed: isObject(result._meta) && result._meta[REPLAYED_META] === true }) as Replayable<R>;

function checkCallOptions(method: string, options: MrtrCallOptions | undefined): MrtrCallOptions {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object') throw new TypeError(`${method}: options must be an object`);
  const key = options.idempotencyKey;
  if (key !== undefined && (typeof key !== 'string' || !KEY_PATTERN.test(key))) {
    throw new TypeError(`${method}: idempotencyKey must be 1 to 255 characters of printable ASCII, no space`);
  }
  return options;
}

/**
 * Runs one logical request to its end: its rounds (each question answered through the input handlers, the retry
 * carrying the answers and the `requestState` byte for byte, on a fresh id), each round re-sent after a lost response
 * when that is safe (see `retrying`), and a task it becomes followed to its result.
 */
async function run<R>(
  client: Client,
  settings: Settings,
  method: RoundMethod,
  params: Json,
  options: MrtrCallOptions,
  first: FirstRound,
): Promise<Replayable<R>> {
  const { signal } = options;
  const tasks = method === 'tools/call' && settings.tasks !== false && serverHasTasks(client);
  if (tasks) catchTasks(client);
  const sdkOptions = {
    allowInputRequired: true,
    ...(signal !== undefined && { signal }),
    ...(options.timeout !== undefined && { timeout: options.timeout }),
  };
  // A caller may resume a flow (params with answers or a state): that is a later round, as are the ones it answers.
  const { inputResponses, requestState, _meta, ...base } = params;
  const { [IDEMPOTENCY_KEY_META]: _key, ...callerMeta } = isObject(_meta) ? _meta : {};
  let round: Json = {
    ...(inputResponses !== undefined && { inputResponses }),
    ...(requestState !== undefined && { requestState }),
  };
  for (let rounds = 0; ; rounds++) {
    // A first-round call carries neither answers nor a state: only it carries the key (later rounds have their state).
    const isFirst = round.inputResponses === undefined && round.requestState === undefined;
    const meta = {
      ...callerMeta,
      ...(isFirst && first.key !== undefined && { [IDEMPOTENCY_KEY_META]: first.key }),
      ...(tasks && tasksMeta(client)),
    };
    const request = { method, params: { ...base, ...round, _meta: meta } };
    const resend = isFirst ? first.resend : typeof round.requestState === 'string';
    let result: Json;
    try {
      result = await retrying(settings, () => client.request(request as never, sdkOptions) as Promise<Json>, resend, signal);
    } catch (error) {
      const task = taskOf(error);
      if (task === undefined) throw error;
      options.onTask?.(String(task.taskId));
      return replayable<R>(await followTask(client, settings, task, signal));
    }
    if (result.resultType !== 'input_required') return replayable<R>(result);
    if (rounds >= settings.maxRounds) throw new RoundsExceededError();
    const requests = isObject(result.inputRequests) ? result.inputRequests : {};
    const asks = Object.keys(requests).length > 0;
    const answers = asks ? await answer(client, settings, requests, signal ?? new AbortController().signal) : undefined;
    round = {
      ...(answers !== undefined && { inputResponses: answers }),
      ...(typeof result.requestState === 'string' && { requestState: result.requestState }),
    };
    // A state-only answer (load shedding): the server asks for nothing but a retry; pace it.
    if (!asks) await settings.sleep(backoff(settings, 1), signal);
  }
}

/**
 * Wraps a connected official client (`@modelcontextprotocol/client` 2.4, 2026-07-28 era) so that `callTool`,
 * `getPrompt` and `readResource`:
 * - answer the server's questions (`input_required`) through the client's own handlers (or `onInput`) and send the
 *   next round with the answers and the same `requestState`;
 * - send a round again, with the same state, answers and idempotency key, when its response is lost, and wait when
 *   the server says it is still running (its retry-after, bounded backoff), never re-sending a first-round tool call
 *   that could run twice (one with no key, not annotated read-only or idempotent);
 * - give a tool that declares idempotency keys one key per logical call, kept across its retries;
 * - follow a task (declaring `io.modelcontextprotocol/tasks` on their own requests only) to its result;
 * - throw typed errors with stable codes: {@link RoundInProgressError}, {@link OutcomeUnknownError},
 *   {@link ResponseLostError}, …
 *
 * Works with any server that speaks 2026-07-28. The client's own methods are left untouched.
 */
export function withMrtr(client: Client, options?: MrtrClientOptions): MrtrClient {
  if (client === null || typeof client !== 'object' || typeof (client as { request?: unknown }).request !== 'function') {
    throw new TypeError('withMrtr: client must be a Client from @modelcontextprotocol/client');
  }
  const settings = settle(options);
  const catalog = new ToolCatalog(client, settings);
  return {
    client,
    async callTool(params, callOptions) {
      const opts = checkCallOptions('callTool', callOptions);
      const facts = await catalog.get(params.name, settings.idempotency === 'auto', opts.signal);
      // A key the caller already put in `_meta` counts as its `idempotencyKey`.
      const given = isObject(params._meta) ? params._meta[IDEMPOTENCY_KEY_META] : undefined;
      const key = opts.idempotencyKey ?? (typeof given === 'string' ? given : undefined) ?? (facts.keyed ? settings.newKey() : undefined);
      return run(client, settings, 'tools/call', params as Json, opts, { key, resend: key !== undefined || facts.repeatable });
    },
    getPrompt(params, callOptions) {
      return run(client, settings, 'prompts/get', params as Json, checkCallOptions('getPrompt', callOptions), {
        key: undefined,
        resend: true,
      });
    },
    readResource(params, callOptions) {
      return run(client, settings, 'resources/read', params as Json, checkCallOptions('readResource', callOptions), {
        key: undefined,
        resend: true,
      });
    },
    async cancelTask(taskId, cancelOptions) {
      if (typeof taskId !== 'string' || taskId.length === 0) throw new TypeError('cancelTask: taskId must be a non-empty string');
      await taskRequest(client, settings, 'tasks/cancel', taskId, {}, cancelOptions?.signal);
    },
  };
}

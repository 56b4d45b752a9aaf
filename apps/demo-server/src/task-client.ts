// The bundled client's task flow (`rollout`): the SDK 2.4 client cannot follow a task (it rejects a
// `resultType: "task"` answer and refuses `tasks/*` in the 2026-07-28 era), so this flow speaks the wire itself:
// `tools/call` rounds declaring the tasks extension, then `tasks/get` at the server's interval, `tasks/update` with the
// answers to what the task asks, each with the 2026-07-28 headers (`Mcp-Name: <taskId>` for `tasks/*`).
import {
  CLIENT_CAPABILITIES,
  describeQuestion,
  describeToken,
  type Json,
  parseMessages,
  resultText,
  scriptedAnswer,
  type Target,
  wireRequest,
} from './flows.js';

/** The extension a client declares (in each request's `_meta` client capabilities) to be answered with a task. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
const CAPABILITIES = { ...CLIENT_CAPABILITIES, extensions: { [TASKS_EXTENSION]: {} } } as const;
const CLIENT_INFO = { name: 'mrtr-demo-client', version: '0.1.0' } as const;
const FINAL = new Set(['completed', 'failed', 'cancelled']);
/** Bounds of one task flow: rounds before the task, `tasks/get` polls, the poll interval (ms). */
const MAX_ROUNDS = 8;
const MAX_POLLS = 600;
const POLL_MS = { min: 100, max: 2_000 };

/** A JSON-RPC error answer, as the timeline prints it. */
export class RpcError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(`${code} ${message}`);
    this.code = code;
  }
}

/** One 2026-07-28 request over HTTP, its result or an {@link RpcError}. */
export type Rpc = (method: string, params: Json) => Promise<Json>;

/** The requests of one client: the endpoint, its bearer token, the extension declared in every `_meta`. */
export function rpcClient(url: URL, token: string | undefined): Rpc {
  let nextId = 0;
  return async (method, params) => {
    const id = ++nextId;
    const { headers, body } = wireRequest(id, method, params, { capabilities: CAPABILITIES, clientInfo: CLIENT_INFO });
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...headers, ...(token !== undefined && { authorization: `Bearer ${token}` }) },
      body,
    });
    const reply = parseMessages(await response.text()).find((m) => m.id === id);
    if (reply === undefined) throw new RpcError(-32603, `${method}: no answer (HTTP ${response.status})`);
    const error = reply.error as Json | undefined;
    if (error !== undefined) throw new RpcError(Number(error.code), String(error.message ?? ''));
    return (reply.result ?? {}) as Json;
  };
}

export interface TaskFlowOutcome {
  ok: boolean;
  rounds: number;
  tokenBytes: number;
}

const oneLine = (text: string, max = 100): string => {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Follows the task `created` (the `CreateTaskResult`) to its end: polls `tasks/get`, prints each new status or
 * status message, answers what it asks with one `tasks/update`. Resolves with the final `tasks/get` view.
 */
async function followTask(rpc: Rpc, created: Json, args: Json, out: (line: string) => void): Promise<Json> {
  const taskId = String(created.taskId);
  const interval = Math.min(POLL_MS.max, Math.max(POLL_MS.min, Number(created.pollIntervalMs ?? 500)));
  let last = '';
  for (let poll = 0; poll < MAX_POLLS; poll++) {
    const view = await rpc('tasks/get', { taskId });
    const status = String(view.status);
    const line = `${status}${typeof view.statusMessage === 'string' ? `: ${view.statusMessage}` : ''}`;
    if (line !== last) out(`     ↳ ${oneLine(line)}`);
    last = line;
    if (FINAL.has(status)) return view;
    if (status === 'input_required') {
      const requests = (view.inputRequests ?? {}) as Record<string, Json>;
      const inputResponses = Object.fromEntries(Object.entries(requests).map(([key, request]) => [key, scriptedAnswer(request, args)]));
      out(
        `     ↳ answers ${Object.entries(requests)
          .map(([key, request]) => describeQuestion(key, request))
          .join(', ')} with tasks/update`,
      );
      await rpc('tasks/update', { taskId, inputResponses });
      continue;
    }
    await sleep(interval);
  }
  throw new Error(`task ${taskId} still running after ${MAX_POLLS} polls`);
}

/** A tool that becomes a task (`rollout`): its MRTR rounds, then the task to its end; prints its timeline. */
export async function runTaskFlow(rpc: Rpc, target: Target, out: (line: string) => void): Promise<TaskFlowOutcome> {
  const { args } = target;
  out(`${target.kind} ${target.name} ${JSON.stringify(args)}  (declares ${TASKS_EXTENSION})`);
  const started = performance.now();
  let tokenBytes = 0;
  let extra: Json = {};
  for (let round = 1; round <= MAX_ROUNDS; round++) {
    const t0 = performance.now();
    try {
      const result = await rpc('tools/call', { name: target.name, arguments: args, ...extra });
      const ms = Math.round(performance.now() - t0);
      if (result.resultType === 'task') {
        out(
          `  ${round}  → task ${String(result.taskId).slice(0, 8)}… (${String(result.status)}; tasks/get every ${String(result.pollIntervalMs)} ms)  ${ms} ms`,
        );
        const done = await followTask(rpc, result, args, out);
        const failed = done.status !== 'completed' || (done.result as Json | undefined)?.isError === true;
        const text = done.status === 'completed' ? resultText((done.result ?? {}) as Json) : JSON.stringify(done.error ?? done.status);
        out(`  ${failed ? '✗' : '✓'} ${String(done.status)}: ${oneLine(text)}`);
        out(`  = ${round} round(s) and a task, ${tokenBytes} state bytes in all, ${Math.round(performance.now() - started)} ms\n`);
        return { ok: !failed, rounds: round, tokenBytes };
      }
      if (result.resultType !== 'input_required') {
        out(`  ${round}  ✗ a complete result where a task was expected: ${oneLine(resultText(result))}`);
        return { ok: false, rounds: round, tokenBytes };
      }
      const requests = (result.inputRequests ?? {}) as Record<string, Json>;
      const state = typeof result.requestState === 'string' ? result.requestState : undefined;
      const view = state === undefined ? undefined : describeToken(state);
      tokenBytes += view?.bytes ?? 0;
      const asks = Object.entries(requests).map(([key, request]) => describeQuestion(key, request));
      out(
        `  ${round}  → input_required  asks ${asks.join(', ')}  ${view === undefined ? 'no state' : `state ${view.bytes} B (${view.codec}, kid ${view.kid ?? '?'})`}  ${ms} ms`,
      );
      const inputResponses = Object.fromEntries(Object.entries(requests).map(([key, request]) => [key, scriptedAnswer(request, args)]));
      extra = { inputResponses, ...(state !== undefined && { requestState: state }) };
    } catch (error) {
      out(`  ${round}  ✗ error: ${oneLine(error instanceof Error ? error.message : String(error))}`);
      return { ok: false, rounds: round, tokenBytes };
    }
  }
  out(`  ✗ still asking after ${MAX_ROUNDS} rounds\n`);
  return { ok: false, rounds: MAX_ROUNDS, tokenBytes };
}

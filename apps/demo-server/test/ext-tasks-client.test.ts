/**
 * The official tasks client, `@modelcontextprotocol/ext-tasks` (its `client` entry point), drives the demo's task
 * tools (the conformance fixtures) end to end over real HTTP: 2026-07-28, `io.modelcontextprotocol/tasks`
 * (SEP-2663). Nothing here writes JSON-RPC by hand for the tasks themselves: `session.callTool`, the execution's
 * `updates()`, `settle()` and `cancel()`, the session's `onInputRequest`, and the `TaskController` (`snapshot`,
 * `update`) make every `tools/call`, `tasks/get`, `tasks/update` and `tasks/cancel`.
 *
 * The one piece of glue is the package's own integration point for 2026-07-28: `createTaskSessionFromClient` throws
 * for a server that advertises the extension unless it gets `rawDispatch` (the host's request coordinator, which
 * owns request ids and response matching) and `v2RequestFraming` (the `_meta` values the SDK client frames its own
 * requests with). It routes `tools/call` and `tasks/*` there because the SDK 2.4.0 `Client` does not know the
 * extension's wire shapes (its `request`/`callTool` reject a task handle: "Unsupported result type 'task' for
 * tools/call"); everything else (`tools/list` for the tool declarations) still goes through the SDK client. `httpCoordinator` below is that coordinator: one POST per
 * request to the demo's MCP endpoint, with the 2026-07-28 HTTP headers, answered on its own response (JSON or SSE).
 *
 * A finished task's result is read both from the terminal task view the client observed (`TaskView.raw.result`: the
 * `result` that `tasks/get` inlines) and through the package's own result decoding (`TaskController.result()` +
 * `resultFromTaskOutcome`), which validates the inlined result as a 2026-07-28 `CallToolResult` (`resultType:
 * "complete"` included; a server that left it out made every completed task settle `failed` — found here).
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  type ApplicationElicitResult,
  type ApplicationInputHandler,
  type ApplicationInputRequest,
  createApplicationInputHandler,
  createTaskSessionFromClient,
  DispatchError,
  type JsonRpcResponse,
  type RawClientDispatch,
  type ResolvedInputExchangeContext,
  resultFromTaskOutcome,
  TaskCancelledError,
  type TaskController,
  type TaskEnabledSession,
  type TaskState,
  type TaskView,
  type ToolExecution,
} from '@modelcontextprotocol/ext-tasks/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { connectClient, freshKeys, type Json, PROTOCOL_VERSION, type RunningDemo, rejection, startDemo, textOf } from './helpers.js';

const TOKEN = 'ext-tasks-token-0123456789abcdef';
const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
const CLIENT_CAPABILITIES_META = 'io.modelcontextprotocol/clientCapabilities';
const CLIENT_INFO = { name: 'mrtr-ext-tasks-e2e', version: '1.0.0' };
const CLIENT_CAPABILITIES = { elicitation: { form: {} }, extensions: { [TASKS_EXTENSION]: {} } };
/** The bound of every wait in this file (the server suggests polling every 200 ms). */
const DEADLINE_MS = 10_000;

let demo: RunningDemo;

beforeAll(async () => {
  demo = await startDemo(['--host', '127.0.0.1', '--fixtures', 'conformance', '--log', 'off'], {
    env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `ext:${TOKEN}` },
  });
});

afterAll(async () => {
  const code = await demo?.stop();
  expect(code).toBe(0);
});

function parseMessages(text: string): Json[] {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) return [JSON.parse(trimmed) as Json];
  const out: Json[] = [];
  for (const line of trimmed.split(/\r?\n/)) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data.startsWith('{')) out.push(JSON.parse(data) as Json);
  }
  return out;
}

/** A request the package handed to the coordinator (`tools/call` and `tasks/*`), as sent. */
interface Sent {
  method: string;
  params: Json;
}

/**
 * The host request coordinator `rawDispatch` asks for: it gets the request already framed by the package (its
 * `_meta` carries `v2RequestFraming` plus the tasks extension) and the per-request context (`Mcp-Name: <taskId>`
 * for `tasks/*`, timeouts); it adds the JSON-RPC id and the 2026-07-28 HTTP headers, and returns the response with
 * that id. A transport failure is a `DispatchError` (retryable for a 5xx, as the package's retry policy expects).
 * Every request it sends is recorded in `sent`.
 */
function httpCoordinator(url: string, token: string, sent: Sent[]): RawClientDispatch {
  let nextId = 1;
  return async (request, options): Promise<JsonRpcResponse> => {
    const { method, params } = request as { method: string; params?: Json };
    sent.push({ method, params: params ?? {} });
    const id = `ext-tasks-${nextId++}`;
    const context = options?.context;
    const signals = [AbortSignal.timeout(context?.requestTimeoutMs ?? DEADLINE_MS)];
    if (options?.signal !== undefined) signals.push(options.signal);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      authorization: `Bearer ${token}`,
      'mcp-protocol-version': PROTOCOL_VERSION,
      'mcp-method': method,
      ...(method === 'tools/call' && typeof params?.name === 'string' && { 'mcp-name': params.name }),
      ...context?.headers,
    };
    const response = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id, method, ...(params !== undefined && { params }) }),
      signal: AbortSignal.any(signals),
    });
    const text = await response.text();
    const reply = parseMessages(/json|event-stream/.test(response.headers.get('content-type') ?? '') ? text : '').find((m) => m.id === id);
    if (reply === undefined)
      throw new DispatchError(`HTTP ${response.status} without a response to ${method}: ${text.slice(0, 200)}`, response.status >= 500);
    if (reply.error !== undefined) return { kind: 'error', error: reply.error as never };
    return { kind: 'result', result: reply.result as never };
  };
}

/** `promise`, or a rejection naming `what` once `ms` passed (every wait in this file is bounded). */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Polls `controller.snapshot()` (a `tasks/get`) at the server's suggested interval until `done` holds, failing at
 * the deadline: the way a client that holds only a task id waits for a state.
 */
async function pollUntil(controller: TaskController, done: (view: TaskView) => boolean, what: string): Promise<TaskView> {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const view = await controller.snapshot(AbortSignal.timeout(DEADLINE_MS));
    if (done(view)) return view;
    if (Date.now() >= deadline) throw new Error(`${what}: still ${view.status} after ${DEADLINE_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, view.suggestedPollIntervalMs ?? 200));
  }
}

const TERMINAL: readonly TaskState[] = ['completed', 'failed', 'cancelled'];

/**
 * Follows an execution's own update stream (the client polling `tasks/get` at the suggested interval, answering
 * questions on the way) to the first terminal task view, recording every status seen; bounded by the deadline.
 */
async function followToEnd(execution: ToolExecution<unknown>, seen: TaskState[]): Promise<TaskView> {
  for await (const event of execution.updates(AbortSignal.timeout(DEADLINE_MS))) {
    if (event.type === 'outcome') throw new Error(`the execution settled ${event.outcome.status} before a terminal task view`);
    seen.push(event.task.status);
    if (TERMINAL.includes(event.task.status)) return event.task;
  }
  throw new Error('the update stream ended without a terminal task view');
}

/** The tool result a completed task view carries (the `result` that `tasks/get` inlines). */
const resultOf = (view: TaskView): Json => view.raw.result as Json;

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

interface TasksClient {
  client: Client;
  session: TaskEnabledSession;
  /** What the session sent through `rawDispatch`, in order. */
  sent: Sent[];
  close(): Promise<void>;
}

/** The SDK client pinned to 2026-07-28 declaring the extension, wrapped in an ext-tasks session. */
async function connectTasksClient(options: { onInputRequest?: ApplicationInputHandler['handle'] } = {}): Promise<TasksClient> {
  const transport = new StreamableHTTPClientTransport(new URL(demo.url), {
    requestInit: { headers: { authorization: `Bearer ${TOKEN}` } },
  });
  const client = new Client(CLIENT_INFO, {
    versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
    capabilities: CLIENT_CAPABILITIES as never,
  });
  await client.connect(transport);
  const sent: Sent[] = [];
  const session = createTaskSessionFromClient<void>(client, {
    endpointId: `mrtr-demo:${demo.url}`,
    rawDispatch: httpCoordinator(demo.url, TOKEN, sent),
    v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo: CLIENT_INFO, clientCapabilities: CLIENT_CAPABILITIES },
    ...(options.onInputRequest !== undefined && { onInputRequest: options.onInputRequest }),
  });
  return {
    client,
    session,
    sent,
    async close() {
      await session.close();
      await client.close();
    },
  };
}

describe('@modelcontextprotocol/ext-tasks drives the demo task tools', () => {
  it('sees the server advertise the extension: the session speaks the 2026-07-28 generation (execution, cancel, input)', async () => {
    const c = await connectTasksClient();
    try {
      expect(c.client.getServerCapabilities()?.extensions?.[TASKS_EXTENSION]).toEqual({});
      expect(c.session.capabilities).toMatchObject({ execution: true, cancellation: true, inputResponses: true });
    } finally {
      await c.close();
    }
  });

  it("rollout (the demo's own task tool): the MRTR round for the environment, then the task; the approval asked midway is answered; it completes", async () => {
    const questions: { key: string | undefined; scope: string; message: unknown }[] = [];
    const c = await connectTasksClient({
      onInputRequest: createApplicationInputHandler<void>({
        elicitation: async (request, context) => {
          const key = context.inputId;
          questions.push({ key, scope: context.scope, message: (request.params as Json).message });
          if (key === 'environment') return { action: 'accept', content: { environment: 'production' } };
          if (key === 'approve_rollout') return { action: 'accept', content: { approve: true } };
          return { action: 'decline' };
        },
        sampling: () => {
          throw new Error('only elicitation is asked');
        },
        roots: () => {
          throw new Error('only elicitation is asked');
        },
      }),
    });
    try {
      const execution = await c.session.callTool('rollout', { service: 'web' }, { task: { preference: 'require' } });
      if (execution.kind !== 'task') throw new Error(`expected a task, got ${execution.kind}`);
      const { outcome } = await execution.settle({ signal: AbortSignal.timeout(3 * DEADLINE_MS) });
      expect(outcome.status).toBe('completed');
      const result = resultFromTaskOutcome(outcome) as Json;
      expect(textOf(result)).toMatch(/^Rolled web release \S+ out to production: 10 of 10 instances\.$/);
      // The environment came in the protected round (scope "request"), the approval during the task (scope "task").
      expect(questions.map(({ key, scope }) => ({ key, scope }))).toEqual([
        { key: 'environment', scope: 'request' },
        { key: 'approve_rollout', scope: 'task' },
      ]);
      expect(questions[1]!.message).toMatch(/canary of web .* is healthy/);
      const calls = c.sent.filter((m) => m.method === 'tools/call');
      expect(calls).toHaveLength(2);
      expect(typeof calls[1]!.params.requestState).toBe('string');
    } finally {
      await c.close();
    }
  });

  it('slow_compute: callTool gets a task back, the client polls it to completed and reads its result', async () => {
    const c = await connectTasksClient();
    try {
      const execution = await c.session.callTool('slow_compute', { seconds: 1, label: 'sum' }, { task: { preference: 'require' } });
      if (execution.kind !== 'task') throw new Error(`expected a task, got ${execution.kind}`);
      // From tools/list (through the SDK client); 2026-07-28 has no per-tool `execution.taskSupport`: the server
      // decides per request whether a call becomes a task.
      expect(execution.declaration?.name).toBe('slow_compute');
      expect(execution.handle.taskId).toMatch(/^[A-Za-z0-9_-]{22}$/);
      const seen: TaskState[] = [];
      const done = await followToEnd(execution, seen);
      expect(seen[0]).toBe('working');
      expect(done).toMatchObject({ taskId: execution.handle.taskId, status: 'completed', suggestedPollIntervalMs: 200 });
      expect(textOf(resultOf(done))).toBe('Computed sum after 1s');
      // A second, non-owning controller reads the same final state (one more tasks/get).
      const again = await c.session.task(execution.handle.taskId).snapshot(AbortSignal.timeout(DEADLINE_MS));
      expect(again.status).toBe('completed');
      expect(resultOf(again)).toEqual(resultOf(done));
      // The package's own decoding of the result (the base CallToolResult schema) accepts it.
      const outcome = await within(c.session.task(execution.handle.taskId).result(), DEADLINE_MS, 'the decoded result');
      expect(outcome.status).toBe('completed');
      expect(textOf(resultFromTaskOutcome(outcome) as Json)).toBe('Computed sum after 1s');
      // On the wire: one tools/call, then tasks/get polls for this task, each declaring the extension in its `_meta`.
      expect(c.sent[0]).toMatchObject({ method: 'tools/call', params: { name: 'slow_compute', arguments: { seconds: 1, label: 'sum' } } });
      const polls = c.sent.slice(1);
      expect(polls.length).toBeGreaterThanOrEqual(2);
      for (const { method, params } of polls) {
        expect(method).toBe('tasks/get');
        expect(params).toMatchObject({
          taskId: execution.handle.taskId,
          _meta: { [CLIENT_CAPABILITIES_META]: { extensions: { [TASKS_EXTENSION]: {} } } },
        });
      }
    } finally {
      await c.close();
    }
  });

  it.each([
    [true, 'Deleted report.txt'],
    [false, 'Kept report.txt'],
  ])(
    'confirm_delete (confirm: %s): input_required during the task; the onInputRequest answer goes back with tasks/update; the result reflects it',
    async (confirm, expected) => {
      const asked = deferred<{ request: ApplicationInputRequest; context: ResolvedInputExchangeContext }>();
      const answer = deferred<ApplicationElicitResult>();
      const unexpected = () => {
        throw new Error('only elicitation is asked');
      };
      const c = await connectTasksClient({
        onInputRequest: createApplicationInputHandler<void>({
          elicitation: async (request, context) => {
            asked.resolve({ request, context });
            return await answer.promise;
          },
          sampling: unexpected,
          roots: unexpected,
        }),
      });
      try {
        const execution = await c.session.callTool('confirm_delete', { filename: 'report.txt' }, { task: { preference: 'require' } });
        if (execution.kind !== 'task') throw new Error(`expected a task, got ${execution.kind}`);
        const taskId = execution.handle.taskId;
        const seen: TaskState[] = [];
        const ending = followToEnd(execution, seen);
        const { request, context } = await within(asked.promise, DEADLINE_MS, 'the question of confirm_delete');
        expect(request).toMatchObject({
          kind: 'elicitation',
          params: {
            message: 'Delete report.txt?',
            requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
          },
        });
        expect(context).toMatchObject({ scope: 'task', delivery: 'task-update', taskId, inputId: 'confirm' });
        // While the application thinks, the server holds the task at input_required with the question listed (a
        // tasks/get through a second, non-owning controller).
        const waiting = await c.session.task(taskId).snapshot(AbortSignal.timeout(DEADLINE_MS));
        expect(waiting.status).toBe('input_required');
        expect(Object.keys(waiting.raw.inputRequests as Json)).toEqual(['confirm']);

        answer.resolve({ action: 'accept', content: { confirm } });
        const done = await ending;
        expect(seen).toContain('input_required');
        expect(done.status).toBe('completed');
        expect(textOf(resultOf(done))).toBe(expected);
        const updates = c.sent.filter((m) => m.method === 'tasks/update');
        expect(updates).toHaveLength(1);
        expect(updates[0]!.params).toMatchObject({ taskId, inputResponses: { confirm: { action: 'accept', content: { confirm } } } });
      } finally {
        await c.close();
      }
    },
  );

  it('multi_input: a client holding only the task id answers both questions with TaskController.update (one tasks/update) and polls to the result', async () => {
    const c = await connectTasksClient();
    try {
      const execution = await c.session.callTool('multi_input', {}, { task: { preference: 'require' } });
      if (execution.kind !== 'task') throw new Error(`expected a task, got ${execution.kind}`);
      const taskId = execution.handle.taskId;
      // Releases the task without cancelling it: from here on only the controller below talks about it.
      await execution.detach();
      const controller = c.session.task(taskId);
      const waiting = await pollUntil(
        controller,
        (view) => view.status === 'input_required' && Object.keys(view.raw.inputRequests as Json).length === 2,
        'multi_input asking both questions',
      );
      expect(waiting.raw.inputRequests).toMatchObject({
        first: { method: 'elicitation/create', params: { message: 'First input?' } },
        second: { method: 'elicitation/create', params: { message: 'Second input?' } },
      });
      await controller.update(
        { first: { action: 'accept', content: { name: 'Ann', confirm: true } }, second: { action: 'decline' } },
        AbortSignal.timeout(DEADLINE_MS),
      );
      expect(c.sent.filter((m) => m.method === 'tasks/update')).toEqual([
        expect.objectContaining({
          params: expect.objectContaining({
            taskId,
            inputResponses: expect.objectContaining({ first: expect.anything(), second: expect.anything() }),
          }),
        }),
      ]);
      const done = await pollUntil(controller, (view) => TERMINAL.includes(view.status), 'multi_input finishing');
      expect(done.status).toBe('completed');
      expect(textOf(resultOf(done))).toBe('Inputs: Ann, decline');
    } finally {
      await c.close();
    }
  });

  it('slow_compute (60 s): execution.cancel() sends tasks/cancel; the outcome and the server both say cancelled', async () => {
    const c = await connectTasksClient();
    try {
      const started = Date.now();
      const execution = await c.session.callTool('slow_compute', { seconds: 60 }, { task: { preference: 'require' } });
      if (execution.kind !== 'task') throw new Error(`expected a task, got ${execution.kind}`);
      const controller = c.session.task(execution.handle.taskId);
      expect((await controller.snapshot(AbortSignal.timeout(DEADLINE_MS))).status).toBe('working');

      await execution.cancel(AbortSignal.timeout(DEADLINE_MS));
      const { outcome } = await execution.settle({ signal: AbortSignal.timeout(DEADLINE_MS) });
      expect(outcome.status).toBe('cancelled');
      expect(() => resultFromTaskOutcome(outcome)).toThrow(TaskCancelledError);
      expect(c.sent.filter((m) => m.method === 'tasks/cancel').map((m) => m.params.taskId)).toEqual([execution.handle.taskId]);
      expect((await controller.snapshot(AbortSignal.timeout(DEADLINE_MS))).status).toBe('cancelled');
      expect(Date.now() - started).toBeLessThan(DEADLINE_MS);
    } finally {
      await c.close();
    }
  });

  it('protocol_error_job: a task whose work throws settles failed with the JSON-RPC error the server reports', async () => {
    const c = await connectTasksClient();
    try {
      const execution = await c.session.callTool('protocol_error_job', {}, { task: { preference: 'require' } });
      expect(execution.kind).toBe('task');
      const { outcome } = await execution.settle({ signal: AbortSignal.timeout(DEADLINE_MS) });
      if (outcome.status !== 'failed') throw new Error(`expected failed, got ${outcome.status}`);
      expect(outcome.error.code).toBe(-32603);
      expect(outcome.error.message).toBe('protocol_error_job: internal failure (on purpose)');
      expect(outcome.task?.status).toBe('failed');
    } finally {
      await c.close();
    }
  });
});

describe('a client that does not declare the extension', () => {
  it('gets -32021 naming the extension for a task-required tool; a task-optional tool runs synchronously', async () => {
    const plain = await connectClient(demo.url, { token: TOKEN, capabilities: { elicitation: { form: {} } } });
    try {
      const error = await rejection(plain.client.request({ method: 'tools/call', params: { name: 'failing_job', arguments: {} } }));
      expect(error.code).toBe(-32021);
      expect(error.message).toContain(TASKS_EXTENSION);
      expect(error.data).toMatchObject({ requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } });

      const sync = (await plain.client.request({
        method: 'tools/call',
        params: { name: 'slow_compute', arguments: { seconds: 0 } },
      })) as Json;
      expect(sync).not.toHaveProperty('taskId');
      expect(textOf(sync)).toBe('Computed result after 0s');
    } finally {
      await plain.close();
    }
  });
});

import { type AuthInfo, McpServer, ProtocolError } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMemoryStore, createMemoryTaskStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import * as z from 'zod/v4';
import { createHttpHandler, type HttpHandlerOptions } from '../src/http/index.js';
import { createMrtr, type MrtrOptions } from '../src/index.js';
import { TASKS_EXTENSION, type TaskHandle, type TaskRecord, type TaskStore } from '../src/tasks/index.js';

/** A promise settled from outside (the tests never wait on wall-clock windows). */
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const CONFIRM = {
  message: 'Approve?',
  requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
} as const;
const NAME = {
  message: 'Name?',
  requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
} as const;

interface Setup {
  store?: TaskStore;
  options?: Partial<MrtrOptions>;
  /** A clock shared with another setup (two instances of one fleet). */
  clock?: { now(): number; advance(ms: number): void };
  /** Extra task options (watchIntervalMs, leaseMs). */
  tasks?: Partial<NonNullable<MrtrOptions['tasks']>>;
  /** Options of the HTTP handler (trustProxy). */
  http?: HttpHandlerOptions;
}

const fakeClock = () => {
  let t = 1_700_000_000_000;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
};

function setup({ store: given, options = {}, clock = fakeClock(), tasks = {}, http = {} }: Setup = {}) {
  const { now } = clock;
  const store = given ?? createMemoryTaskStore({ now });
  const gates = new Map<string, ReturnType<typeof deferred>>();
  const gate = (label: string) => {
    let d = gates.get(label);
    if (d === undefined) gates.set(label, (d = deferred()));
    return d;
  };
  const mrtr = createMrtr({
    keys: KeyRing.generate(),
    codec: createHmacCodec,
    audience: 'https://tasks.test',
    tasks: { store, ttlMs: 60_000, pollIntervalMs: 500, now, ...tasks },
    ...options,
  });
  const build = () => {
    const server = new McpServer({ name: 'tasks-test', version: '1.0.0' }, { ...mrtr.serverOptions });
    server.registerTool('greet', { inputSchema: z.object({ name: z.string() }) }, async ({ name }) => ({
      content: [{ type: 'text', text: `Hello, ${name}!` }],
    }));
    mrtr.registerTool(server, 'job', { task: 'optional', inputSchema: z.object({ label: z.string() }) }, async ({ label }, _ctx, need) =>
      need.task(async (task) => {
        await gate(label).promise;
        task.signal.throwIfAborted();
        if (label.startsWith('tool-error')) return { content: [{ type: 'text', text: 'it broke' }], isError: true };
        if (label.startsWith('protocol-error')) throw new ProtocolError(-32603, 'The job crashed');
        if (label.startsWith('secret')) throw new Error('db password is hunter2');
        return { content: [{ type: 'text', text: `done ${label}` }] };
      }),
    );
    mrtr.registerTool(server, 'required_job', { task: 'required' }, async (_args, _ctx, need) =>
      need.task(async () => ({ content: [{ type: 'text', text: 'ok' }] })),
    );
    // Ordinary protected rounds first, then a task whose result reflects the answers.
    mrtr.registerTool(server, 'named_task', { task: 'required' }, async (_args, _ctx, need) => {
      const name = need.elicit('user_name', NAME);
      if (name === undefined) return need.ask();
      if (name.action !== 'accept') return need.fail('no name');
      return need.task(async () => ({ content: [{ type: 'text', text: `Task for ${name.content.name}` }] }));
    });
    // Input during the task: two questions at once, then one more (a new key).
    mrtr.registerTool(server, 'approve', { task: 'optional', taskInput: ['elicitation.form'] }, async (_args, _ctx, need) =>
      need.task(async (task) => {
        const [a, b] = await Promise.all([task.elicit('first', CONFIRM), task.elicit('second', NAME)]);
        const again = await task.elicit('third', CONFIRM);
        const text = [a, b, again].map((x) => (x.action === 'accept' ? JSON.stringify(x.content) : x.action)).join(' ');
        return { content: [{ type: 'text', text }] };
      }),
    );
    // Waits for one answer, or for its signal (a cancel that reached any instance).
    mrtr.registerTool(server, 'watched', { task: 'required', taskInput: ['elicitation.form'] }, async (_args, _ctx, need) =>
      need.task(async (task) => {
        task.signal.addEventListener('abort', () => gate('watched-aborted').resolve());
        const answer = await task.elicit('go', CONFIRM);
        return { content: [{ type: 'text', text: answer.action === 'accept' ? `go=${answer.content.confirm}` : answer.action }] };
      }),
    );
    mrtr.registerTool(server, 'progress', { task: 'optional' }, async (_args, _ctx, need) =>
      need.task(async (task) => {
        await task.status('step 1 of 2');
        await gate('progress-1').promise;
        await task.status('step 2 of 2');
        await gate('progress-2').promise;
        await expect(task.status('x'.repeat(1_025))).rejects.toThrow(TypeError);
        return { content: [{ type: 'text', text: 'done' }] };
      }),
    );
    // Every kind of input during a task, at once; what the client can answer decides what is asked.
    mrtr.registerTool(server, 'gather', { task: 'optional' }, async (_args, _ctx, need) =>
      need.task(async (task) => {
        const kinds = (['elicitation.form', 'elicitation.url', 'sampling', 'sampling.tools', 'roots'] as const).filter((k) => task.can(k));
        await task.status(`can: ${kinds.join(',')}`);
        if (!task.can('sampling')) return { content: [{ type: 'text', text: 'no sampling: summary skipped' }] };
        const [consent, summary, roots] = await Promise.all([
          task.elicitUrl('consent', { message: 'Link your account', url: 'https://accounts.example/link' }),
          task.sample('summary', { messages: [{ role: 'user', content: { type: 'text', text: 'Summarise' } }], maxTokens: 50 }),
          task.roots('roots'),
        ]);
        const said = Array.isArray(summary.content) ? 'blocks' : summary.content.type === 'text' ? summary.content.text : '?';
        return { content: [{ type: 'text', text: `${consent.action}|${said}|${roots.map((r) => r.uri).join(',')}` }] };
      }),
    );
    // Asks whatever kind it is told to, without looking at can(): `ask_kind` lists none of them in taskInput (every
    // ask is a bug in the tool), `ask_listed` all of them (a request that cannot be asked one is refused up front).
    const askKind = async (task: TaskHandle, kind: string) => {
      if (kind === 'form') await task.elicit('q', CONFIRM);
      else if (kind === 'url') await task.elicitUrl('q', { message: 'Open', url: 'https://example.com/x' });
      else if (kind === 'tools')
        await task.sample('q', { messages: [], maxTokens: 5, tools: [{ name: 't', inputSchema: { type: 'object' } }] });
      else if (kind === 'roots') await task.roots('q');
      else if (kind === 'same-key') {
        await task.elicit('k', CONFIRM);
        await task.roots('k');
      }
      return { content: [{ type: 'text' as const, text: 'asked' }] };
    };
    mrtr.registerTool(server, 'ask_kind', { task: 'optional', inputSchema: z.object({ kind: z.string() }) }, async ({ kind }, _ctx, need) =>
      need.task((task) => askKind(task, kind)),
    );
    for (const [kind, taskInput] of [
      ['form', ['elicitation.form']],
      ['url', ['elicitation.url']],
      ['tools', ['sampling.tools']],
      ['roots', ['roots']],
      ['same-key', ['elicitation.form', 'roots']],
    ] as const) {
      mrtr.registerTool(server, `ask_listed_${kind}`, { task: 'optional', taskInput }, async (_args, _ctx, need) =>
        need.task((task) => askKind(task, kind)),
      );
    }
    // An optional task tool whose rounds come first, then a task that asks for approval.
    mrtr.registerTool(server, 'named_approval', { task: 'optional', taskInput: ['elicitation.form'] }, async (_args, _ctx, need) => {
      const name = need.elicit('user_name', NAME);
      if (name === undefined) return need.ask();
      return need.task(async (task) => {
        const go = await task.elicit('approve', CONFIRM);
        return { content: [{ type: 'text', text: go.action }] };
      });
    });
    mrtr.registerTool(server, 'reuse_key', { task: 'optional', taskInput: ['elicitation.form'] }, async (_args, _ctx, need) =>
      need.task(async (task) => {
        await task.elicit('k', CONFIRM);
        await task.elicit('k', CONFIRM);
        return { content: [{ type: 'text', text: 'unreachable' }] };
      }),
    );
    return server;
  };
  const handler = createHttpHandler(() => build(), { legacy: 'reject', ...http });
  let id = 0;
  const call = async (
    method: string,
    params: Record<string, unknown>,
    opts: {
      sub?: string;
      tasks?: boolean;
      elicit?: boolean;
      caps?: Record<string, unknown>;
      /** The peer's address (`remoteAddress`). @default '192.0.2.1' */
      address?: string;
      forwardedFor?: string;
    } = {},
  ) => {
    const { sub = 'alice', tasks = true, elicit = true, address = '192.0.2.1' } = opts;
    const caps: Record<string, unknown> = { ...opts.caps };
    if (elicit && caps.elicitation === undefined) caps.elicitation = { form: {} };
    if (tasks) caps.extensions = { [TASKS_EXTENSION]: {} };
    const name = typeof params.name === 'string' ? params.name : typeof params.taskId === 'string' ? params.taskId : undefined;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(name !== undefined && { 'mcp-name': name }),
      ...(opts.forwardedFor !== undefined && { 'x-forwarded-for': opts.forwardedFor }),
    };
    const body = {
      jsonrpc: '2.0',
      id: ++id,
      method,
      params: {
        ...params,
        _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': caps },
      },
    };
    const authInfo: AuthInfo = { token: 't', clientId: 'same-client', scopes: [], extra: { sub } };
    const response = await handler.fetch(new Request('http://test.local/mcp', { method: 'POST', headers, body: JSON.stringify(body) }), {
      authInfo,
      remoteAddress: address,
    });
    // biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
    const json = (await response.json()) as { result?: Record<string, any>; error?: { code: number; message: string; data?: any } };
    return json;
  };
  const ok = async (method: string, params: Record<string, unknown>, opts?: Parameters<typeof call>[2]) => {
    const json = await call(method, params, opts);
    if (json.error !== undefined) throw new Error(`${method}: ${json.error.code} ${json.error.message}`);
    return json.result!;
  };
  /** Lets the background work run until it waits again (it only awaits the memory store and the gates: no timers). */
  const settle = async () => {
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
  };
  return {
    call,
    ok,
    gate,
    settle,
    advance: clock.advance,
  };
}

/** Polls `read` until `done` holds; bounded in count (a loaded machine only makes it slower, never wrong). */
async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 2_000; i++) {
    const value = await read();
    if (done(value)) return value;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A store that stops answering on `kill()`: the process running a task died with its work half done. */
function mortal(store: TaskStore) {
  let dead = false;
  const never = new Promise<never>(() => undefined);
  const wrapped: TaskStore = {
    create: (record) => (dead ? never : store.create(record)),
    get: (id) => (dead ? never : store.get(id)),
    update: (id, change) => (dead ? never : store.update(id, change)),
  };
  return {
    store: wrapped,
    kill: () => {
      dead = true;
    },
  };
}

/**
 * A 2025-era client's session on `handler`, spoken on the wire: its `initialize` (declaring `capabilities`) answered,
 * then `post` for its further requests on that session.
 */
async function legacySession(
  handler: { fetch(request: Request, extra?: { authInfo?: AuthInfo }): Promise<Response> },
  capabilities: Record<string, unknown>,
) {
  const authInfo: AuthInfo = { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } };
  let session: string | undefined;
  let id = 0;
  const post = async (method: string, params?: Record<string, unknown>) => {
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    if (session !== undefined) Object.assign(headers, { 'mcp-session-id': session, 'mcp-protocol-version': '2025-11-25' });
    const body = method.startsWith('notifications/') ? { jsonrpc: '2.0', method } : { jsonrpc: '2.0', id: ++id, method, params };
    const response = await handler.fetch(new Request('http://t/mcp', { method: 'POST', headers, body: JSON.stringify(body) }), {
      authInfo,
    });
    session ??= response.headers.get('mcp-session-id') ?? undefined;
    const data = /^data: (.*)$/m.exec(await response.text())?.[1];
    // biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
    return data === undefined ? undefined : (JSON.parse(data) as any);
  };
  const initialized = await post('initialize', { protocolVersion: '2025-11-25', capabilities, clientInfo: { name: 'c', version: '1' } });
  await post('notifications/initialized');
  return { initialized, post };
}

describe('tasks extension', () => {
  it('advertises the extension in server/discover when a task tool is registered', async () => {
    const s = setup();
    const discover = await s.ok('server/discover', {});
    expect(discover.capabilities.extensions).toEqual({ [TASKS_EXTENSION]: {} });
    expect(discover.capabilities.tasks).toBeUndefined();
  });

  it('a task tool returns a flat CreateTaskResult (no requestState, no inputRequests) and tasks/get inlines the result', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'job', arguments: { label: 'a' } });
    expect(created).toMatchObject({ resultType: 'task', status: 'working', ttlMs: 60_000, pollIntervalMs: 500 });
    expect(created.taskId).toMatch(/^[A-Za-z0-9_-]{22}$/); // 128 random bits
    expect(created.createdAt).toBe(new Date(1_700_000_000_000).toISOString());
    for (const key of ['requestState', 'inputRequests', 'result', 'error', 'task', 'ttl', 'pollInterval'])
      expect(created).not.toHaveProperty(key);
    const working = await s.ok('tasks/get', { taskId: created.taskId });
    expect(working).toMatchObject({ resultType: 'complete', taskId: created.taskId, status: 'working' });
    expect(working).not.toHaveProperty('result');
    expect(working).not.toHaveProperty('requestState');
    s.gate('a').resolve();
    await s.settle();
    const done = await s.ok('tasks/get', { taskId: created.taskId });
    expect(done).toMatchObject({ resultType: 'complete', status: 'completed', result: { content: [{ type: 'text', text: 'done a' }] } });
    expect(done).not.toHaveProperty('requestState');
    expect(done.result.resultType).toBe('complete'); // a CallToolResult of the 2026-07-28 base
  });

  it('a tool error completes with isError; a protocol error fails with a JSON-RPC error; an internal error hides its message', async () => {
    const s = setup();
    const [toolError, protocolError, secret] = await Promise.all(
      ['tool-error', 'protocol-error', 'secret'].map((label) => s.ok('tools/call', { name: 'job', arguments: { label } })),
    );
    for (const label of ['tool-error', 'protocol-error', 'secret']) s.gate(label).resolve();
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: toolError!.taskId })).toMatchObject({ status: 'completed', result: { isError: true } });
    const failed = await s.ok('tasks/get', { taskId: protocolError!.taskId });
    expect(failed).toMatchObject({ resultType: 'complete', status: 'failed', error: { code: -32603, message: 'The job crashed' } });
    expect(failed).not.toHaveProperty('result');
    const hidden = await s.ok('tasks/get', { taskId: secret!.taskId });
    expect(hidden.error).toEqual({ code: -32603, message: 'Internal error' });
  });

  it('without the extension an optional task tool runs synchronously; a required one answers -32021 naming the extension', async () => {
    const s = setup();
    s.gate('sync').resolve();
    const sync = await s.ok('tools/call', { name: 'job', arguments: { label: 'sync' } }, { tasks: false });
    expect(sync).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'done sync' }] });
    expect(sync).not.toHaveProperty('taskId');
    const required = await s.call('tools/call', { name: 'required_job', arguments: {} }, { tasks: false });
    expect(required.error?.code).toBe(-32021);
    expect(required.error?.data?.requiredCapabilities?.extensions).toEqual({ [TASKS_EXTENSION]: {} });
    // A sync tool never becomes a task, even with the extension (and a legacy `task` hint).
    const greet = await s.ok('tools/call', { name: 'greet', arguments: { name: 'Ann' }, task: { ttl: 1000 } });
    expect(greet.resultType).toBe('complete');
    expect(greet).not.toHaveProperty('taskId');
  });

  it('tasks/get, tasks/update and tasks/cancel without the extension answer -32021; tasks/result and tasks/list -32601', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'job', arguments: { label: 'gated' } });
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      const answer = await s.call(method, { taskId: created.taskId, inputResponses: {} }, { tasks: false });
      expect(answer.error?.code, method).toBe(-32021);
    }
    for (const method of ['tasks/result', 'tasks/list']) {
      const answer = await s.call(method, method === 'tasks/list' ? {} : { taskId: created.taskId });
      expect(answer.error?.code, method).toBe(-32601);
    }
  });

  it('an unknown task id and another user’s task get the same -32602; cancel is idempotent and settles to cancelled', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'job', arguments: { label: 'mine' } });
    const unknown = await s.call('tasks/get', { taskId: 'no-such-task' });
    expect(unknown.error?.code).toBe(-32602);
    for (const method of ['tasks/get', 'tasks/update', 'tasks/cancel']) {
      const other = await s.call(method, { taskId: created.taskId, inputResponses: {} }, { sub: 'mallory' });
      expect(other.error, method).toEqual(unknown.error);
    }
    // Mallory's cancel did nothing.
    expect((await s.ok('tasks/get', { taskId: created.taskId })).status).toBe('working');
    expect(await s.ok('tasks/cancel', { taskId: created.taskId })).toEqual({ resultType: 'complete', _meta: expect.anything() });
    expect(await s.ok('tasks/cancel', { taskId: created.taskId })).toEqual({ resultType: 'complete', _meta: expect.anything() });
    s.gate('mine').resolve(); // the work finishing later does not change a cancelled task
    await s.settle();
    const cancelled = await s.ok('tasks/get', { taskId: created.taskId });
    expect(cancelled.status).toBe('cancelled');
    expect(cancelled).not.toHaveProperty('result');
  });

  it('bounds the live tasks of one principal (-32600), not of other principals; finished tasks free the slot', async () => {
    const s = setup({ store: createMemoryTaskStore({ maxLivePerPrincipal: 2, now: () => 1_700_000_000_000 }) });
    await s.ok('tools/call', { name: 'job', arguments: { label: 'b1' } });
    await s.ok('tools/call', { name: 'job', arguments: { label: 'b2' } });
    const third = await s.call('tools/call', { name: 'job', arguments: { label: 'b3' } });
    expect(third.error?.code).toBe(-32600);
    expect(third.error?.message).toMatch(/Too many tasks/);
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'b4' } }, { sub: 'bob' })).resultType).toBe('task');
    s.gate('b1').resolve();
    await s.settle();
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'b5' } })).resultType).toBe('task');
  });

  it('bounds the tasks one principal keeps, finished ones included, until they expire; others are unaffected', async () => {
    let t = 1_700_000_000_000;
    const store = createMemoryTaskStore({ maxLivePerPrincipal: 2, maxPerPrincipal: 3, now: () => t });
    const record = (taskId: string, principal: string, status: TaskRecord['status'] = 'completed'): TaskRecord => ({
      taskId,
      principal,
      status,
      createdAt: t,
      lastUpdatedAt: t,
      ttlMs: 60_000,
      inputRequests: {},
      askedKeys: [],
    });
    // Finished at once, then again: finished tasks stay readable for their ttlMs, so they count toward the bound.
    for (const id of ['a1', 'a2', 'a3']) await store.create(record(id, 'sub:alice'));
    await expect(store.create(record('a4', 'sub:alice'))).rejects.toMatchObject({ code: 'ERR_TASK_LIMIT', limit: 'kept', max: 3 });
    await store.create(record('b1', 'sub:bob'));
    t += 30_000;
    await store.update('a3', (r) => ({ ...r, lastUpdatedAt: t }));
    t += 30_000;
    // a1 and a2 expired (60 s after their last update); a3 was updated 30 s ago and is still readable.
    expect(await store.get('a1')).toBeUndefined();
    expect((await store.get('a3'))?.taskId).toBe('a3');
    await store.create(record('a5', 'sub:alice', 'working'));
    await store.create(record('a6', 'sub:alice', 'working'));
    await expect(store.create(record('a7', 'sub:alice', 'working'))).rejects.toMatchObject({ code: 'ERR_TASK_LIMIT' });
    // A live task that finishes frees its live slot (not its kept one until it expires).
    await store.update('a5', (r) => ({ ...r, status: 'completed', lastUpdatedAt: t }));
    await expect(store.create(record('a7', 'sub:alice', 'working'))).rejects.toMatchObject({ code: 'ERR_TASK_LIMIT', limit: 'kept' });
    t += 30_000; // a3 expires
    await store.create(record('a7', 'sub:alice', 'working'));
    await expect(store.update('a7', (r) => ({ ...r, principal: 'sub:mallory' }))).rejects.toThrow(TypeError);
  });

  it('validates the memory store options with RangeError/TypeError', () => {
    expect(() => createMemoryTaskStore({ maxLivePerPrincipal: 0 })).toThrow(RangeError);
    expect(() => createMemoryTaskStore({ maxLivePerPrincipal: 8, maxPerPrincipal: 4 })).toThrow(RangeError);
    expect(() => createMemoryTaskStore({ maxTasks: 1.5 })).toThrow(TypeError);
    expect(() => createMemoryTaskStore({ now: 1 as never })).toThrow(TypeError);
  });

  it('a task stays readable for its ttlMs after its last change, and is unknown after', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'job', arguments: { label: 'ttl' } });
    s.gate('ttl').resolve();
    await s.settle();
    s.advance(59_999);
    expect((await s.ok('tasks/get', { taskId: created.taskId })).status).toBe('completed');
    s.advance(1);
    expect((await s.call('tasks/get', { taskId: created.taskId })).error?.code).toBe(-32602);
  });

  it('MRTR rounds before the task are ordinary sealed input_required results; the task result reflects the answers', async () => {
    const s = setup({ options: { store: createMemoryStore() } });
    const round1 = await s.ok('tools/call', { name: 'named_task', arguments: {} });

    expect(round1.resultType).toBe('input_required');
    expect(typeof round1.requestState).toBe('string');
    expect(round1).not.toHaveProperty('taskId');
    expect(Object.keys(round1.inputRequests)).toEqual(['user_name']);
    const round2 = await s.ok('tools/call', {
      name: 'named_task',
      arguments: {},
      inputResponses: { user_name: { action: 'accept', content: { name: 'Alice' } } },
      requestState: round1.requestState,
    });
    expect(round2.resultType).toBe('task');
    expect(round2).not.toHaveProperty('requestState');
    expect(round2).not.toHaveProperty('inputRequests');
    await s.settle();
    const done = await s.ok('tasks/get', { taskId: round2.taskId });
    expect(done).toMatchObject({ status: 'completed', result: { content: [{ text: 'Task for Alice' }] } });
    // The round's state is single use (with a replay store): an identical retry gets the same task, other
    // answers are refused; neither creates a second task.
    const retry = await s.ok('tools/call', {
      name: 'named_task',
      arguments: {},
      inputResponses: { user_name: { action: 'accept', content: { name: 'Alice' } } },
      requestState: round1.requestState,
    });
    expect(retry.taskId).toBe(round2.taskId);
    const replay = await s.call('tools/call', {
      name: 'named_task',
      arguments: {},
      inputResponses: { user_name: { action: 'accept', content: { name: 'Eve' } } },
      requestState: round1.requestState,
    });
    expect(replay.error?.code).toBe(-32602);
    // A tampered state is rejected before any task is created.
    const tampered = await s.call('tools/call', {
      name: 'named_task',
      arguments: {},
      inputResponses: { user_name: { action: 'accept', content: { name: 'Eve' } } },
      requestState: `${round1.requestState}x`,
    });
    expect(tampered.error?.code).toBe(-32602);
  });

  it('input during a task: tasks/get lists outstanding inputRequests, tasks/update acks, takes partial answers and ignores others', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'approve', arguments: {} });
    await s.settle();
    const waiting = await s.ok('tasks/get', { taskId: created.taskId });
    expect(waiting.status).toBe('input_required');
    expect(Object.keys(waiting.inputRequests).sort()).toEqual(['first', 'second']);
    expect(waiting.inputRequests.first).toMatchObject({ method: 'elicitation/create', params: { message: 'Approve?' } });
    expect(waiting).not.toHaveProperty('requestState');
    // Unknown keys and invalid answers are ignored; the ack is an empty complete result either way.
    const ack = await s.ok('tasks/update', {
      taskId: created.taskId,
      inputResponses: { nope: { action: 'accept', content: {} }, second: { action: 'accept', content: { name: 42 } } },
    });
    expect(ack).toEqual({ resultType: 'complete', _meta: expect.anything() });
    expect(Object.keys((await s.ok('tasks/get', { taskId: created.taskId })).inputRequests).sort()).toEqual(['first', 'second']);
    // A partial answer: only the other key stays outstanding.
    await s.ok('tasks/update', { taskId: created.taskId, inputResponses: { first: { action: 'accept', content: { confirm: true } } } });
    const partial = await s.ok('tasks/get', { taskId: created.taskId });
    expect(partial.status).toBe('input_required');
    expect(Object.keys(partial.inputRequests)).toEqual(['second']);
    // Another user cannot answer.
    const stolen = await s.call(
      'tasks/update',
      { taskId: created.taskId, inputResponses: { second: { action: 'accept', content: { name: 'M' } } } },
      { sub: 'mallory' },
    );
    expect(stolen.error?.code).toBe(-32602);
    await s.ok('tasks/update', { taskId: created.taskId, inputResponses: { second: { action: 'accept', content: { name: 'Zed' } } } });
    await s.settle();
    const third = await s.ok('tasks/get', { taskId: created.taskId });
    expect(Object.keys(third.inputRequests)).toEqual(['third']);
    // An answer to an already answered key is not outstanding any more: ignored.
    await s.ok('tasks/update', { taskId: created.taskId, inputResponses: { first: { action: 'decline' }, third: { action: 'decline' } } });
    await s.settle();
    const done = await s.ok('tasks/get', { taskId: created.taskId });
    expect(done.status).toBe('completed');
    expect(done.result.content[0].text).toBe('{"confirm":true} {"name":"Zed"} decline');
  });

  it('every kind of input during a task: URL elicitation, sampling and roots listed, each answer checked by its kind', async () => {
    const s = setup();
    const caps = { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} };
    const created = await s.ok('tools/call', { name: 'gather', arguments: {} }, { caps });
    await s.settle();
    const waiting = await s.ok('tasks/get', { taskId: created.taskId }, { caps });
    expect(waiting.statusMessage).toBe('can: elicitation.form,elicitation.url,sampling,roots');
    expect(waiting.status).toBe('input_required');
    expect(waiting.inputRequests).toEqual({
      consent: {
        method: 'elicitation/create',
        params: { mode: 'url', message: 'Link your account', url: 'https://accounts.example/link' },
      },
      summary: {
        method: 'sampling/createMessage',
        params: { messages: [{ role: 'user', content: { type: 'text', text: 'Summarise' } }], maxTokens: 50 },
      },
      roots: { method: 'roots/list' },
    });
    // Answers of the wrong shape for their question are ignored: a form answer to sampling, a root that is not
    // file://, a URL answer with an unknown action. Every question stays outstanding.
    await s.ok(
      'tasks/update',
      {
        taskId: created.taskId,
        inputResponses: {
          summary: { action: 'accept', content: { text: 'hi' } },
          roots: { roots: [{ uri: 'https://example.com/repo' }] },
          consent: { action: 'maybe' },
        },
      },
      { caps },
    );
    expect(Object.keys((await s.ok('tasks/get', { taskId: created.taskId }, { caps })).inputRequests).sort()).toEqual([
      'consent',
      'roots',
      'summary',
    ]);
    await s.ok(
      'tasks/update',
      {
        taskId: created.taskId,
        inputResponses: {
          summary: { role: 'assistant', content: { type: 'text', text: 'All fine' }, model: 'm-1', extra: 'dropped' },
          roots: { roots: [{ uri: 'file:///srv/a', name: 'a' }, { uri: 'file:///srv/b' }] },
          consent: { action: 'accept', content: { ignored: true } },
        },
      },
      { caps },
    );
    await s.settle();
    const done = await s.ok('tasks/get', { taskId: created.taskId }, { caps });
    expect(done.status).toBe('completed');
    expect(done.result.content[0].text).toBe('accept|All fine|file:///srv/a,file:///srv/b');
  });

  it('a task asks only the kinds the request that started it declared: can() tells them; a kind listed in taskInput and not declared is refused before the task', async () => {
    const s = setup();
    // Nothing but form elicitation declared: the work sees it and degrades instead of asking.
    const degraded = await s.ok('tools/call', { name: 'gather', arguments: {} });
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: degraded.taskId })).toMatchObject({
      status: 'completed',
      statusMessage: 'can: elicitation.form',
      result: { content: [{ text: 'no sampling: summary skipped' }] },
    });
    // A kind the tool lists in taskInput and the request does not declare: -32021 naming the capability, at once,
    // before any task (nothing is created, nothing is listed).
    const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
      ['form', { elicit: false }, { elicitation: { form: {} } }],
      ['url', {}, { elicitation: { url: {} } }],
      ['tools', { caps: { sampling: {} } }, { sampling: { tools: {} } }],
      ['roots', { caps: { sampling: {} } }, { roots: {} }],
    ];
    for (const [kind, opts, required] of cases) {
      const refused = await s.call('tools/call', { name: `ask_listed_${kind}`, arguments: {} }, opts);
      expect(refused.result, kind).toBeUndefined();
      expect(refused.error, kind).toMatchObject({ code: -32021, data: { requiredCapabilities: required } });
    }
    // Declared, the same tool asks; a key is unique across kinds for the task's life.
    const roots = await s.ok('tools/call', { name: 'ask_listed_roots', arguments: {} }, { caps: { roots: {} } });
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: roots.taskId })).toMatchObject({
      status: 'input_required',
      inputRequests: { q: { method: 'roots/list' } },
    });
    const same = await s.ok('tools/call', { name: 'ask_listed_same-key', arguments: {} }, { caps: { roots: {} } });
    await s.settle();
    await s.ok('tasks/update', { taskId: same.taskId, inputResponses: { k: { action: 'accept', content: { confirm: true } } } });
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: same.taskId })).toMatchObject({ status: 'failed', error: { code: -32603 } });
    // Without a task (synchronous run) nothing can be asked: can() is false, and a tool that lists kinds is refused
    // with -32021 naming the extension before its handler runs.
    const sync = await s.call('tools/call', { name: 'ask_listed_roots', arguments: {} }, { tasks: false, caps: { roots: {} } });
    expect(sync.error?.code).toBe(-32021);
    expect(sync.error?.data?.requiredCapabilities?.extensions).toEqual({ [TASKS_EXTENSION]: {} });
    const plain = await s.ok('tools/call', { name: 'gather', arguments: {} }, { tasks: false, caps: { sampling: {} } });
    expect(plain.content[0].text).toBe('no sampling: summary skipped');
  });

  it('a kind neither listed in taskInput nor checked with task.can() is a TypeError in the work, whatever the client declared', async () => {
    const s = setup();
    const caps = { elicitation: { form: {}, url: {} }, sampling: { tools: {} }, roots: {} };
    for (const kind of ['form', 'url', 'tools', 'roots']) {
      const created = await s.ok('tools/call', { name: 'ask_kind', arguments: { kind } }, { caps });
      await s.settle();
      const failed = await s.ok('tasks/get', { taskId: created.taskId }, { caps });
      expect(failed, kind).toMatchObject({ status: 'failed', error: { code: -32603, message: 'Internal error' } });
      expect(failed, kind).not.toHaveProperty('inputRequests');
    }
    // Without a task, the same bug shows the same way (McpServer makes a thrown error an isError result).
    const sync = await s.ok('tools/call', { name: 'ask_kind', arguments: { kind: 'roots' } }, { tasks: false, caps });
    expect(sync.isError).toBe(true);
    expect(sync.content[0].text).toMatch(/TypeError|taskInput/);
  });

  it('an optional task tool whose work asks during the task is refused before its first round when no task can run (not after the rounds)', async () => {
    const s = setup({ options: { store: createMemoryStore() } });
    // A 2026-07-28 client without the extension: refused at once, the user is never asked the round's question.
    const refused = await s.call('tools/call', { name: 'named_approval', arguments: {} }, { tasks: false });
    expect(refused.result).toBeUndefined();
    expect(refused.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } } });
    expect(refused.error?.message).toMatch(/asks for elicitation \(form\) while it runs as a task/);
    // With the extension: the round, then the task that asks.
    const round1 = await s.ok('tools/call', { name: 'named_approval', arguments: {} });
    expect(Object.keys(round1.inputRequests)).toEqual(['user_name']);
    const created = await s.ok('tools/call', {
      name: 'named_approval',
      arguments: {},
      inputResponses: { user_name: { action: 'accept', content: { name: 'Ann' } } },
      requestState: round1.requestState,
    });
    expect(created.resultType).toBe('task');
    await s.settle();
    expect((await s.ok('tasks/get', { taskId: created.taskId })).inputRequests).toHaveProperty('approve');
    // A later round of the flow is gated again: the same answers without the extension are refused, no task.
    const round1b = await s.ok('tools/call', { name: 'named_approval', arguments: {} });
    const dropped = await s.call(
      'tools/call',
      {
        name: 'named_approval',
        arguments: {},
        inputResponses: { user_name: { action: 'accept', content: { name: 'Ann' } } },
        requestState: round1b.requestState,
      },
      { tasks: false },
    );
    expect(dropped.error?.code).toBe(-32021);
  });

  it('taskInput is validated at registration (TypeError)', () => {
    const mrtr = createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, audience: 'x', tasks: { store: createMemoryTaskStore() } });
    const server = new McpServer({ name: 'x', version: '1' });
    const work = async () => ({ content: [] });
    expect(() => mrtr.registerTool(server, 'a', { taskInput: ['roots'] }, work)).toThrow(/taskInput needs task/);
    expect(() => mrtr.registerTool(server, 'b', { task: 'optional', taskInput: ['form' as never] }, work)).toThrow(TypeError);
    expect(() => mrtr.registerTool(server, 'c', { task: 'optional', taskInput: 'roots' as never }, work)).toThrow(TypeError);
    expect(() => mrtr.registerTool(server, 'd', { task: 'optional', taskInput: ['roots', 'roots'] }, work)).not.toThrow();
  });

  it('task.status sets the statusMessage tasks/get shows while the task runs; without a task it does nothing', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'progress', arguments: {} });
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: created.taskId })).toMatchObject({ status: 'working', statusMessage: 'step 1 of 2' });
    s.gate('progress-1').resolve();
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: created.taskId })).toMatchObject({ status: 'working', statusMessage: 'step 2 of 2' });
    s.gate('progress-2').resolve();
    await s.settle();
    expect(await s.ok('tasks/get', { taskId: created.taskId })).toMatchObject({
      status: 'completed',
      result: { content: [{ text: 'done' }] },
    });
    const sync = await s.ok('tools/call', { name: 'progress', arguments: {} }, { tasks: false });
    expect(sync).toMatchObject({ resultType: 'complete', content: [{ text: 'done' }] });
  });

  it('a key is unique for the task’s life: asking it twice fails the task', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'reuse_key', arguments: {} });
    await s.settle();
    await s.ok('tasks/update', { taskId: created.taskId, inputResponses: { k: { action: 'accept', content: { confirm: true } } } });
    await s.settle();
    const failed = await s.ok('tasks/get', { taskId: created.taskId });
    expect(failed.status).toBe('failed');
  });

  it('cancelling a task waiting for input ends it as cancelled', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'approve', arguments: {} });
    await s.settle();
    await s.ok('tasks/cancel', { taskId: created.taskId });
    await s.settle();
    const cancelled = await s.ok('tasks/get', { taskId: created.taskId });
    expect(cancelled.status).toBe('cancelled');
    expect(cancelled).not.toHaveProperty('inputRequests');
  });

  it('Mcp-Name must equal the task id over HTTP (-32020)', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'job', arguments: { label: 'hdr' } });
    const answer = await s.call('tasks/get', { taskId: created.taskId, name: 'other' });
    // `name` in params steers the helper's Mcp-Name header to a wrong value.
    expect(answer.error?.code).toBe(-32020);
  });

  it('requires a principal for task requests (same rule as states)', async () => {
    const s = setup();
    const created = await s.ok('tools/call', { name: 'job', arguments: { label: 'p' } });
    const anonymous = await s.call('tasks/get', { taskId: created.taskId }, { sub: '' });
    expect(anonymous.error?.code).toBe(-32600);
  });

  it('a task is bound to the principal its round is bound to: one policy (principal, then unauthenticated) for both', async () => {
    const store = createMemoryTaskStore({ now: () => 1_700_000_000_000 });
    // A custom principal: the subject as it is, '' (no principal) for "anon"; the rest without one are 'local'.
    const principal = (ctx: { http?: { authInfo?: AuthInfo } }) => {
      const sub = ctx.http?.authInfo?.extra?.sub;
      return sub === 'anon' ? '' : (sub as string);
    };
    const s = setup({ store, options: { principal, unauthenticated: { principal: 'local' } } });
    const record = async (taskId: string) => (await store.get(taskId))?.principal;

    // User A's task is unknown to user B of the same OAuth client (every request here has clientId 'same-client').
    const alices = await s.ok('tools/call', { name: 'job', arguments: { label: 'a' } }, { sub: 'alice' });
    expect(await record(alices.taskId)).toBe('p:alice');
    expect((await s.call('tasks/get', { taskId: alices.taskId }, { sub: 'bob' })).error?.code).toBe(-32602);
    expect((await s.ok('tasks/get', { taskId: alices.taskId }, { sub: 'alice' })).status).toBe('working');

    // No principal ('' as for the rounds): the fixed unauthenticated one, in a namespace of its own, which a user
    // whose principal is the same string ('local') never reaches.
    const anons = await s.ok('tools/call', { name: 'job', arguments: { label: 'anon' } }, { sub: 'anon' });
    expect(await record(anons.taskId)).toBe('u:local');
    expect((await s.ok('tasks/get', { taskId: anons.taskId }, { sub: 'anon' })).status).toBe('working');
    expect((await s.call('tasks/get', { taskId: anons.taskId }, { sub: 'local' })).error?.code).toBe(-32602);
    const locals = await s.ok('tools/call', { name: 'job', arguments: { label: 'local' } }, { sub: 'local' });
    expect(await record(locals.taskId)).toBe('p:local');
    expect((await s.call('tasks/get', { taskId: locals.taskId }, { sub: 'anon' })).error?.code).toBe(-32602);

    // The rounds before a task bind their state to the same principal: Bob cannot continue Alice's flow.
    const asked = await s.ok('tools/call', { name: 'named_task', arguments: {} }, { sub: 'alice' });
    expect(asked.resultType).toBe('input_required');
    const answers = { user_name: { action: 'accept', content: { name: 'Ada' } } };
    const stolen = await s.call(
      'tools/call',
      { name: 'named_task', arguments: {}, requestState: asked.requestState, inputResponses: answers },
      { sub: 'bob' },
    );
    expect(stolen.error?.code).toBe(-32602);
  });

  it('a principal() that returns a non-string is refused for task requests as for rounds, never the unauthenticated one', async () => {
    const principal = (ctx: { http?: { authInfo?: AuthInfo } }) => {
      const sub = ctx.http?.authInfo?.extra?.sub;
      return (sub === 'broken' ? 42 : sub === 'anon' ? undefined : sub) as string | undefined;
    };
    const s = setup({ options: { principal, unauthenticated: { principal: 'local' } } });
    const anons = await s.ok('tools/call', { name: 'job', arguments: { label: 'anon' } }, { sub: 'anon' });
    const get = await s.call('tasks/get', { taskId: anons.taskId }, { sub: 'broken' });
    expect(get.result).toBeUndefined();
    expect(get.error?.code).toBe(-32603);
    const round = await s.call('tools/call', { name: 'job', arguments: { label: 'broken' } }, { sub: 'broken' });
    expect(round.result?.resultType).not.toBe('task');
  });

  it('refuses task config without createMrtr({ tasks }) and bad task values', () => {
    const mrtr = createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, audience: 'x' });
    const server = new McpServer({ name: 'x', version: '1' });
    expect(() => mrtr.registerTool(server, 't', { task: 'optional' }, async () => ({ content: [] }))).toThrow(/tasks: \{ store \}/);
    const withTasks = createMrtr({
      keys: KeyRing.generate(),
      codec: createHmacCodec,
      audience: 'x',
      tasks: { store: createMemoryTaskStore() },
    });
    expect(() => withTasks.registerTool(server, 't', { task: 'always' as never }, async () => ({ content: [] }))).toThrow(TypeError);
    expect(() =>
      createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, audience: 'x', tasks: { store: createMemoryTaskStore(), ttlMs: 10 } }),
    ).toThrow(RangeError);
  });

  it('a 2025-era session never gets a task, even when its initialize declares the extension: optional runs synchronously, required is -32021', async () => {
    const mrtr = createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, audience: 'x', tasks: { store: createMemoryTaskStore() } });
    const handler = createHttpHandler(() => {
      const server = new McpServer({ name: 'x', version: '1' }, { ...mrtr.serverOptions });
      mrtr.registerTool(server, 'job', { task: 'optional' }, async (_args, _ctx, need) =>
        need.task(async () => ({ content: [{ type: 'text', text: 'done' }] })),
      );
      mrtr.registerTool(server, 'required_job', { task: 'required' }, async (_args, _ctx, need) =>
        need.task(async () => ({ content: [{ type: 'text', text: 'unreachable' }] })),
      );
      mrtr.registerTool(server, 'approval', { task: 'optional', taskInput: ['elicitation.form'] }, async (_args, _ctx, need) =>
        need.task(async (task) => ({ content: [{ type: 'text', text: (await task.elicit('go', CONFIRM)).action }] })),
      );
      return server;
    });
    const open = async (capabilities: Record<string, unknown>) => (await legacySession(handler, capabilities)).post;
    // The Inspector's CLI declares the extension in initialize by default: it could not follow a CreateTaskResult
    // (its user would see an empty result while the task ran on), so no task is created.
    for (const capabilities of [{ extensions: { [TASKS_EXTENSION]: {} }, elicitation: { form: {} } }, {}]) {
      const post = await open(capabilities);
      const sync = await post('tools/call', { name: 'job', arguments: {} });
      expect(sync.result).toMatchObject({ content: [{ type: 'text', text: 'done' }] });
      expect(sync.result).not.toHaveProperty('taskId');
      expect(sync.result.resultType).not.toBe('task');
      for (const name of ['required_job', 'approval']) {
        const refused = await post('tools/call', { name, arguments: {} });
        expect(refused.error, name).toMatchObject({
          code: -32021,
          data: { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
        });
        expect(refused.error.message, name).toMatch(/only 2026-07-28 requests can use/);
      }
      const get = await post('tasks/get', { taskId: 'any' });
      expect(get.error.code).toBe(-32021);
      expect((await post('tasks/list', {})).error.code).toBe(-32601);
    }
    await handler.close();
  });

  it('a 2025-era initialize does not advertise the tasks extension (other extensions stay); 2026-07-28 requests still see it and get tasks', async () => {
    const mrtr = createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, audience: 'x', tasks: { store: createMemoryTaskStore() } });
    const build = (other: boolean) => () => {
      const server = new McpServer({ name: 'x', version: '1' }, { ...mrtr.serverOptions });
      if (other) server.server.registerCapabilities({ extensions: { 'example.com/other': { on: true } } } as never);
      mrtr.registerTool(server, 'job', { task: 'optional' }, async (_args, _ctx, need) =>
        need.task(async () => ({ content: [{ type: 'text', text: 'done' }] })),
      );
      return server;
    };
    for (const other of [false, true]) {
      const handler = createHttpHandler(build(other));
      const { initialized } = await legacySession(handler, { extensions: { [TASKS_EXTENSION]: {} } });
      expect(initialized.result.protocolVersion).toBe('2025-11-25');
      expect(initialized.result.capabilities.tools).toBeDefined();
      expect(initialized.result.capabilities.extensions?.[TASKS_EXTENSION]).toBeUndefined();
      expect(initialized.result.capabilities.extensions).toEqual(other ? { 'example.com/other': { on: true } } : undefined);
      // The same factory, asked by a 2026-07-28 client: the extension is advertised and a task is created.
      const modern = async (method: string, params: Record<string, unknown>) => {
        const meta = {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS_EXTENSION]: {} } },
        };
        const headers: Record<string, string> = {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2026-07-28',
          'mcp-method': method,
          ...(typeof params.name === 'string' && { 'mcp-name': params.name }),
        };
        const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: meta } });
        const authInfo: AuthInfo = { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } };
        const response = await handler.fetch(new Request('http://t/mcp', { method: 'POST', headers, body }), { authInfo });
        // biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
        return ((await response.json()) as { result: Record<string, any> }).result;
      };
      const discover = await modern('server/discover', {});
      expect(discover.capabilities.extensions[TASKS_EXTENSION]).toEqual({});
      expect((await modern('tools/call', { name: 'job', arguments: {} })).resultType).toBe('task');
      await handler.close();
    }
  });

  it('callers without a principal share a bound of their own (maxLiveUnauthenticated, 4 by default): one anonymous caller cannot take the store’s whole per-principal bound', async () => {
    const principal = (ctx: { http?: { authInfo?: AuthInfo } }) => {
      const sub = ctx.http?.authInfo?.extra?.sub;
      return sub === 'anon' ? undefined : (sub as string);
    };
    const s = setup({ options: { principal, unauthenticated: { principal: 'local' } } });
    // Four callers, each from an address of its own (one address has a smaller bound: see the next test).
    for (const [i, label] of ['u1', 'u2', 'u3', 'u4'].entries())
      expect(
        (await s.ok('tools/call', { name: 'job', arguments: { label } }, { sub: 'anon', address: `192.0.2.${10 + i}` })).resultType,
      ).toBe('task');
    // The store would take 16 for this principal: the fifth is refused, with a message that names the way out.
    const fifth = await s.call('tools/call', { name: 'job', arguments: { label: 'u5' } }, { sub: 'anon', address: '192.0.2.20' });
    expect(fifth.error).toMatchObject({ code: -32600, data: { reason: 'task_limit' } });
    expect(fifth.error?.message).toMatch(/unauthenticated callers \(at most 4\).*authenticate/);
    // An authenticated user is not affected, and a finished anonymous task gives its slot back.
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'a1' } }, { sub: 'alice' })).resultType).toBe('task');
    s.gate('u1').resolve();
    await s.settle();
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'u6' } }, { sub: 'anon', address: '192.0.2.20' })).resultType).toBe(
      'task',
    );
    // Configurable; a refused create (the store's own bound) gives its slot back too.
    const t = setup({
      store: createMemoryTaskStore({ maxLivePerPrincipal: 1, now: () => 1_700_000_000_000 }),
      options: { principal, unauthenticated: { principal: 'local' } },
      tasks: { maxLiveUnauthenticated: 2 },
    });
    expect((await t.ok('tools/call', { name: 'job', arguments: { label: 'v1' } }, { sub: 'anon' })).resultType).toBe('task');
    for (let i = 0; i < 3; i++)
      expect((await t.call('tools/call', { name: 'job', arguments: { label: 'v2' } }, { sub: 'anon' })).error?.message).toMatch(
        /for this user/,
      );
    t.gate('v1').resolve();
    await t.settle();
    for (const label of ['v3', 'v4']) {
      expect((await t.ok('tools/call', { name: 'job', arguments: { label } }, { sub: 'anon' })).resultType).toBe('task');
      t.gate(label).resolve();
      await t.settle();
    }
  });

  it('one anonymous address cannot take the unauthenticated bound (maxLiveUnauthenticatedPerAddress, 2 by default): another address still starts tasks; the same one is refused at its bound', async () => {
    const principal = (ctx: { http?: { authInfo?: AuthInfo } }) => {
      const sub = ctx.http?.authInfo?.extra?.sub;
      return sub === 'anon' ? undefined : (sub as string);
    };
    // The class bound (maxLiveUnauthenticated) raised, so that only the per-address one is at play.
    const s = setup({ options: { principal, unauthenticated: { principal: 'local' } }, tasks: { maxLiveUnauthenticated: 8 } });
    const from = (address: string) => ({ sub: 'anon', address });
    // One caller holds tasks that wait (as the demo's would, for an hour): its third is refused…
    for (const label of ['a1', 'a2'])
      expect((await s.ok('tools/call', { name: 'job', arguments: { label } }, from('198.51.100.7'))).resultType).toBe('task');
    const third = await s.call('tools/call', { name: 'job', arguments: { label: 'a3' } }, from('198.51.100.7'));
    expect(third.error).toMatchObject({ code: -32600, data: { reason: 'task_limit' } });
    expect(third.error?.message).toMatch(/from this address \(at most 2\).*authenticate/);
    // …and other anonymous callers still get theirs (an IPv6 caller counts by its /64: another /64 is another caller).
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'b1' } }, from('203.0.113.9'))).resultType).toBe('task');
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'c1' } }, from('2001:db8:1:2::1'))).resultType).toBe('task');
    const sameSlash64 = await s.call('tools/call', { name: 'job', arguments: { label: 'c2' } }, from('2001:db8:1:2:ffff::9'));
    expect(sameSlash64.error).toBeUndefined();
    expect((await s.call('tools/call', { name: 'job', arguments: { label: 'c3' } }, from('2001:db8:1:2::77'))).error?.message).toMatch(
      /from this address/,
    );
    // A finished task gives its address's slot back.
    s.gate('a1').resolve();
    await s.settle();
    expect((await s.ok('tools/call', { name: 'job', arguments: { label: 'a4' } }, from('198.51.100.7'))).resultType).toBe('task');
  });

  it('X-Forwarded-For is read only behind trustProxy hops: without it a spoofed header is ignored; with it the entry that many hops in counts', async () => {
    const principal = (ctx: { http?: { authInfo?: AuthInfo } }) => {
      const sub = ctx.http?.authInfo?.extra?.sub;
      return sub === 'anon' ? undefined : (sub as string);
    };
    const anon = (forwardedFor: string) => ({ sub: 'anon', address: '10.0.0.1', forwardedFor });
    const direct = setup({ options: { principal, unauthenticated: { principal: 'local' } } });
    for (const label of ['d1', 'd2']) await direct.ok('tools/call', { name: 'job', arguments: { label } }, anon(`198.51.100.${label}`));
    // Another made-up address in the header changes nothing: the peer (10.0.0.1) holds its two.
    const spoofed = await direct.call('tools/call', { name: 'job', arguments: { label: 'd3' } }, anon('203.0.113.50'));
    expect(spoofed.error?.message).toMatch(/from this address/);
    // Behind one proxy (10.0.0.1) the last entry is the client: a client's own entries to the left of it do not count.
    const proxied = setup({
      options: { principal, unauthenticated: { principal: 'local' } },
      tasks: { maxLiveUnauthenticated: 8 },
      http: { trustProxy: 1 },
    });
    for (const label of ['p1', 'p2'])
      await proxied.ok('tools/call', { name: 'job', arguments: { label } }, anon(`1.1.1.${label.length}, 198.51.100.7`));
    const again = await proxied.call('tools/call', { name: 'job', arguments: { label: 'p3' } }, anon('9.9.9.9, 198.51.100.7'));
    expect(again.error?.message).toMatch(/from this address/);
    expect((await proxied.ok('tools/call', { name: 'job', arguments: { label: 'p4' } }, anon('198.51.100.8'))).resultType).toBe('task');
    // An oversized header is not read: the proxy's own address counts (one bucket for every such request).
    const huge = `${'7.7.7.7, '.repeat(300)}198.51.100.9`;
    expect((await proxied.ok('tools/call', { name: 'job', arguments: { label: 'h1' } }, anon(huge))).resultType).toBe('task');
    expect((await proxied.ok('tools/call', { name: 'job', arguments: { label: 'h2' } }, anon(`${huge}0`))).resultType).toBe('task');
    expect((await proxied.call('tools/call', { name: 'job', arguments: { label: 'h3' } }, anon(`${huge}1`))).error?.message).toMatch(
      /from this address/,
    );
  });

  it('a question unanswered past inputTimeoutMs fails the task (-32600, input_timeout) and aborts its work; never before, and an answer in time wins', async () => {
    const clock = fakeClock();
    const shared = createMemoryTaskStore({ now: clock.now });
    // The runner's reads of the store, as events: the test waits for the watch loop instead of for time.
    let reads = 0;
    const readers: { at: number; resolve: () => void }[] = [];
    const spied: TaskStore = {
      create: (record) => shared.create(record),
      update: (id, change) => shared.update(id, change),
      get: async (id) => {
        const record = await shared.get(id);
        reads++;
        for (const r of readers.filter((r) => reads >= r.at)) {
          readers.splice(readers.indexOf(r), 1);
          r.resolve();
        }
        return record;
      },
    };
    const readsMore = (n: number) => new Promise<void>((resolve) => readers.push({ at: reads + n, resolve }));
    const s = setup({ store: spied, clock, tasks: { watchIntervalMs: 5, leaseMs: 1_000, inputTimeoutMs: 10_000 } });
    const created = await s.ok('tools/call', { name: 'watched', arguments: {} });
    await until(
      () => shared.get(created.taskId),
      (r) => r?.status === 'input_required',
      'the question',
    );
    clock.advance(9_999);
    await readsMore(2); // a whole watch tick ran after the advance
    expect((await shared.get(created.taskId))?.status).toBe('input_required');
    clock.advance(1);
    const failed = await until(
      () => shared.get(created.taskId),
      (r) => r?.status !== 'input_required',
      'the deadline',
    );
    expect(failed).toMatchObject({ status: 'failed', error: { code: -32600, data: { reason: 'input_timeout' } }, inputRequests: {} });
    expect(failed?.error?.message).toMatch(/ran out of time waiting for input: "go" was not answered within 10 s/);
    await s.gate('watched-aborted').promise; // the work's signal aborted
    expect(await s.ok('tasks/get', { taskId: created.taskId })).toMatchObject({
      status: 'failed',
      error: { data: { reason: 'input_timeout' } },
    });
    // An answer in time: the task completes, and the deadline passing later changes nothing.
    const answered = await s.ok('tools/call', { name: 'watched', arguments: {} });
    await until(
      () => shared.get(answered.taskId),
      (r) => r?.status === 'input_required',
      'the question',
    );
    clock.advance(9_999);
    await s.ok('tasks/update', { taskId: answered.taskId, inputResponses: { go: { action: 'accept', content: { confirm: true } } } });
    clock.advance(1);
    const done = await until(
      () => shared.get(answered.taskId),
      (r) => r?.status !== 'input_required' && r?.status !== 'working',
      'the result',
    );
    expect(done).toMatchObject({ status: 'completed', result: { content: [{ text: 'go=true' }] } });
  });

  it('validates inputTimeoutMs and maxLiveUnauthenticated (RangeError/TypeError)', () => {
    const make = (tasks: Record<string, unknown>) => () =>
      createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, audience: 'x', tasks: { store: createMemoryTaskStore(), ...tasks } });
    expect(make({ inputTimeoutMs: 999 })).toThrow(RangeError);
    expect(make({ inputTimeoutMs: 1.5 })).toThrow(TypeError);
    expect(make({ maxLiveUnauthenticated: 0 })).toThrow(RangeError);
    expect(make({ maxLiveUnauthenticated: '4' })).toThrow(TypeError);
    expect(make({ inputTimeoutMs: 1_000, maxLiveUnauthenticated: 1 })).not.toThrow();
    expect(make({ maxLiveUnauthenticatedPerAddress: 0 })).toThrow(RangeError);
    expect(make({ maxLiveUnauthenticatedPerAddress: '2' })).toThrow(TypeError);
    expect(() => createHttpHandler(() => new McpServer({ name: 'x', version: '1' }), { trustProxy: -1 })).toThrow(RangeError);
    expect(() => createHttpHandler(() => new McpServer({ name: 'x', version: '1' }), { trustProxy: true as never })).toThrow(TypeError);
  });

  describe('two instances sharing one task store (a fleet)', () => {
    const fleet = () => {
      const clock = fakeClock();
      const shared = createMemoryTaskStore({ now: clock.now });
      const a = setup({ store: shared, clock, tasks: { watchIntervalMs: 5, leaseMs: 1_000 } });
      const b = setup({ store: shared, clock, tasks: { watchIntervalMs: 5, leaseMs: 1_000 } });
      return { a, b, clock, shared };
    };

    it('the work runs on A; B lists its question, and B’s tasks/update answer reaches the work on A', async () => {
      const { a, b } = fleet();
      const created = await a.ok('tools/call', { name: 'watched', arguments: {} });
      const waiting = await until(
        () => b.ok('tasks/get', { taskId: created.taskId }),
        (r) => r.status === 'input_required',
        'the question',
      );
      expect(Object.keys(waiting.inputRequests)).toEqual(['go']);
      // B checks the answer against the question as the store keeps it: an invalid one is ignored there too.
      await b.ok('tasks/update', { taskId: created.taskId, inputResponses: { go: { action: 'accept', content: { confirm: 'yes' } } } });
      expect((await b.ok('tasks/get', { taskId: created.taskId })).status).toBe('input_required');
      await b.ok('tasks/update', { taskId: created.taskId, inputResponses: { go: { action: 'accept', content: { confirm: true } } } });
      const done = await until(
        () => b.ok('tasks/get', { taskId: created.taskId }),
        (r) => r.status === 'completed',
        'the result',
      );
      expect(done.result.content[0].text).toBe('go=true');
      expect(done).not.toHaveProperty('inputRequests');
    });

    it('a cancel that reaches B stops the work on A (its signal aborts)', async () => {
      const { a, b } = fleet();
      const created = await a.ok('tools/call', { name: 'watched', arguments: {} });
      await until(
        () => b.ok('tasks/get', { taskId: created.taskId }),
        (r) => r.status === 'input_required',
        'the question',
      );
      await b.ok('tasks/cancel', { taskId: created.taskId });
      await a.gate('watched-aborted').promise; // resolved by the work's abort listener on A
      expect((await a.ok('tasks/get', { taskId: created.taskId })).status).toBe('cancelled');
    });

    it('a task whose instance died is reported failed once its lease has passed, never before', async () => {
      const clock = fakeClock();
      const shared = createMemoryTaskStore({ now: clock.now });
      const dying = mortal(shared);
      const a = setup({ store: dying.store, clock, tasks: { watchIntervalMs: 5, leaseMs: 1_000 } });
      const b = setup({ store: shared, clock, tasks: { watchIntervalMs: 5, leaseMs: 1_000 } });
      const created = await a.ok('tools/call', { name: 'watched', arguments: {} });
      await until(
        () => b.ok('tasks/get', { taskId: created.taskId }),
        (r) => r.status === 'input_required',
        'the question',
      );
      dying.kill();
      clock.advance(1_000);
      expect((await b.ok('tasks/get', { taskId: created.taskId })).status).toBe('input_required'); // at the lease's end: still vouched for
      clock.advance(1);
      const failed = await b.ok('tasks/get', { taskId: created.taskId });
      expect(failed).toMatchObject({
        status: 'failed',
        error: { code: -32603, message: 'The server running this task stopped before it finished' },
      });
      expect(failed).not.toHaveProperty('inputRequests');
      // Final: an answer arriving now changes nothing.
      await b.ok('tasks/update', { taskId: created.taskId, inputResponses: { go: { action: 'accept', content: { confirm: true } } } });
      expect((await b.ok('tasks/get', { taskId: created.taskId })).status).toBe('failed');
    });

    it('the instance running a task renews its lease: a long task on a live instance is never reported failed, nor expires', async () => {
      const { a, b, clock, shared } = fleet();
      const created = await a.ok('tools/call', { name: 'watched', arguments: {} });
      await until(
        () => b.ok('tasks/get', { taskId: created.taskId }),
        (r) => r.status === 'input_required',
        'the question',
      );
      // 100 × 700 ms = 70 s: past the task's ttlMs (60 s) with no change but the renewals.
      for (let i = 0; i < 100; i++) {
        const before = (await shared.get(created.taskId))!.leaseUntil!;
        clock.advance(700); // past two thirds of the lease: A renews at its next watch
        await until(
          () => shared.get(created.taskId),
          (r) => r!.leaseUntil! > before,
          'a renewed lease',
        );
        expect((await b.ok('tasks/get', { taskId: created.taskId })).status).toBe('input_required');
      }
      await b.ok('tasks/cancel', { taskId: created.taskId });
    });
  });
});

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accept, freshKeys, type Json, type RunningDemo, rawRpc, startDemo } from './helpers.js';

// biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
type Wire = Record<string, any>;

// Issue 21: the demo's long-running tool. `rollout` asks for the environment in an ordinary protected MRTR round,
// then becomes a task that runs for seconds in waves, shows its progress in statusMessage and, in production,
// asks for approval after the canary while it runs (tasks/get lists the question, tasks/update answers it).

const ALICE = 'alice-token-rollout-0123456789ab';
const BOB = 'bob-token-rollout-0123456789abcd';
const TASKS = { 'io.modelcontextprotocol/tasks': {} };
const CAPS = { elicitation: { form: {} }, extensions: TASKS };
let demo: RunningDemo;
const KEYS = freshKeys();

beforeAll(async () => {
  demo = await startDemo([], { env: { MRTR_KEYS: KEYS, MRTR_DEMO_TOKENS: `alice:${ALICE},bob:${BOB}` } });
});
afterAll(async () => {
  expect(await demo?.stop()).toBe(0);
});

async function rpc(method: string, params: Json, { token = ALICE, capabilities = CAPS as Json, status = 200 } = {}): Promise<Json> {
  const headers = typeof params.taskId === 'string' ? { 'mcp-name': params.taskId } : undefined;
  const r = await rawRpc(demo.url, method, params, { token, capabilities, ...(headers && { headers }) });
  expect(r.status).toBe(status);
  return r.body!;
}
async function ok(method: string, params: Json, options?: Parameters<typeof rpc>[2]): Promise<Json & Wire> {
  const body = await rpc(method, params, options);
  expect(body.error, `${method}: ${JSON.stringify(body.error)}`).toBeUndefined();
  return body.result as Json & Wire;
}

/** Starts a rollout: the MRTR round (environment), then the task. */
async function startRollout(service: string, environment: 'staging' | 'production', token = ALICE): Promise<string> {
  const round1 = await ok('tools/call', { name: 'rollout', arguments: { service } }, { token });
  expect(round1.resultType).toBe('input_required');
  expect(Object.keys(round1.inputRequests)).toEqual(['environment']);
  const created = await ok(
    'tools/call',
    {
      name: 'rollout',
      arguments: { service },
      inputResponses: { environment: accept({ environment }) },
      requestState: round1.requestState,
    },
    { token },
  );
  expect(created).toMatchObject({ resultType: 'task', status: 'working', pollIntervalMs: 500 });
  expect(created).not.toHaveProperty('requestState');
  return created.taskId as string;
}

/** Polls tasks/get (as the client would, every few ms) until `done`; bounded in count, never a timed assertion. */
async function until(taskId: string, done: (task: Wire) => boolean, seen: string[] = []): Promise<Wire> {
  for (let i = 0; i < 3_000; i++) {
    const task = await ok('tasks/get', { taskId });
    if (typeof task.statusMessage === 'string' && seen.at(-1) !== task.statusMessage) seen.push(task.statusMessage);
    if (done(task)) return task;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('the task never reached the expected state');
}

async function effects(): Promise<number> {
  const text = await (await fetch(new URL('/metrics', demo.url), { headers: { authorization: `Bearer ${ALICE}` } })).text();
  const line = text.split('\n').find((l) => l.startsWith('mrtr_demo_effects_total{tool="rollout",'));
  expect(line).toBeDefined();
  return Number(line!.slice(line!.lastIndexOf(' ') + 1));
}

describe('rollout: MRTR first, then a task that asks for approval midway (issue 21)', () => {
  it('production: canary, then input_required with the approval question; approved, it completes all waves', async () => {
    const before = await effects();
    const taskId = await startRollout('web', 'production');
    const seen: string[] = [];
    const waiting = await until(taskId, (t) => t.status === 'input_required', seen);
    expect(seen[0]).toMatch(/^canary: release \S+ on 1 of 10 instances$/);
    expect(Object.keys(waiting.inputRequests)).toEqual(['approve_rollout']);
    expect(waiting.inputRequests.approve_rollout).toMatchObject({
      method: 'elicitation/create',
      params: { requestedSchema: { required: ['approve'] } },
    });
    expect(waiting.inputRequests.approve_rollout.params.message).toMatch(/canary of web .* is healthy/);
    // Bob cannot see or answer Alice's task: the same -32602 as an unknown id.
    const stolen = await rpc('tasks/update', { taskId, inputResponses: { approve_rollout: accept({ approve: true }) } }, { token: BOB });
    expect(stolen.error).toMatchObject({ code: -32602 });
    expect(await ok('tasks/update', { taskId, inputResponses: { approve_rollout: accept({ approve: true }) } })).toEqual({
      resultType: 'complete',
      _meta: expect.anything(),
    });
    const done = await until(taskId, (t) => t.status === 'completed', seen);
    expect(seen.some((m) => m.startsWith('wave 3: '))).toBe(true);
    expect(done.result.content[0].text).toMatch(/^Rolled web release \S+ out to production: 10 of 10 instances\.$/);
    expect(done.result.structuredContent).toMatchObject({ service: 'web', environment: 'production', updated: 10 });
    expect(done).not.toHaveProperty('inputRequests');
    expect(await effects()).toBe(before + 1);
  });

  it('production, approval declined: the task completes with isError after the canary', async () => {
    const taskId = await startRollout('api', 'production');
    await until(taskId, (t) => t.status === 'input_required');
    await ok('tasks/update', { taskId, inputResponses: { approve_rollout: accept({ approve: false }) } });
    const done = await until(taskId, (t) => t.status === 'completed');
    expect(done.result).toMatchObject({ isError: true, structuredContent: { updated: 1 } });
    expect(done.result.content[0].text).toMatch(/halted after the canary/);
  });

  it('staging: no question, straight through the waves', async () => {
    const taskId = await startRollout('docs', 'staging');
    const done = await until(taskId, (t) => t.status !== 'working');
    expect(done.status).toBe('completed');
    expect(done.result.structuredContent).toMatchObject({ environment: 'staging', updated: 10 });
  });

  it('a cancel stops it: cancelled, no result, no effect counted', async () => {
    const before = await effects();
    const taskId = await startRollout('batch', 'staging');
    await until(taskId, (t) => typeof t.statusMessage === 'string');
    expect(await ok('tasks/cancel', { taskId })).toEqual({ resultType: 'complete', _meta: expect.anything() });
    const cancelled = await ok('tasks/get', { taskId });
    expect(cancelled.status).toBe('cancelled');
    expect(cancelled).not.toHaveProperty('result');
    expect(await effects()).toBe(before);
  });

  it('a client without the tasks extension gets -32021 naming it (the environment round is never asked)', async () => {
    const body = await rpc(
      'tools/call',
      { name: 'rollout', arguments: { service: 'web' } },
      { capabilities: { elicitation: { form: {} } }, status: 400 },
    );
    expect(body.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { extensions: TASKS } } });
  });

  it('a 2025-era session that declares the extension in initialize (the Inspector CLI does) gets -32021, never a task it cannot follow', async () => {
    let session: string | undefined;
    let id = 0;
    const post = async (method: string, params?: Json): Promise<Wire | undefined> => {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${ALICE}`,
        ...(session !== undefined && { 'mcp-session-id': session, 'mcp-protocol-version': '2025-11-25' }),
      };
      const body = method.startsWith('notifications/') ? { jsonrpc: '2.0', method } : { jsonrpc: '2.0', id: ++id, method, params };
      const response = await fetch(new URL('/mcp', demo.url), { method: 'POST', headers, body: JSON.stringify(body) });
      session ??= response.headers.get('mcp-session-id') ?? undefined;
      const text = await response.text();
      const data = text.trim().startsWith('{') ? text : /^data: (.*)$/m.exec(text)?.[1];
      return data === undefined ? undefined : (JSON.parse(data) as Wire);
    };
    const init = await post('initialize', {
      protocolVersion: '2025-11-25',
      capabilities: CAPS,
      clientInfo: { name: 'mcpdo', version: '1' },
    });
    expect(init?.result?.protocolVersion).toBe('2025-11-25');
    await post('notifications/initialized');
    const answer = await post('tools/call', { name: 'rollout', arguments: { service: 'web' } });
    expect(answer?.result).toBeUndefined(); // neither an empty "task" result nor the environment round
    expect(answer?.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { extensions: TASKS } } });
    expect(answer?.error.message).toMatch(/2026-07-28/);
  });
});

describe('tasks on --store sqlite survive a restart (issue 21)', () => {
  it('a finished rollout is read after the demo restarted on the same file; another user still cannot read it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mrtr-demo-tasks-'));
    const args = ['--store', 'sqlite', '--sqlite-file', join(dir, 'demo.sqlite')];
    // One namespace for both runs: the restarted demo is the same deployment (startDemo gives each instance its own).
    const env = { MRTR_KEYS: KEYS, MRTR_DEMO_TOKENS: `alice:${ALICE},bob:${BOB}`, MRTR_DEMO_NAMESPACE: `restart-${process.pid}` };
    const memoryDemo = demo;
    try {
      demo = await startDemo(args, { env });
      const taskId = await startRollout('search', 'staging');
      const done = await until(taskId, (t) => t.status !== 'working');
      expect(done.status).toBe('completed');
      expect(await demo.stop()).toBe(0);
      demo = await startDemo(args, { env });
      expect(await ok('tasks/get', { taskId })).toMatchObject({ status: 'completed', result: done.result, createdAt: done.createdAt });
      expect((await rpc('tasks/get', { taskId }, { token: BOB })).error).toMatchObject({ code: -32602 });
      expect(await demo.stop()).toBe(0);
    } finally {
      demo = memoryDemo;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

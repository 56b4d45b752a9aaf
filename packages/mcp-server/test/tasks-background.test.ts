// tasks.background: the hook that keeps a task's work alive after the response that created it (ctx.waitUntil on
// Cloudflare Workers). No wall-clock waits: the work is gated by a promise the test releases.
import { type AuthInfo, createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { describe, expect, it } from 'vitest';
import { createMemoryTaskStore } from '@mrtr/store-memory';
import { createMrtr } from '../src/index.js';
import { TASKS_EXTENSION, type TaskOptions } from '../src/tasks/index.js';

function setup(background: TaskOptions['background']) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const store = createMemoryTaskStore();
  const mrtr = createMrtr({
    keys: KeyRing.generate(),
    codec: createHmacCodec,
    audience: 'https://background.test',
    tasks: { store, background },
  });
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'background-test', version: '1.0.0' }, { ...mrtr.serverOptions });
      mrtr.registerTool(server, 'slow', { task: 'required' }, async (_args, _ctx, need) =>
        need.task(async () => {
          await gate;
          return { content: [{ type: 'text', text: 'done' }] };
        }),
      );
      return server;
    },
    { legacy: 'reject' },
  );
  const startTask = async (): Promise<string> => {
    const caps = { extensions: { [TASKS_EXTENSION]: {} } };
    const body = {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: {
        name: 'slow',
        arguments: {},
        _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': caps },
      },
    };
    const headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'slow',
    };
    const authInfo: AuthInfo = { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } };
    const response = await handler.fetch(new Request('http://test.local/mcp', { method: 'POST', headers, body: JSON.stringify(body) }), {
      authInfo,
    });
    const json = (await response.json()) as { result?: { resultType?: string; task?: { taskId?: string }; taskId?: string } };
    expect(json.result?.resultType).toBe('task');
    const taskId = json.result?.task?.taskId ?? json.result?.taskId;
    expect(typeof taskId).toBe('string');
    return taskId as string;
  };
  return { store, release, startTask };
}

describe('tasks.background', () => {
  it('is called once per task, after the CreateTaskResult is ready, with a promise that settles once the final state is stored', async () => {
    const handed: Promise<void>[] = [];
    const { store, release, startTask } = setup((work) => void handed.push(work));
    const taskId = await startTask();
    expect(handed).toHaveLength(1);
    let settled = false;
    void handed[0]!.then(() => (settled = true));
    // The response left while the work waits on its gate: the promise is still pending and the task unfinished.
    await Promise.resolve();
    expect(settled).toBe(false);
    expect((await store.get(taskId))?.status).toBe('working');
    release();
    await handed[0];
    const record = await store.get(taskId);
    expect(record?.status).toBe('completed');
    expect(JSON.stringify(record?.result)).toContain('done');
  });

  it('a hook that throws changes nothing: the task still completes', async () => {
    let calls = 0;
    const { store, release, startTask } = setup(() => {
      calls++;
      throw new Error('no waitUntil here');
    });
    const taskId = await startTask();
    expect(calls).toBe(1);
    release();
    // Bounded: the work ends after its gate; poll the store a bounded number of macrotask turns.
    let status: string | undefined;
    for (let i = 0; i < 100 && status !== 'completed'; i++) {
      await new Promise((resolve) => setImmediate(resolve));
      status = (await store.get(taskId))?.status;
    }
    expect(status).toBe('completed');
  });

  it('must be a function: TypeError at createMrtr', () => {
    expect(() =>
      createMrtr({
        keys: KeyRing.generate(),
        codec: createHmacCodec,
        audience: 'https://background.test',
        tasks: { store: createMemoryTaskStore(), background: 42 as never },
      }),
    ).toThrow(new TypeError('createMrtr: tasks.background must be a function'));
  });
});

import { ProtocolError, SdkError } from '@modelcontextprotocol/client';
import { TaskCancelledError, TaskPollsExceededError, withMrtr } from '@mrtr/client';
import { describe, expect, it } from 'vitest';
import { connect, fakeServer, type Json, RpcFault, text } from './fake.js';
import { noTimers } from './helpers.js';

const TASKS = 'io.modelcontextprotocol/tasks';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const REST = {
  method: 'elicitation/create',
  params: { message: 'Canary healthy. Deploy the rest?', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } } } },
};
const task = (status: string, extra: Json = {}): Json => ({
  taskId: 'T1',
  status,
  createdAt: '2026-12-07T00:00:00.000Z',
  lastUpdatedAt: '2026-12-07T00:00:00.000Z',
  ttlMs: 3_600_000,
  pollIntervalMs: 250,
  ...extra,
});

/** `rollout` becomes task T1; `views` are what successive `tasks/get` polls see (the last one repeats). */
function taskServer(views: Json[], options: { tasks?: boolean } = { tasks: true }) {
  let polls = 0;
  let cancelled = false;
  const fake = fakeServer((method, params) => {
    if (method === 'tools/list') return { resultType: 'complete', tools: [], ttlMs: 0, cacheScope: 'private' };
    const declared = ((params._meta as Json)[CAPS] as Json).extensions as Json | undefined;
    if (method === 'tools/call')
      return declared?.[TASKS] !== undefined ? { resultType: 'task', ...task('working'), content: [] } : text('ran inline');
    if (declared?.[TASKS] === undefined) return new RpcFault(-32021, 'tasks extension not declared');
    if (method === 'tasks/get') {
      if (cancelled) return { resultType: 'complete', ...task('cancelled') };
      const view = views[Math.min(polls++, views.length - 1)]!;
      return { resultType: 'complete', ...view };
    }
    if (method === 'tasks/update') return { resultType: 'complete' };
    if (method === 'tasks/cancel') {
      cancelled = true;
      return { resultType: 'complete' };
    }
    return new RpcFault(-32601, 'Method not found');
  }, options);
  return fake;
}

const DONE = task('completed', { result: { resultType: 'complete', content: [{ type: 'text', text: 'Deployed prod' }] } });

describe('tasks', () => {
  it('follows a task with a question: tasks/get at the server’s interval, the answer through the client’s handler with tasks/update', async () => {
    const fake = taskServer([task('working'), task('input_required', { inputRequests: { rest: REST } }), task('working'), DONE]);
    const options = noTimers();
    const client = await connect(fake);
    const seenTasks: string[] = [];
    const result = await withMrtr(client, options).callTool({ name: 'rollout', arguments: {} }, { onTask: (id) => seenTasks.push(id) });
    expect(result).toMatchObject({ content: [{ type: 'text', text: 'Deployed prod' }], replayed: false });
    expect(seenTasks).toEqual(['T1']);
    expect(fake.seen.map((s) => s.method).filter((m) => m !== 'tools/list')).toEqual([
      'tools/call',
      'tasks/get',
      'tasks/get',
      'tasks/update',
      'tasks/get',
      'tasks/get',
    ]);
    const update = fake.seen.find((s) => s.method === 'tasks/update')!;
    expect(update.params).toMatchObject({ taskId: 'T1', inputResponses: { rest: { action: 'accept', content: { ok: true } } } });
    expect(update.params).not.toHaveProperty('requestState');
    expect(options.sleeps).toEqual([250, 250, 250, 250]);
    // The extension is declared on this package's requests only, beside the client's own capabilities.
    expect((fake.seen.find((s) => s.method === 'tools/call')!.params._meta as Json)[CAPS]).toEqual({
      elicitation: { form: {} },
      extensions: { [TASKS]: {} },
    });
  });

  it('where the bare client throws on the same task', async () => {
    const fake = taskServer([DONE]);
    const client = await connect(fake);
    const meta = { [CAPS]: { elicitation: { form: {} }, extensions: { [TASKS]: {} } } };
    await expect(client.callTool({ name: 'rollout', arguments: {}, _meta: meta } as never)).rejects.toBeInstanceOf(SdkError);
  });

  it('answers each task question once, and re-sends a tasks/get whose response was lost', async () => {
    const asking = task('input_required', { inputRequests: { rest: REST } });
    const fake = taskServer([asking, asking, DONE]);
    fake.drop((method) => method === 'tasks/get');
    await withMrtr(await connect(fake), noTimers()).callTool({ name: 'rollout', arguments: {} });
    expect(fake.seen.filter((s) => s.method === 'tasks/update')).toHaveLength(1);
    expect(fake.seen.filter((s) => s.method === 'tasks/get')).toHaveLength(3); // the lost one, its re-send, the last
  });

  it('keeps the poll interval within its bounds', async () => {
    const fake = taskServer([task('working', { pollIntervalMs: 1 }), task('working', { pollIntervalMs: 10_000_000 }), DONE]);
    const options = noTimers({ tasks: { pollMs: { min: 50, max: 2_000 } } });
    await withMrtr(await connect(fake), options).callTool({ name: 'rollout', arguments: {} });
    expect(options.sleeps).toEqual([250, 50, 2_000]);
  });

  it('cancels the task (tasks/cancel) when the call’s signal aborts, and throws the abort reason', async () => {
    const fake = taskServer([task('working')]);
    const controller = new AbortController();
    const options = noTimers({
      sleep: async (_ms, signal) => {
        if (fake.seen.filter((s) => s.method === 'tasks/get').length === 2) controller.abort(new Error('user stopped'));
        signal?.throwIfAborted();
      },
    });
    const error = await withMrtr(await connect(fake), options)
      .callTool({ name: 'rollout', arguments: {} }, { signal: controller.signal })
      .catch((e: unknown) => e);
    expect(error).toEqual(new Error('user stopped'));
    expect(fake.seen.at(-1)).toMatchObject({ method: 'tasks/cancel', params: { taskId: 'T1' } });
  });

  it('cancelTask cancels a task by id; a task that ends cancelled is a TaskCancelledError', async () => {
    const fake = taskServer([task('working')]);
    const mrtr = withMrtr(await connect(fake), noTimers());
    await mrtr.cancelTask('T1');
    const error = await mrtr.callTool({ name: 'rollout', arguments: {} }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TaskCancelledError);
    expect(error).toMatchObject({ code: 'ERR_TASK_CANCELLED', taskId: 'T1' });
  });

  it('a failed task throws its JSON-RPC error; a task past maxPolls is a TaskPollsExceededError', async () => {
    const failed = taskServer([task('failed', { error: { code: -32600, message: 'ran out of time', data: { reason: 'input_timeout' } } })]);
    const error = await withMrtr(await connect(failed), noTimers())
      .callTool({ name: 'rollout', arguments: {} })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProtocolError);
    expect(error).toMatchObject({ code: -32600, data: { reason: 'input_timeout' } });

    const slow = taskServer([task('working')]);
    const late = await withMrtr(await connect(slow), noTimers({ tasks: { maxPolls: 3 } }))
      .callTool({ name: 'rollout', arguments: {} })
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(TaskPollsExceededError);
    expect(slow.seen.filter((s) => s.method === 'tasks/get')).toHaveLength(3);
  });

  it('does not declare the extension to a server that does not advertise it, or with tasks: false', async () => {
    for (const [server, options] of [
      [{ tasks: false }, {}],
      [{ tasks: true }, { tasks: false as const }],
    ] as const) {
      const fake = taskServer([DONE], server);
      const result = await withMrtr(await connect(fake), noTimers(options)).callTool({ name: 'rollout', arguments: {} });
      expect(result.content).toEqual([{ type: 'text', text: 'ran inline' }]);
      expect(((fake.seen.find((s) => s.method === 'tools/call')!.params._meta as Json)[CAPS] as Json).extensions).toBeUndefined();
    }
  });
});

// The places src/sdk.ts reaches past the public API of @modelcontextprotocol/client 2.4: if a new SDK moves one, these
// fail by name (the peer range is pinned to ~2.4.0 for that reason).
import { describe, expect, it } from 'vitest';
import { catchTasks, registeredHandler, serverHasTasks, taskOf, tasksMeta } from '../src/sdk.js';
import { connect, fakeServer, text } from './fake.js';

describe('SDK seams', () => {
  it('reads the client’s capabilities from its per-request _meta envelope', async () => {
    const client = await connect(fakeServer(() => text('x'), { tasks: true }));
    expect(tasksMeta(client)).toEqual({
      'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} }, extensions: { 'io.modelcontextprotocol/tasks': {} } },
    });
    expect(serverHasTasks(client)).toBe(true);
  });

  it('reaches the handler registered with setRequestHandler, through the SDK’s validating wrapper', async () => {
    const client = await connect(
      fakeServer(() => text('x')),
      { ok: true },
    );
    const handler = registeredHandler(client, 'elicitation/create');
    const params = { message: 'Go?', requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } } } };
    expect(await handler?.('q', params, new AbortController().signal)).toEqual({ action: 'accept', content: { ok: true } });
    await expect(handler?.('q', { message: 'no schema' }, new AbortController().signal)).rejects.toThrow(/Invalid elicitation request/);
    expect(registeredHandler(client, 'sampling/createMessage')).toBeUndefined();
  });

  it('turns a task answer into an error carrying the task, once however often it is installed', async () => {
    const task = { resultType: 'task', taskId: 'T', status: 'working' };
    const client = await connect(fakeServer(() => task));
    catchTasks(client);
    catchTasks(client);
    const error = await client.request({ method: 'tools/call', params: { name: 'x' } } as never).catch((e: unknown) => e);
    expect(taskOf(error)).toEqual(task);
  });
});

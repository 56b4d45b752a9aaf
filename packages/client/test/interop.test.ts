// Against real servers, in process over Streamable HTTP: the official SDK's own (no mrtr at all), and one built with
// @mrtr/mcp-server (a devDependency of the tests only), where a re-sent round is answered from the server's record.
import { type AuthInfo, Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler, inputRequired, McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { withMrtr } from '@mrtr/client';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createMemoryStore, createMemoryTaskStore } from '@mrtr/store-memory';
import { expect, it } from 'vitest';
import * as z from 'zod/v4';
import { noTimers } from './helpers.js';

const CONFIRM = { type: 'object' as const, properties: { ok: { type: 'boolean' as const } }, required: ['ok'] };
const AUTH: AuthInfo = { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } };

/**
 * A client over `handler`, whose `lose(n)` makes the next n responses to a round with a requestState (with
 * `lose(n, 'tools/call')`: to any tool call) be lost after the server ran it. `keys` lists the idempotency key of every
 * `tools/call` sent, re-sends included.
 */
async function over(handler: { fetch(request: Request, options?: { authInfo?: AuthInfo }): Promise<Response> }) {
  let lose = 0;
  let losing = '"requestState"';
  const keys: unknown[] = [];
  const transport = new StreamableHTTPClientTransport(new URL('http://test.local/mcp'), {
    fetch: async (url, init) => {
      const body = typeof init?.body === 'string' ? init.body : '';
      const message = body === '' ? undefined : (JSON.parse(body) as { method?: string; params?: { _meta?: Record<string, unknown> } });
      if (message?.method === 'tools/call') keys.push(message.params?._meta?.['dev.mrtr/idempotency-key']);
      const response = await handler.fetch(new Request(url, init), { authInfo: AUTH });
      if (body.includes(losing) && lose > 0) {
        lose--;
        await response.arrayBuffer();
        throw new TypeError('fetch failed');
      }
      return response;
    },
  });
  const client = new Client(
    { name: 'interop', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } } },
  );
  client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { ok: true } }));
  await client.connect(transport);
  const loseNext = (n: number, method?: 'tools/call') => {
    lose = n;
    losing = method === undefined ? '"requestState"' : `"method":"${method}"`;
  };
  return { client, keys, lose: loseNext };
}

it('drives the rounds of a server built on the official SDK alone', async () => {
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'plain-sdk', version: '1.0.0' });
      server.registerTool('deploy', { description: 'Deploys after a confirmation' }, async (ctx) => {
        const answer = ctx.mcpReq.inputResponses?.confirm as { action?: string; content?: { ok?: boolean } } | undefined;
        if (answer === undefined) {
          return inputRequired({
            inputRequests: { confirm: inputRequired.elicit({ message: 'Deploy?', requestedSchema: CONFIRM }) },
            requestState: 'step-1',
          });
        }
        const state = ctx.mcpReq.requestState<string>();
        return { content: [{ type: 'text', text: `deployed (${state}, ok=${answer.content?.ok})` }] };
      });
      return server;
    },
    { legacy: 'reject' },
  );
  const { client } = await over(handler);
  const result = await withMrtr(client, noTimers()).callTool({ name: 'deploy', arguments: {} });
  expect(result.content).toEqual([{ type: 'text', text: 'deployed (step-1, ok=true)' }]);
});

it('re-sends a lost round to an @mrtr/mcp-server server, which answers it from its record: one effect', async () => {
  const mrtr = createMrtr({
    keys: KeyRing.generate(),
    codec: createHmacCodec,
    store: createMemoryStore(),
    audience: 'https://interop.test',
  });
  let effects = 0;
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'mrtr', version: '1.0.0' }, { ...mrtr.serverOptions });
      mrtr.registerTool(server, 'deploy', { description: 'Deploys after a confirmation' }, async (_args, _ctx, need) => {
        const confirm = need.elicit('confirm', { message: 'Deploy?', requestedSchema: CONFIRM });
        if (!confirm) return need.ask();
        return { content: [{ type: 'text', text: `deployment #${++effects}` }] };
      });
      return server;
    },
    { legacy: 'reject' },
  );
  const { client, lose } = await over(handler);
  const options = noTimers();
  lose(1);
  const result = await withMrtr(client, options).callTool({ name: 'deploy', arguments: {} });
  expect(result.content).toEqual([{ type: 'text', text: 'deployment #1' }]);
  expect(effects).toBe(1);
  expect(options.sleeps).toHaveLength(1);
});

it('re-sends a lost keyed first call to an @mrtr/mcp-server server with the same key: one effect, answered as a replay; the next call gets a new key', async () => {
  const mrtr = createMrtr({
    keys: KeyRing.generate(),
    codec: createHmacCodec,
    store: createMemoryStore(),
    audience: 'https://interop.test',
  });
  let effects = 0;
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'mrtr-keys', version: '1.0.0' }, { ...mrtr.serverOptions });
      const config = { inputSchema: z.object({ to: z.string() }), idempotency: true } as const;
      mrtr.registerTool(server, 'send_email', config, async ({ to }) => ({
        content: [{ type: 'text', text: `message #${++effects} to ${to}` }],
      }));
      return server;
    },
    { legacy: 'reject' },
  );
  const { client, keys, lose } = await over(handler);
  const options = noTimers();
  const mrtrClient = withMrtr(client, options);
  const email = { name: 'send_email', arguments: { to: 'bob@example.com' } };

  lose(1, 'tools/call');
  const first = await mrtrClient.callTool(email);
  expect(first).toMatchObject({ content: [{ type: 'text', text: 'message #1 to bob@example.com' }], replayed: true });
  expect(first._meta?.['dev.mrtr/replayed']).toBe(true);
  expect(effects).toBe(1);
  expect(options.sleeps).toHaveLength(1);
  expect(keys).toEqual([expect.any(String), keys[0]]);

  const second = await mrtrClient.callTool(email);
  expect(second).toMatchObject({ content: [{ type: 'text', text: 'message #2 to bob@example.com' }], replayed: false });
  expect(effects).toBe(2);
  expect(keys).toHaveLength(3);
  expect(keys[2]).toEqual(expect.any(String));
  expect(keys[2]).not.toBe(keys[0]);
});

it('completes a task with a question (a round, then tasks/get and tasks/update) on @mrtr/mcp-server, where the bare client throws', async () => {
  const mrtr = createMrtr({
    keys: KeyRing.generate(),
    codec: createHmacCodec,
    store: createMemoryStore(),
    audience: 'https://interop.test',
    tasks: { store: createMemoryTaskStore(), pollIntervalMs: 100 },
  });
  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'mrtr-tasks', version: '1.0.0' }, { ...mrtr.serverOptions });
      const config = { inputSchema: z.object({ env: z.string() }), task: 'required', taskInput: ['elicitation.form'] } as const;
      mrtr.registerTool(server, 'rollout', config, async ({ env }, _ctx, need) => {
        const go = need.elicit('confirm', { message: `Roll out to ${env}?`, requestedSchema: CONFIRM });
        if (!go) return need.ask();
        return need.task(async (task) => {
          await task.status('canary');
          const rest = await task.elicit('rest', { message: 'Canary healthy. The rest?', requestedSchema: CONFIRM });
          return { content: [{ type: 'text', text: rest.action === 'accept' && rest.content.ok ? `Rolled out ${env}` : 'Canary only' }] };
        });
      });
      return server;
    },
    { legacy: 'reject' },
  );
  const { client } = await over(handler);
  const tasks = {
    'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} }, extensions: { 'io.modelcontextprotocol/tasks': {} } },
  };
  await expect(client.callTool({ name: 'rollout', arguments: { env: 'prod' }, _meta: tasks } as never)).rejects.toThrow();

  const asked: string[] = [];
  const mrtrClient = withMrtr(client, {
    // No wall clock: each wait only lets the server's task run on.
    sleep: () => new Promise((resolve) => setImmediate(resolve)),
    onInput: async ({ key }) => {
      asked.push(key);
      return { action: 'accept', content: { ok: true } };
    },
  });
  let taskId: string | undefined;
  const result = await mrtrClient.callTool({ name: 'rollout', arguments: { env: 'prod' } }, { onTask: (id) => void (taskId = id) });
  expect(result.content).toEqual([{ type: 'text', text: 'Rolled out prod' }]);
  expect(asked).toEqual(['confirm', 'rest']);
  expect(taskId).toEqual(expect.any(String));
});

// The client side of a task, over real HTTP JSON-RPC: a server with one task tool (`deploy`: a protected round,
// then a task that asks for approval midway) on a free port, and a client that declares the tasks extension,
// answers the round, polls tasks/get, answers the task's question with tasks/update, and cancels a second task.
// Run it: `npx tsx examples/tasks-client.ts` (test/tasks-client-example.test.ts runs it too).
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createHttpHandler } from '@mrtr/mcp-server/http';
import { createMemoryStore, createMemoryTaskStore } from '@mrtr/store-memory';
import * as z from 'zod/v4';

// biome-ignore lint/suspicious/noExplicitAny: wire JSON, read field by field
type Json = Record<string, any>;

// ------------------------------------------------------------------------------------------------ the server
const approve = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } as const;
const mrtr = createMrtr({
  keys: KeyRing.generate(),
  codec: createHmacCodec,
  store: createMemoryStore(),
  audience: 'https://deploy.example/mcp',
  unauthenticated: { principal: 'local', recordOutcomes: true }, // an example without auth; put a bearer check in front
  tasks: { store: createMemoryTaskStore(), pollIntervalMs: 100 },
});
const handler = createHttpHandler(() => {
  const server = new McpServer({ name: 'deploy', version: '1.0.0' }, { ...mrtr.serverOptions });
  const config = { inputSchema: z.object({ env: z.string() }), task: 'required', taskInput: ['elicitation.form'] } as const;
  mrtr.registerTool(server, 'deploy', config, async ({ env }, _ctx, need) => {
    const go = need.elicit('confirm', { message: `Deploy to ${env}?`, requestedSchema: approve }); // a protected round
    if (!go) return need.ask();
    if (go.action !== 'accept' || !go.content.ok) return need.fail('Not deployed');
    return need.task(async (task) => {
      await task.status('canary');
      const rest = await task.elicit('rest', { message: 'Canary healthy. Deploy the rest?', requestedSchema: approve }); // during the task
      return { content: [{ type: 'text', text: rest.action === 'accept' && rest.content.ok ? `Deployed ${env}` : 'Canary only' }] };
    });
  });
  return server;
});

// ------------------------------------------------------------------------------------------------ the client
const EXTENSION = 'io.modelcontextprotocol/tasks';
const META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  // Declaring the extension (and every kind the task asks: here form elicitation) is what lets the server answer with a task.
  'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} }, extensions: { [EXTENSION]: {} } },
  'io.modelcontextprotocol/clientInfo': { name: 'tasks-client-example', version: '1.0.0' },
};
let nextId = 0;

/** One JSON-RPC request: `Mcp-Name` is the tool name for tools/call, the task id for tasks/* (else -32020). */
async function rpc(url: string, method: string, params: Json): Promise<Json> {
  const id = ++nextId;
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': method,
    'mcp-name': String(method === 'tools/call' ? params.name : params.taskId),
  };
  const body = JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: META } });
  const text = await (await fetch(url, { method: 'POST', headers, body })).text();
  const json = text.trim().startsWith('{')
    ? text
    : text
        .split('\n')
        .find((line) => line.startsWith('data:'))
        ?.slice(5);
  const reply = JSON.parse(json ?? '{}') as Json;
  if (reply.error !== undefined) throw new Error(`${method}: ${reply.error.code} ${reply.error.message}`);
  return reply.result as Json;
}

/** Polls tasks/get at the interval the task suggests until `until(view)` holds. */
async function poll(url: string, created: Json, until: (view: Json) => boolean): Promise<Json> {
  for (;;) {
    const view = await rpc(url, 'tasks/get', { taskId: created.taskId });
    if (until(view)) return view;
    await new Promise((resolve) => setTimeout(resolve, created.pollIntervalMs ?? 1000));
  }
}

/** Starts the server, runs the client against it; resolves with what the client saw, one line per step. */
export async function runExample(): Promise<string[]> {
  const http = createServer(toNodeHandler(handler)).listen(0, '127.0.0.1');
  await new Promise((resolve) => http.once('listening', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
  const seen: string[] = [];
  try {
    const call = { name: 'deploy', arguments: { env: 'prod' } };
    const round = await rpc(url, 'tools/call', call); // { resultType: 'input_required', inputRequests, requestState }
    seen.push(`tools/call → ${round.resultType}: ${Object.keys(round.inputRequests).join(', ')}`);
    const inputResponses = { confirm: { action: 'accept', content: { ok: true } } };
    const created = await rpc(url, 'tools/call', { ...call, inputResponses, requestState: round.requestState });
    seen.push(`tools/call → ${created.resultType}: ${created.status}, poll every ${created.pollIntervalMs} ms`); // CreateTaskResult
    const asking = await poll(url, created, (view) => view.status === 'input_required');
    seen.push(`tasks/get → input_required: ${asking.inputRequests.rest.method} "${asking.inputRequests.rest.params.message}"`);
    const ack = await rpc(url, 'tasks/update', {
      taskId: created.taskId,
      inputResponses: { rest: { action: 'accept', content: { ok: true } } },
    });
    seen.push(`tasks/update → ${ack.resultType}`);
    const done = await poll(url, created, (view) => ['completed', 'failed', 'cancelled'].includes(view.status));
    seen.push(`tasks/get → ${done.status}: ${done.result?.content?.[0]?.text}`);

    // A second task, cancelled while it waits for its answer.
    const round2 = await rpc(url, 'tools/call', call);
    const second = await rpc(url, 'tools/call', { ...call, inputResponses, requestState: round2.requestState });
    await poll(url, second, (view) => view.status === 'input_required');
    seen.push(`tasks/cancel → ${(await rpc(url, 'tasks/cancel', { taskId: second.taskId })).resultType}`);
    seen.push(`tasks/get → ${(await rpc(url, 'tasks/get', { taskId: second.taskId })).status}`);
  } finally {
    http.closeAllConnections();
    await new Promise((resolve) => http.close(resolve));
    await handler.close();
  }
  return seen;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const line of await runExample()) console.log(line);
}

// An MCP server on Cloudflare Workers: the agents framework's createMcpHandler (the official SDK's McpServer
// underneath), @mrtr/mcp-server for sealed, bound, single-use request state, and @mrtr/store-cloudflare for single
// use, safe retry and tasks kept by a Durable Object that every isolate and location of the Worker reaches.
import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import {
  createDurableObjectStore,
  createDurableObjectTaskStore,
  type DurableObjectNamespaceLike,
  MrtrStoreObject,
  perIsolate,
} from '@mrtr/store-cloudflare';
import { createMcpHandler } from 'agents/mcp/server';
import { waitUntil } from 'cloudflare:workers';
import * as z from 'zod/v4';

// The Durable Object class the MRTR_STORE binding names (wrangler.jsonc): exported by the Worker's main module.
export { MrtrStoreObject };

export interface Env {
  /** Secret: the key ring, the same on every isolate (`npx @mrtr/cli keygen`, then `wrangler secret put MRTR_KEYS`). */
  MRTR_KEYS?: string;
  /** Secret: demo bearer tokens, JSON `{ "<token>": "<user>" }`. Put your OAuth provider in its place. */
  API_TOKENS?: string;
  /** The Durable Object namespace of MrtrStoreObject. */
  MRTR_STORE: DurableObjectNamespaceLike;
  /** This server's URL (the audience every state is bound to). */
  AUDIENCE?: string;
}

const confirmSchema = {
  type: 'object',
  properties: { ok: { type: 'boolean', title: 'Really delete?' } },
  required: ['ok'],
} as const;
const approveSchema = {
  type: 'object',
  properties: { approve: { type: 'boolean', title: 'Deploy to production?' } },
  required: ['approve'],
} as const;

/** A run id in each result: an identical retry that gets the recorded answer shows the same one (the round ran once). */
const runId = (): string => crypto.randomUUID().slice(0, 8);

// Built once per isolate from env, and again only when MRTR_KEYS changes (a rotated secret reaches new isolates).
const serverFor = perIsolate('MRTR_KEYS', (text, env: Env) => {
  const mrtr = createMrtr({
    keys: KeyRing.parse(text),
    codec: createHmacCodec, // its web build (WebCrypto) on workerd
    audience: env.AUDIENCE ?? 'https://mrtr-mcp.example.workers.dev/mcp',
    store: createDurableObjectStore({ objects: env.MRTR_STORE }), // single use and safe retry, every isolate
    tasks: {
      store: createDurableObjectTaskStore({ objects: env.MRTR_STORE }),
      // A Worker's work ends with its response unless it is handed to waitUntil: the task's work is.
      background: (work) => waitUntil(work),
      watchIntervalMs: 250,
      leaseMs: 25_000, // under the 30 s a Worker may go on after its response
    },
  });
  // A fresh McpServer per request (the SDK's rule); the mrtr instance, its key ring and stores are shared.
  return createMcpHandler(
    () => {
      const server = new McpServer({ name: 'mrtr-cloudflare-example', version: '1.0.0' }, { ...mrtr.serverOptions });
      mrtr.registerTool(
        server,
        'delete_files',
        { description: 'Deletes a path after the user confirms', inputSchema: z.object({ path: z.string() }) },
        async ({ path }, _ctx, need) => {
          const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
          if (!confirm) return need.ask();
          if (confirm.action !== 'accept' || !confirm.content.ok) return { content: [{ type: 'text', text: `Kept ${path}` }] };
          return { content: [{ type: 'text', text: `Deleted ${path} (run ${runId()})` }] };
        },
      );
      mrtr.registerTool(
        server,
        'deploy',
        {
          description: 'Builds, then deploys once a person approves',
          task: 'required',
          taskInput: ['elicitation.form'],
          inputSchema: z.object({ service: z.string() }),
        },
        async ({ service }, _ctx, need) =>
          need.task(async (task) => {
            await task.status(`built ${service}, waiting for approval`);
            const answer = await task.elicit('approve', { message: `Deploy ${service} to production?`, requestedSchema: approveSchema });
            const approved = answer.action === 'accept' && answer.content.approve === true;
            return { content: [{ type: 'text', text: approved ? `Deployed ${service} (run ${runId()})` : `Not deployed: ${service}` }] };
          }),
      );
      return server;
    },
    { route: '/mcp', legacy: 'reject' },
  );
});

const usersFor = perIsolate('API_TOKENS', (text) => {
  const parsed: unknown = JSON.parse(text);
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new TypeError('API_TOKENS must be a JSON object');
  return new Map(
    Object.entries(parsed as Record<string, unknown>).filter((entry): entry is [string, string] => typeof entry[1] === 'string'),
  );
});

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const handler = serverFor(env.MRTR_KEYS, env);
    const token = /^Bearer (\S{16,256})$/.exec(request.headers.get('authorization') ?? '')?.[1];
    const user = token === undefined ? undefined : usersFor(env.API_TOKENS).get(token);
    if (user === undefined) return new Response('Unauthorized', { status: 401, headers: { 'www-authenticate': 'Bearer' } });
    // The principal is "sub:" + authInfo.extra.sub: every state and task is bound to this user.
    return handler.fetch(request, { authInfo: { token: token!, clientId: 'api-token', scopes: [], extra: { sub: user } } });
  },
};

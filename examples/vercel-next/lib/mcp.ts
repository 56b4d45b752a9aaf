import { createHash, timingSafeEqual } from 'node:crypto';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createUpstashStore } from '@mrtr/store-upstash';
import { Redis } from '@upstash/redis';
import { createMcpHandler, withMcpAuth } from 'mcp-handler';

/** What the route reads from its environment (Vercel project settings; `.env.local` in development). */
export interface RouteEnv {
  /** `MRTR_KEYS`: the key ring, the same on every instance (`npx @mrtr/cli keygen --env`). */
  MRTR_KEYS?: string | undefined;
  /** The Upstash database (the Vercel Marketplace integration sets `KV_REST_API_URL` / `KV_REST_API_TOKEN`). */
  UPSTASH_REDIS_REST_URL?: string | undefined;
  UPSTASH_REDIS_REST_TOKEN?: string | undefined;
  KV_REST_API_URL?: string | undefined;
  KV_REST_API_TOKEN?: string | undefined;
  /** `MCP_API_KEYS`: `user=key` pairs, comma-separated (stand-in for your OAuth token verification). */
  MCP_API_KEYS?: string | undefined;
  /** `MCP_AUDIENCE`: this server's public URL, bound into every state. */
  MCP_AUDIENCE?: string | undefined;
  /** `AUDIT_LIST`: the Redis list the tool appends to (its side effect). @default 'files:audit' */
  AUDIT_LIST?: string | undefined;
}

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

const required = (name: string, value: string | undefined): string => {
  if (value === undefined || value === '') throw new Error(`${name} must be set (see examples/vercel-next/README.md)`);
  return value;
};

/** Builds the MCP route: the store, the guard and the handler, from the environment. Fails at start-up when a setting is missing. */
export function createRoute(env: RouteEnv): { handler: (request: Request) => Promise<Response> } {
  const url = required('UPSTASH_REDIS_REST_URL', env.UPSTASH_REDIS_REST_URL ?? env.KV_REST_API_URL);
  const token = required('UPSTASH_REDIS_REST_TOKEN', env.UPSTASH_REDIS_REST_TOKEN ?? env.KV_REST_API_TOKEN);
  const keys = KeyRing.parse(required('MRTR_KEYS', env.MRTR_KEYS));
  const apiKeys = new Map(
    required('MCP_API_KEYS', env.MCP_API_KEYS)
      .split(',')
      .map((pair) => pair.trim().split('=') as [string, string])
      .filter(([user, key]) => user && key && key.length >= 16)
      .map(([user, key]) => [sha256(key), user]),
  );
  if (apiKeys.size === 0) throw new Error('MCP_API_KEYS must hold user=key pairs with keys of 16 characters or more');

  // Single use across every instance: one Upstash database, never a read replica (the store's scripts run on the primary).
  const store = createUpstashStore({ url, token, namespace: 'files' });
  const audit = new Redis({ url, token, enableTelemetry: false });
  const auditList = env.AUDIT_LIST ?? 'files:audit';
  const mrtr = createMrtr({ keys, codec: createHmacCodec, store, audience: env.MCP_AUDIENCE ?? 'https://files.example.com/mcp' });

  const mcp = createMcpHandler(
    (server) => {
      mrtr.registerTool(server, 'empty_trash', { description: 'Empties the trash, after a confirmation' }, async (_args, ctx, need) => {
        const answer = need.elicit('confirm', {
          message: 'Empty the trash? This cannot be undone.',
          requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
        });
        if (!answer) return need.ask(); // input_required, with a sealed, bound, single-use requestState
        if (answer.action !== 'accept' || answer.content.ok !== true) return { content: [{ type: 'text', text: 'Kept.' }] };
        // The side effect: it runs once per confirmation, whatever the retries and whichever instance gets them.
        await audit.rpush(auditList, `emptied by ${String(ctx.http?.authInfo?.extra?.sub)}`);
        return { content: [{ type: 'text', text: 'Emptied.' }] };
      });
    },
    { ...mrtr.serverOptions, serverInfo: { name: 'files', version: '1.0.0' } },
  );

  const verify = (_request: Request, bearer?: string): AuthInfo | undefined => {
    if (bearer === undefined) return undefined;
    const digest = sha256(bearer);
    for (const [known, user] of apiKeys) {
      if (timingSafeEqual(Buffer.from(known), Buffer.from(digest))) {
        return { token: bearer, clientId: 'api-key', scopes: [], extra: { sub: user } };
      }
    }
    return undefined;
  };
  return { handler: withMcpAuth(mcp, verify, { required: true }) };
}

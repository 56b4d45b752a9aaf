import { createServer } from 'node:http';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer } from '@modelcontextprotocol/server';
import { createAeadCodec } from '@mrtr/codec-aead';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createHttpHandler } from '@mrtr/mcp-server/http';
import { createRedisStore } from '@mrtr/store-redis';

const mrtr = createMrtr({
  keys: KeyRing.parse(process.env.MRTR_KEYS ?? ''), // make one with `npx @mrtr/cli keygen`
  codec: createAeadCodec, // sealed and encrypted
  store: createRedisStore({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' }), // single use, fleet-wide
  audience: 'https://files.example/mcp',
});
// A fleet: before serving, `await mrtr.guard.checkKeys()` refuses a replica whose keys differ (see "A fleet: the same keys on every replica" below).

// A fresh McpServer per request, never one shared between requests; 2025-era clients are served on sessions.
const handler = createHttpHandler(() => {
  const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
  mrtr.registerTool(server, 'whoami', {}, async (_args, _ctx, need) => {
    const name = need.elicit('name', {
      message: 'Your name?',
      requestedSchema: { type: 'object', properties: { name: { type: 'string', minLength: 1 } }, required: ['name'] },
    });
    if (!name) return need.ask();
    if (name.action !== 'accept') return need.fail('No name given');
    return { content: [{ type: 'text', text: `Hello ${name.content.name}` }] };
  });
  return server;
});

// The principal is "sub:" + authInfo.extra.sub. toNodeHandler passes req.auth on as authInfo: put your bearer-auth
// middleware in front to verify the token and set req.auth; without it every call is refused (-32600).
// For stdio: `serveStdio(factory)` with `unauthenticated: { principal: 'local', recordOutcomes: true }`.
const serve = toNodeHandler(handler);
createServer((req, res) => void serve(req, res)).listen(Number(process.env.PORT ?? 3000), '127.0.0.1');

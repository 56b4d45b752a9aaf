import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import { createAeadCodec } from '@mrtr/codec-aead';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createRedisStore } from '@mrtr/store-redis';

// MRTR_KEYS="k2:<base64url 32 bytes>,k1:<...>": the first key seals, every key opens (rotation).
export const keys = KeyRing.parse(process.env.MRTR_KEYS ?? '');
export const codec = createAeadCodec({ keys }); // encrypted and authenticated
export const store = createRedisStore({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' });

const mrtr = createMrtr({
  codec,
  keys,
  store, // each round's state is single-use across all replicas
  audience: 'https://files.example/mcp',
  onReject: ({ code, method, target }) => console.warn('mrtr reject', code, method, target),
});

export const handler = createMcpHandler(() => {
  const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
  server.registerTool('whoami', {}, mrtr.tool('whoami', async (_args, _ctx, need) => {
    const name = need.elicit('name', {
      message: 'Your name?',
      requestedSchema: { type: 'object', properties: { name: { type: 'string', minLength: 1 } }, required: ['name'] },
    });
    if (!name) return need.ask();
    if (name.action !== 'accept') return need.fail('No name given');
    return { content: [{ type: 'text', text: `Hello ${name.content.name}` }] };
  }));
  return server;
});
// Serve `handler.fetch(request, { authInfo })` behind your bearer-auth middleware (the principal is
// authInfo.extra.sub, else authInfo.clientId). For stdio: `serveStdio(factory)` with
// `unauthenticated: { principal: 'local' }`.

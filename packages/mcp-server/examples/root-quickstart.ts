// server.ts
import { createServer } from 'node:http';
import { localhostHostValidation, toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createHttpHandler } from '@mrtr/mcp-server/http';
import { createMemoryStore } from '@mrtr/store-memory';

const mrtr = createMrtr({
  keys: KeyRing.parse(process.env.MRTR_KEYS ?? ''), // from .env: `node --env-file=.env`
  codec: createHmacCodec, // signed; @mrtr/codec-aead or codec-jwe also encrypt
  store: createMemoryStore(), // single use in this process; store-redis or store-sql for a fleet
  audience: 'files',
  unauthenticated: { principal: 'local', recordOutcomes: true }, // local use only: see "Who is calling" below
});

// The factory builds a fresh McpServer for every request: never share one between requests.
const handler = createHttpHandler(() => {
  const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
  mrtr.registerTool(server, 'empty_trash', {}, async (_args, _ctx, need) => {
    const answer = need.elicit('confirm', { message: 'Empty the trash?', requestedSchema: { type: 'object', properties: {} } });
    if (!answer) return need.ask(); // input_required with a sealed, bound, single-use state
    return { content: [{ type: 'text', text: answer.action === 'accept' ? 'Emptied.' : 'Kept.' }] };
  });
  return server;
});

const serve = toNodeHandler(handler); // passes req.auth (set by your auth middleware) on as authInfo
const localOnly = localhostHostValidation(); // refuses requests for other host names (DNS rebinding)
const port = Number(process.env.PORT ?? 3000);
createServer((req, res) => localOnly(req, res) && serve(req, res)).listen(port, '127.0.0.1');
console.log(`MCP server on http://127.0.0.1:${port}/mcp`);

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { expect, it } from 'vitest';
import { fixture } from './harness.js';

/**
 * A 2025-era client over `createMcpHandler`'s default `legacy: 'stateless'` fallback: each request gets a fresh
 * instance with no initialize-time capabilities and no channel for server→client requests, so the SDK's legacy
 * shim refuses to fulfil `input_required` (tools/call → `isError`). The protected handler ran its first round
 * only; nothing was executed and no state was accepted. (Over stdio the shim works: see stdio.test.ts.)
 */
it('a 2025-era client over stateless HTTP gets the SDK shim’s isError, and nothing runs', async () => {
  const f = fixture();
  const handler = createMcpHandler(() => f.buildServer());
  const transport = new StreamableHTTPClientTransport(new URL('http://test.local/mcp'), {
    fetch: (url, init) =>
      handler.fetch(new Request(url, init), { authInfo: { token: 't', clientId: 'c', scopes: [], extra: { sub: 'alice' } } }),
  });
  const client = new Client({ name: 'old', version: '1' }, { capabilities: { elicitation: {} } });
  let elicited = 0;
  client.setRequestHandler('elicitation/create', async () => {
    elicited++;
    return { action: 'accept', content: { ok: true } };
  });
  await client.connect(transport);
  expect(client.getProtocolEra()).toBe('legacy');
  const result = await client.callTool({ name: 'delete_files', arguments: { path: '/x' } });
  expect(result.isError).toBe(true);
  expect(JSON.stringify(result.content)).toContain('per-request legacy serving cannot receive server-to-client requests');
  expect(elicited).toBe(0);
  expect(f.effects).toEqual([]);
  expect(f.rejects).toEqual([]);
  await client.close();
});

import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { expect, it } from 'vitest';
import { fixture } from './harness.js';

/**
 * A 2025-era client over `createMcpHandler`'s default `legacy: 'stateless'` fallback: each request gets a fresh
 * instance with no initialize-time capabilities and no channel for server→client requests, so nothing can be
 * asked there. mrtr treats that lane as "no capability" and answers `-32021` whose message says why and names
 * the fix (sessions: `createHttpHandler`); nothing ran, no state was minted. (Over sessions and stdio the shim
 * works: see http-handler.test.ts and stdio.test.ts.)
 */
it('a 2025-era client over stateless HTTP gets a -32021 that names the lane and the fix, and nothing runs', async () => {
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
  const error = (await client.callTool({ name: 'delete_files', arguments: { path: '/x' } }).catch((e: unknown) => e)) as ProtocolError;
  expect(error).toBeInstanceOf(ProtocolError);
  expect(error.code).toBe(-32021);
  expect(error.message).toMatch(/This request needs elicitation \(form\), but it came from a 2025-era client over stateless HTTP/);
  expect(error.data).toEqual({ requiredCapabilities: { elicitation: { form: {} } } });
  expect(elicited).toBe(0);
  expect(f.effects).toEqual([]);
  expect(f.rejects).toEqual([]);
  expect(f.events.filter((e) => e.type === 'state.minted')).toEqual([]);
  await client.close();
});

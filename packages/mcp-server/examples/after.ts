import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import * as z from 'zod/v4';

const mrtr = createMrtr({ keys: KeyRing.parse(process.env.MRTR_KEYS ?? ''), codec: createHmacCodec, audience: 'https://files.example' });
export const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
mrtr.registerTool(server, 'delete_files', { inputSchema: z.object({ path: z.string() }) }, async ({ path }, _ctx, need) => {
  const confirm = need.elicit('confirm', {
    message: `Delete ${path}?`,
    requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
  });
  if (!confirm) return need.ask(); // sealed, bound state; validated answers
  if (confirm.action !== 'accept') return need.fail(`Not deleted: ${confirm.action}`);
  if (!confirm.content.ok) return { content: [{ type: 'text', text: 'Kept.' }] };
  return { content: [{ type: 'text', text: `Deleted ${path}` }] };
});

import { McpServer } from '@modelcontextprotocol/server';
import { createMrtr } from '@mrtr/mcp-server';
import * as z from 'zod/v4';
import { codec, keys, store } from './quickstart.js';

const mrtr = createMrtr({ codec, keys, store, audience: 'https://files.example' });
export const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
server.registerTool('delete_files', { inputSchema: z.object({ path: z.string() }) },
  mrtr.tool('delete_files', async ({ path }, _ctx, need) => {
    const confirm = need.elicit('confirm', {
      message: `Delete ${path}?`,
      requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
    });
    if (!confirm) return need.ask(); // sealed, bound, single-use state; validated answers
    if (confirm.action !== 'accept') return need.fail(`Not deleted: ${confirm.action}`);
    if (!confirm.content.ok) return { content: [{ type: 'text', text: 'Kept.' }] };
    return { content: [{ type: 'text', text: `Deleted ${path}` }] };
  }),
);

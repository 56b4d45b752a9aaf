import { acceptedContent, inputRequired, McpServer } from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

export const server = new McpServer({ name: 'files', version: '1.0.0' });
server.registerTool('delete_files', { inputSchema: z.object({ path: z.string() }) }, async ({ path }, ctx) => {
  const confirm = acceptedContent<{ ok: boolean }>(ctx.mcpReq.inputResponses, 'confirm'); // not validated
  if (!confirm) {
    // Also taken for decline/cancel: the tool cannot tell them apart from "not asked yet".
    return inputRequired({
      inputRequests: {
        confirm: inputRequired.elicit({
          message: `Delete ${path}?`,
          requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
        }),
      },
    });
  }
  if (!confirm.ok) return { content: [{ type: 'text', text: 'Kept.' }] };
  return { content: [{ type: 'text', text: `Deleted ${path}` }] };
});

import { acceptedContent, inputRequired, McpServer } from '@modelcontextprotocol/server';
import * as z from 'zod/v4';

const server = new McpServer({ name: 'files', version: '1.0.0' });
server.registerTool('delete_files', { inputSchema: z.object({ path: z.string() }) }, async ({ path }, ctx) => {
  const confirm = acceptedContent<{ ok: boolean }>(ctx.mcpReq.inputResponses, 'confirm');
  if (!confirm) {
    return inputRequired({
      inputRequests: {
        confirm: inputRequired.elicit({
          message: `Delete ${path}?`,
          requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
        }),
      },
      requestState: 'unprotected', // readable, replayable, bound to nothing
    });
  }
  if (!confirm.ok) return { content: [{ type: 'text', text: 'Kept.' }] };
  return { content: [{ type: 'text', text: `Deleted ${path}` }] };
});
export { server };

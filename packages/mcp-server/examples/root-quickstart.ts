import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createMemoryStore } from '@mrtr/store-memory';

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // npx @mrtr/cli keygen
const mrtr = createMrtr({ keys, codec: createHmacCodec, store: createMemoryStore(), audience: 'files' });
export const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
mrtr.registerTool(server, 'empty_trash', {}, async (_args, _ctx, need) => {
  const answer = need.elicit('confirm', { message: 'Empty the trash?', requestedSchema: { type: 'object', properties: {} } });
  if (!answer) return need.ask(); // answers with input_required and a sealed, bound, single-use state
  return { content: [{ type: 'text', text: answer.action === 'accept' ? 'Emptied.' : 'Kept.' }] };
});

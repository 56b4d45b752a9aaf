import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createMemoryStore } from '@mrtr/store-memory';
import * as z from 'zod/v4';

declare function sendEmail(to: string, subject: string): Promise<string>;

const mrtr = createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, store: createMemoryStore(), audience: 'mail' });
const server = new McpServer({ name: 'mail', version: '1.0.0' }, { ...mrtr.serverOptions });
// A call with _meta["dev.mrtr/idempotency-key"] (or the Idempotency-Key header) runs once per key for 10 min: a
// retry with the same arguments gets the recorded result, marked _meta["dev.mrtr/replayed"]: true.
const input = z.object({ to: z.string(), subject: z.string() });
mrtr.registerTool(server, 'send_email', { inputSchema: input, idempotency: { ttlMs: 600_000 } }, async ({ to, subject }) => ({
  content: [{ type: 'text', text: `sent, message id ${await sendEmail(to, subject)}` }],
}));

// client.ts
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const client = new Client(
  { name: 'quickstart-client', version: '1.0.0' },
  { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler('elicitation/create', async (request) => {
  console.log(`server asks: ${request.params.message}`); // a real host shows this form to the user
  return { action: 'accept', content: {} };
});
const url = new URL(`http://127.0.0.1:${process.env.PORT ?? 3000}/mcp`);
await client.connect(new StreamableHTTPClientTransport(url));
const result = await client.callTool({ name: 'empty_trash', arguments: {} });
for (const block of result.content) if (block.type === 'text') console.log(block.text);
await client.close();

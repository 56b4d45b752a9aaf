import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { withMrtr } from '@mrtr/client';

const client = new Client(
  { name: 'my-host', version: '1.0.0' },
  { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler('elicitation/create', async () => ({ action: 'accept', content: { ok: true } })); // ask your user
await client.connect(new StreamableHTTPClientTransport(new URL(process.env.MCP_URL ?? 'http://127.0.0.1:3000/mcp')));

const mrtr = withMrtr(client); // rounds, safe re-sends, idempotency keys, tasks, typed errors
const result = await mrtr.callTool({ name: 'deploy', arguments: { env: 'prod' } });
console.log(result.content, result.replayed); // replayed: answered from the server's record

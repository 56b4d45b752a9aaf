import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createPostgresStore } from '@mrtr/store-sql';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'; // else a local server's default database
const store = createPostgresStore({ connectionString: url, table: 'mrtr_replay' });
await store.ensureSchema(); // idempotent and safe from many instances at once (createSqliteStore for one machine)
const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // the same ring on every instance
const mrtr = createMrtr({ keys, codec: createHmacCodec, store, audience: 'https://files.example/mcp' });
export const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
// Every state that mrtr.registerTool(server, …) mints is now single-use across every instance.
await store.close(); // on shutdown (here at once, so that this example exits)

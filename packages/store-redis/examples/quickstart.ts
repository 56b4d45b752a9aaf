import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createRedisStore } from '@mrtr/store-redis';

// A Redis that never evicts (maxmemory-policy noeviction, or its own instance): the store checks at start-up.
const store = createRedisStore({ url: process.env.REDIS_URL, namespace: 'files' });
const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // the same ring on every instance
const mrtr = createMrtr({ keys, codec: createHmacCodec, store, audience: 'https://files.example/mcp' });
export const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
// Every state that mrtr.registerTool(server, …) mints is now single-use across every instance.
await store.close(); // on shutdown (here at once, so that this example exits)

import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import { createMrtr } from '@mrtr/mcp-server';
import { createMemoryStore } from '@mrtr/store-memory';

const store = createMemoryStore({ maxEntries: 100_000 }); // size it: rate × (ttl + 2 × skew) × headroom, below
const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // npx @mrtr/cli keygen
// One principal may hold at most a quarter of the store: 25,000 live states (mintQuota bounds states alive at once).
const mrtr = createMrtr({ keys, codec: createHmacCodec, store, audience: 'files', mintQuota: { max: 25_000 } });
export const server = new McpServer({ name: 'files', version: '1.0.0' }, { ...mrtr.serverOptions });
// Every state that mrtr.registerTool(server, …) mints is now single-use in this process.

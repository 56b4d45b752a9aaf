import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, MrtrError } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';

const keys = KeyRing.generate(); // one process: a key per start is fine
const store = createMemoryStore({ maxEntries: 100_000 }); // full → ERR_STORE_FULL, never evicts a live id
const guard = createStateGuard({ keys, codec: createHmacCodec, store, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request);
console.log((await guard.open(requestState, request)).data); // first use: accepted
await guard.open(requestState, request).catch((error: unknown) => console.log(MrtrError.is(error) && error.code)); // ERR_STATE_REPLAYED
await store.close();

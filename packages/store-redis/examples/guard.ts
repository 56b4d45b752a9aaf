import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, MrtrError } from '@mrtr/core';
import { createRedisStore } from '@mrtr/store-redis';

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // the same ring on every instance
const store = createRedisStore({ url: process.env.REDIS_URL, namespace: 'my-mcp-server' }); // one SET NX PXAT per use
const guard = createStateGuard({ keys, codec: createHmacCodec, store, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request);
console.log((await guard.open(requestState, request)).data); // first use, on any instance: accepted
await guard.open(requestState, request).catch((error: unknown) => console.log(MrtrError.is(error) && error.code)); // ERR_STATE_REPLAYED
await store.close(); // quits the connection the store opened (an injected `client` is left open)

import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, MrtrError } from '@mrtr/core';
import { createUpstashStore } from '@mrtr/store-upstash';

// From the Upstash console, or Vercel's Upstash integration (it sets KV_REST_API_URL and KV_REST_API_TOKEN).
const { UPSTASH_REDIS_REST_URL: url, UPSTASH_REDIS_REST_TOKEN: token } = process.env;
const store = createUpstashStore({ url, token, namespace: 'my-mcp-server' }); // one EVALSHA per use, pipelined
const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // the same ring on every instance
const guard = createStateGuard({ keys, codec: createHmacCodec, store, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request);
console.log((await guard.open(requestState, request)).data); // first use, on any instance: accepted
await guard.open(requestState, request).catch((error: unknown) => console.log(MrtrError.is(error) && error.code)); // ERR_STATE_REPLAYED

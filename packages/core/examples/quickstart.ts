import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';

const guard = createStateGuard({
  keys: KeyRing.parse(process.env.MRTR_KEYS ?? ''), // make one with `npx @mrtr/cli keygen`
  codec: createHmacCodec, // built on those keys
  store: createMemoryStore(), // single use (one process; use store-redis or store-sql for a fleet)
  audience: 'https://mcp.example.com/mcp',
});

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request); // goes out in the InputRequiredResult
const state = await guard.open(requestState, request); // on the retry: every check, then single use
console.log(state.data, state.flow.round);

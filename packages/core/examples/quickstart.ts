import { type StateCodec, KeyRing, createStateGuard } from '@mrtr/core';

declare const codec: StateCodec; // e.g. createHmacCodec({ keys }) from @mrtr/codec-hmac

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // "k2:<base64url>,k1:<base64url>"
const guard = createStateGuard({ codec, keys, audience: 'https://mcp.example.com/mcp', ttlMs: 600_000 });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request); // goes out in the InputRequiredResult
const state = await guard.open(requestState, request); // on the retry: every check, then single use
console.log(state.data, state.flow.round);

import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing, createStateGuard } from '@mrtr/core';

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // "k2:<base64url>,k1:<base64url>", the first one seals
// m1.<kid>.<base64url(JSON)>.<HMAC-SHA256>: signed, NOT encrypted
const guard = createStateGuard({ keys, codec: createHmacCodec, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ step: 1, confirmed: false }, request); // tamper-proof, but readable
const state = await guard.open(requestState, request); // MAC, then expiry, audience, principal, binding, flow
console.log(state.data, state.kid);
// Anyone holding the token can read the claims, so never put secrets in `data`:
const body = requestState.split('.')[2] ?? '';
console.log(JSON.parse(Buffer.from(body, 'base64url').toString('utf8')).data);

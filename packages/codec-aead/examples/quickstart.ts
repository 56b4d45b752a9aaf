import { createAeadCodec } from '@mrtr/codec-aead';
import { KeyRing, createStateGuard } from '@mrtr/core';

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // "k2:<base64url>,k1:<base64url>", the first one seals
// x1.<kid>.<nonce ‖ XChaCha20-Poly1305(msgpack claims) ‖ tag>
const guard = createStateGuard({ keys, codec: createAeadCodec, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ step: 1, answers: { confirm: true } }, request); // encrypted, compact
const state = await guard.open(requestState, request); // decrypts, then expiry, audience, principal, binding, flow
console.log(state.data, state.kid);
// The client sees only the version, the kid and an opaque body:
console.log(requestState.slice(0, 6), requestState.length, requestState.includes('confirm'));

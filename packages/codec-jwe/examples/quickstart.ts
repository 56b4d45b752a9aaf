import { createJweCodec, JWE_KEY_PURPOSE } from '@mrtr/codec-jwe';
import { KeyRing, createStateGuard } from '@mrtr/core';
import { jwtDecrypt } from 'jose';

const keys = KeyRing.parse(process.env.MRTR_KEYS ?? ''); // "k2:<base64url>,k1:<base64url>", the first one seals
// compact JWE: alg "dir", enc "A256GCM", kid in the header
const guard = createStateGuard({ keys, codec: createJweCodec, audience: 'https://mcp.example.com/mcp' });

const request = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['/tmp/a'] }, principal: 'alice' };
const requestState = await guard.mint({ confirmed: false }, request); // encrypted: the client cannot read it
const state = await guard.open(requestState, request); // decrypts, then runs every guard check
console.log(state.data, state.kid);
// Any JOSE library holding the CEK reads it too (here jose, e.g. in another service or a debugger):
const cek = keys.subkeySync(keys.primaryKid, JWE_KEY_PURPOSE)!; // HKDF subkey, 32 bytes
console.log((await jwtDecrypt(requestState, cek, { audience: 'https://mcp.example.com/mcp' })).payload.mrtr);

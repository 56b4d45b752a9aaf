// Frozen wire vectors of the `m1` format: fixed secrets and claims in, the exact token out, and back.
// The token strings were produced once by this codec and pasted here. They must never change: a change
// of the format (layout, JSON encoding, MAC input, key derivation) needs a new format version, with
// these vectors kept for `m1` for as long as `m1` tokens are accepted.
import { KeyRing } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { describe, expect, it } from 'vitest';
import { createHmacCodec } from '../src/index.js';

const SECRETS = { wv1: 'bXJ0ciBobWFjIHdpcmUgdmVjdG9yIHNlY3JldCAjMDE', wv0: 'bXJ0ciBobWFjIHdpcmUgdmVjdG9yIHNlY3JldCAjMDA' };
const RING = new KeyRing([
  { kid: 'wv1', secret: SECRETS.wv1 },
  { kid: 'wv0', secret: SECRETS.wv0 },
]);
const CLAIMS: StateClaims = {
  v: 1,
  iat: 1767225600000,
  exp: 1767226200000,
  jti: 'AAECAwQFBgcICQoLDA0ODw',
  aud: 'https://mcp.example.com/mcp',
  sub: 'c3ViamVjdC10YWctMDEyMzQ1Ng',
  req: { m: 'tools/call', t: 'delete_files', d: 'ZGlnZXN0LW9mLXRoZS1hcmd1bWVudHMtMDEyMzQ1Njc' },
  flow: { id: 'Zmxvdy1pZC0wMTIzNDU2Nw', round: 2, deadline: 1767227400000 },
  data: { step: 2, answers: { confirm: true }, text: 'ünïcødé ✓ 😀', list: [1, -1.5, null, false, 'a\u2028b'] },
};
const VECTORS: { kid: string; token: string }[] = [
  {
    kid: 'wv1',
    token:
      'm1.wv1.eyJ2IjoxLCJpYXQiOjE3NjcyMjU2MDAwMDAsImV4cCI6MTc2NzIyNjIwMDAwMCwianRpIjoiQUFFQ0F3UUZCZ2NJQ1FvTERBME9EdyIsImF1ZCI6Imh0dHBzOi8vbWNwLmV4YW1wbGUuY29tL21jcCIsInN1YiI6ImMzVmlhbVZqZEMxMFlXY3RNREV5TXpRMU5nIiwicmVxIjp7Im0iOiJ0b29scy9jYWxsIiwidCI6ImRlbGV0ZV9maWxlcyIsImQiOiJaR2xuWlhOMExXOW1MWFJvWlMxaGNtZDFiV1Z1ZEhNdE1ERXlNelExTmpjIn0sImZsb3ciOnsiaWQiOiJabXh2ZHkxcFpDMHdNVEl6TkRVMk53Iiwicm91bmQiOjIsImRlYWRsaW5lIjoxNzY3MjI3NDAwMDAwfSwiZGF0YSI6eyJzdGVwIjoyLCJhbnN3ZXJzIjp7ImNvbmZpcm0iOnRydWV9LCJ0ZXh0Ijoiw7xuw69jw7hkw6kg4pyTIPCfmIAiLCJsaXN0IjpbMSwtMS41LG51bGwsZmFsc2UsImHigKhiIl19fQ.FEDLASTxC7uvtMc2HgP-TnQJ_vh5zQE-rnVEwP8ybfY',
  },
  {
    kid: 'wv0',
    token:
      'm1.wv0.eyJ2IjoxLCJpYXQiOjE3NjcyMjU2MDAwMDAsImV4cCI6MTc2NzIyNjIwMDAwMCwianRpIjoiQUFFQ0F3UUZCZ2NJQ1FvTERBME9EdyIsImF1ZCI6Imh0dHBzOi8vbWNwLmV4YW1wbGUuY29tL21jcCIsInN1YiI6ImMzVmlhbVZqZEMxMFlXY3RNREV5TXpRMU5nIiwicmVxIjp7Im0iOiJ0b29scy9jYWxsIiwidCI6ImRlbGV0ZV9maWxlcyIsImQiOiJaR2xuWlhOMExXOW1MWFJvWlMxaGNtZDFiV1Z1ZEhNdE1ERXlNelExTmpjIn0sImZsb3ciOnsiaWQiOiJabXh2ZHkxcFpDMHdNVEl6TkRVMk53Iiwicm91bmQiOjIsImRlYWRsaW5lIjoxNzY3MjI3NDAwMDAwfSwiZGF0YSI6eyJzdGVwIjoyLCJhbnN3ZXJzIjp7ImNvbmZpcm0iOnRydWV9LCJ0ZXh0Ijoiw7xuw69jw7hkw6kg4pyTIPCfmIAiLCJsaXN0IjpbMSwtMS41LG51bGwsZmFsc2UsImHigKhiIl19fQ.HJCyOqIzUnvp_O5xI_83Q-A9F5k5H7ocPVmtGrIecDE',
  },
];

/** The ring with `kid` as primary: what sealed that vector. */
const sealerOf = (kid: string) => createHmacCodec(new KeyRing([{ kid, secret: SECRETS[kid as keyof typeof SECRETS] }]));

describe('m1 wire vectors (frozen: a change needs a new format version)', () => {
  it.each(VECTORS)('seals the fixed claims under $kid to exactly the frozen token', ({ kid, token }) => {
    expect(sealerOf(kid).seal(CLAIMS)).toBe(token);
  });

  it.each(VECTORS)('opens the frozen $kid token to exactly the fixed claims', ({ kid, token }) => {
    expect(createHmacCodec(RING).unseal(token)).toStrictEqual({ claims: CLAIMS, kid });
  });
});

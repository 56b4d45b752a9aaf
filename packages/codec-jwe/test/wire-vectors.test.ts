// Frozen wire vectors of the compact JWE (`dir` + `A256GCM`) format: fixed secrets, claims and IV in,
// the exact token out, and back on both engines. The token strings were produced once by this codec and
// pasted here. They must never change: a change of the format (header, JWT claims mapping, cipher, key
// derivation) needs a new format version, with these vectors kept for as long as such tokens are accepted.
import { KeyRing } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { randomBytes } from '@mrtr/core/encoding';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createCodecWithEngine } from '../src/codec.js';
import { engine as nodeEngine } from '../src/engine/node.js';
import { engine as webEngine } from '../src/engine/web.js';
import { createJweCodec } from '../src/index.js';

// The IV is the only randomness of a seal on the node engine: `randomBytes` of @mrtr/core/encoding,
// fixed here per call. (The web engine lets jose draw the IV, so only its open is checked.)
vi.mock('@mrtr/core/encoding', async (importOriginal) => {
  const actual = await importOriginal<typeof import('@mrtr/core/encoding')>();
  return { ...actual, randomBytes: vi.fn(actual.randomBytes) };
});
const IV = Buffer.from('mrtr jwe iv!', 'latin1');

const SECRETS = { wv1: 'bXJ0ciBqd2Ugd2lyZSB2ZWN0b3Igc2VjcmV0ICMwMDE', wv0: 'bXJ0ciBqd2Ugd2lyZSB2ZWN0b3Igc2VjcmV0ICMwMDA' };
const RING = new KeyRing([
  { kid: 'wv1', secret: SECRETS.wv1 },
  { kid: 'wv0', secret: SECRETS.wv0 },
]);
const CLAIMS: StateClaims = {
  v: 1,
  iat: 1767225600123,
  exp: 1767226200456,
  jti: 'ICEiIyQlJicoKSorLC0uLw',
  aud: 'https://mcp.example.com/mcp',
  sub: 'and1LXN1YmplY3QtdGFnLTAx',
  req: { m: 'resources/read', t: 'file:///srv/report.txt', d: 'and1LWRpZ2VzdC1vZi10aGUtYXJndW1lbnRzLTAx' },
  flow: { id: 'and1LWZsb3ctaWQtMDE', round: 1, deadline: 1767227400789 },
  data: { form: { name: 'Ada', agree: true }, nested: [[{ deep: [1, 2, { x: null }] }]], unicode: 'ünïcødé ✓ 😀 \u0000' },
};
const VECTORS: { kid: string; token: string }[] = [
  {
    kid: 'wv1',
    token:
      'eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIiwia2lkIjoid3YxIn0..bXJ0ciBqd2UgaXYh.DG8ocHlKjsSt5KhFzTuABr01ABHsK9HDuOLNTFgfFsDoXTncmG0xfhkdR0OwXUrPGvl5Uv46ajHHgcCUkKrX2RujEQf4zRdkMGoY8Ddv6akthALHCz-TcMA74a0-EoadrQ33eyQ0fVs3_A4DD9Z3SgHu09UGhVXEF1MaPMdqwRSUEbn2hc-2Zi9rUA3uCYy4U3ocatVP-hy15tC5fZs9LIGq4kBsgOJJaPq5USb7NfYEqW0Xh7UpU7Xk3vi3Ge6SoCrpDIWWJQRvnVDsRM1SW8Tg1e-YsNcQKgYGWpI_s0A0SPs3CyPALH1ciBmHZq-dy41spCxyslNwX21l1xYmy3vwSwysH3hCSXPNqxSdZ7yeZTAlWI0EIxw0nxB0w29gpbLWqZwEHKJsOo9CLvKVhfSuDC168FGGfmsgHGVBBB5jWEXJogHjeFvWEJo73IwVFa2onifG6zd-EhXhckQPG8sN9iTRrIn52Vpz61XXfzkka5Mebzdu5XNRd2EsMpYU9ftRwvxQ_eMR75_PoMzQvbGumJNga0rHaFpXLhsRq3EUu9jyo_4_H_XY9YyQjABu2pDjZXqW-fK2GkMViVDORdgv232Q5nqaVw.rrCfrPMUvKO7tjevK-FQ5g',
  },
  {
    kid: 'wv0',
    token:
      'eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIiwia2lkIjoid3YwIn0..bXJ0ciBqd2UgaXYh.rL981QchiWYlvugcaa0SR6H3XHhYAg9j7Zdv2taGHS5cUaJyWZZ0uJ5Z1ShIj9MbElPCFOnGChcQ31v_PZDs1zcz_2ja7g48QOd4Kn8UGUpmj4L2aLFM9m5nJA-DEMbB6nRoS-N0Qmdr-vTV95kxJCPz9bzBhCYHiU_fdolKBpnPEPW4Rjh0IAdU0TuKag5J2qcU9TRhoufDyuCTn8q4jeebHheEFKAbJzTyeqo64kY6lYweBKFWNjV6Z2wBNGLimel8Arc5f1IwEeZThj53cFiqeYRXbLrV3KfG5Wx6YE_pMDON4LwLtVfD6gRdCU3dbnhp1qnXYqjJxFzzU8N7wgximiDzcxnUrKYJe3X-85iUU7JQh1aVO2p2dBJEK-tHp-kttONicKPlJR0HpAoFoJzWv237Dp2pchrnD5aWOoxCFKnt6pTk9nowol6FwMb0WQlqAulaSduljaGXp17ygyIXXV0sX642HgMHPbgdZISDlYA47yByePd9bYvdpqGkKxdxZC7hEoPXtgNXa9k8T7W-e9UgZGICg5GE4VoQkofD-w-gJ8C_72Xoyk6BLnqsaxf4tI0qr7hh9suzmiwVHOeWL59G0ytD-w.emiQR4-92dwbRSrQlhC68w',
  },
];

const sealerOf = (kid: string) => createJweCodec(new KeyRing([{ kid, secret: SECRETS[kid as keyof typeof SECRETS] }]));

describe('compact JWE wire vectors (frozen: a change needs a new format version)', () => {
  afterEach(() => {
    vi.mocked(randomBytes).mockClear();
  });

  it.each(VECTORS)('seals the fixed claims under $kid with the fixed IV to exactly the frozen token', ({ kid, token }) => {
    const codec = sealerOf(kid);
    vi.mocked(randomBytes).mockReturnValueOnce(Uint8Array.from(IV));
    expect(codec.seal(CLAIMS)).toBe(token);
    expect(vi.mocked(randomBytes).mock.calls).toEqual([[12]]);
  });

  it.each(VECTORS)(
    'opens the frozen $kid token to exactly the fixed claims on the node and the web (jose) engine',
    async ({ kid, token }) => {
      expect(createJweCodec(RING).unseal(token)).toStrictEqual({ claims: CLAIMS, kid });
      expect(createCodecWithEngine(nodeEngine, RING).unseal(token)).toStrictEqual({ claims: CLAIMS, kid });
      const web = createCodecWithEngine(webEngine, RING).unseal(token);
      expect(web).toBeInstanceOf(Promise);
      expect(await web).toStrictEqual({ claims: CLAIMS, kid });
    },
  );
});

// Frozen wire vectors of the `x1` format: fixed secrets, claims and nonce in, the exact token out, and
// back. The token strings were produced once by this codec and pasted here. They must never change: a
// change of the format (layout, MessagePack encoding, cipher, associated data, key derivation) needs a
// new format version, with these vectors kept for `x1` for as long as `x1` tokens are accepted.
import { KeyRing } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { randomBytes } from '@mrtr/core/encoding';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createAeadCodec } from '../src/index.js';

// The nonce is the only randomness of a seal: `randomBytes` of @mrtr/core/encoding, fixed here per call.
vi.mock('@mrtr/core/encoding', async (importOriginal) => {
  const actual = await importOriginal<typeof import('@mrtr/core/encoding')>();
  return { ...actual, randomBytes: vi.fn(actual.randomBytes) };
});
const NONCE = Buffer.from('6d7274722061656164206e6f6e63652c2032342062797465', 'hex');

const SECRETS = { wv1: 'bXJ0ciBhZWFkIHdpcmUgdmVjdG9yIHNlY3JldCAjMDE', wv0: 'bXJ0ciBhZWFkIHdpcmUgdmVjdG9yIHNlY3JldCAjMDA' };
const RING = new KeyRing([
  { kid: 'wv1', secret: SECRETS.wv1 },
  { kid: 'wv0', secret: SECRETS.wv0 },
]);
const CLAIMS: StateClaims = {
  v: 1,
  iat: 1767225600000,
  exp: 1767226200000,
  jti: 'EBESExQVFhcYGRobHB0eHw',
  aud: 'https://mcp.example.com/mcp',
  sub: 'YWVhZC1zdWJqZWN0LXRhZy0wMQ',
  req: { m: 'prompts/get', t: 'review', d: 'YWVhZC1kaWdlc3Qtb2YtdGhlLWFyZ3VtZW50cy0wMQ' },
  flow: { id: 'YWVhZC1mbG93LWlkLTAx', round: 3, deadline: 1767227400000 },
  data: {
    n: [0, 1, -1, 127, 128, -33, 65535, 2 ** 32, -(2 ** 53 - 1), 0.5, -1.5e-7],
    s: ['', 'x'.repeat(40), 'ünï 😀'],
    o: { t: true, f: false, z: null },
  },
};
const VECTORS: { kid: string; token: string }[] = [
  {
    kid: 'wv1',
    token:
      'x1.wv1.bXJ0ciBhZWFkIG5vbmNlLCAyNCBieXRl1CMp5yqTfSOCoSosqFU8MAYppQqStFWzf-gqLAMZzH0Jt6YRyrdDPmVlhs6mrtKEp49Chl7wQuinGj2LFQHrpc9Bwy_W3yxs3NE92rGfk1uISKrTIYOeZL8Q4nQLYXolj1djOVC4hmSNtkF985RqHWT36sIPMrtvHKC8eq-l0Rpcf0fYyqmtxFLbJzBKw4TjVib6lKaXPTfseOBDwXPSZpayQYNx9WeRpofvC6AYUMItipBkRljGLC1T10yx2Uf3pr6y3qgEp582_6RtyO1aPauSOsOVsCfFNr4mT2RkPxV-e35F_-cohsJx1238RTN4wA-9ksqal_al1hIRlJmKe9vX8o0ueubOLpGpWj2T1X2ME6gSga3rj-Yd8FmZeYSrb-4A4AYMmC2fozKxR99Xid20vN74UPY_Q8b_4a--5eEiCholvIXgNEviS4Db-7ei9Yz75Q7kgbK2bXKH2dlGQsmbDsj4btwWpw8mfaaV37BWuO8zmmN9MFa9opkwBFGKQ5aR8u6z',
  },
  {
    kid: 'wv0',
    token:
      'x1.wv0.bXJ0ciBhZWFkIG5vbmNlLCAyNCBieXRlMmiMah5moIK8pjr4JSEXiUh17b7QBjA__1TVkagevZbDCW5R9qocIqrOpVEbPE0kvyJSJ1-T98x0O1cS6BcN-kcC69mC6_bkMYZlKonyeBRbudsl44bQJvalMyqJU0pYM0heXzAKgl8BN94JoZDHuqfEWgwwaWox5c1hru1wgW_RVZyRsFhYK56b20i_BK_sbLXn5kTdLpVvNIe2FNEOtOIH9CRWTp-KHBKsl_eN5SQ9AVkKRzibeta2Fs5DE2fdmfBInGR0f7F7-YLBJ4ZyI3dIdJMkSn6CjArLSbLaeOuyK8OVWQlDGiB7ZmKP7bKzNX2mYudjAV6OZ2C36MD_2EZ3moPvZSGsDK2UjfN_SiLcREeWM_qHE_QGiy5XWUMbkb7jWfpIkswJMM9dsY2JrMwVFfQNfZg2qeZwhgQWY1SGzTRVOGDbSPlrf58u9T5HWzscNVTYe4T7Qy13D5ei3Ta17GQgc5v5s3wdW_AAzA77OSVq91WhRjP-_Vq-EjH9j81Rj20_',
  },
];

const sealerOf = (kid: string) => createAeadCodec(new KeyRing([{ kid, secret: SECRETS[kid as keyof typeof SECRETS] }]));

describe('x1 wire vectors (frozen: a change needs a new format version)', () => {
  afterEach(() => {
    vi.mocked(randomBytes).mockClear();
  });

  it.each(VECTORS)('seals the fixed claims under $kid with the fixed nonce to exactly the frozen token', ({ kid, token }) => {
    const codec = sealerOf(kid);
    vi.mocked(randomBytes).mockReturnValueOnce(Uint8Array.from(NONCE));
    expect(codec.seal(CLAIMS)).toBe(token);
    expect(vi.mocked(randomBytes).mock.calls).toEqual([[24]]);
  });

  it.each(VECTORS)('opens the frozen $kid token to exactly the fixed claims', ({ kid, token }) => {
    expect(createAeadCodec(RING).unseal(token)).toStrictEqual({ claims: CLAIMS, kid });
  });
});

import { KeyRing, generateKey } from '@mrtr/core';
import { ok } from '../assert.js';
import { sampleClaims } from '../claims.js';
import { type CodecSuite, deepClaimsEqual, ring } from './context.js';

/** Keys: a wrong secret, an unknown kid and rotation by kid. */
export function keyProperties(suite: CodecSuite): void {
  const { factory, test, expectRejected } = suite;
  test('rejects a token sealed with another secret under the same kid', async () => {
    const codecA = await factory(ring('k1'));
    const codecB = await factory(ring('k1'));
    const token = await codecA.seal(sampleClaims({ n: 1 }));
    await expectRejected(codecB, token, 'wrong key', ['ERR_STATE_INTEGRITY']);
  });

  test('rejects a token whose kid is not in the ring with ERR_KEY_UNKNOWN', async () => {
    const sealer = await factory(ring('k9'));
    const opener = await factory(ring('k1'));
    await expectRejected(opener, await sealer.seal(sampleClaims({ n: 1 })), 'unknown kid', ['ERR_KEY_UNKNOWN']);
  });

  test('supports rotation by kid', async () => {
    const k1 = { kid: 'k1', secret: generateKey() };
    const k2 = { kid: 'k2', secret: generateKey() };
    const old = await factory(new KeyRing([k1]));
    const rotated = await factory(new KeyRing([k2, k1]));
    const retired = await factory(new KeyRing([k2]));
    const claims = sampleClaims({ rotation: true });
    const oldToken = await old.seal(claims);
    const openedOld = await rotated.unseal(oldToken);
    ok(openedOld.kid === 'k1' && deepClaimsEqual(openedOld.claims, claims), 'an old kid must open while in the ring');
    const newToken = await rotated.seal(claims);
    ok((await rotated.unseal(newToken)).kid === 'k2', 'the primary key must seal');
    ok((await retired.unseal(newToken)).kid === 'k2', 'a token of the new primary must open after the old key is removed');
    await expectRejected(retired, oldToken, 'old kid after removal', ['ERR_KEY_UNKNOWN']);
    await expectRejected(old, newToken, 'new kid before it is known', ['ERR_KEY_UNKNOWN']);
  });
}

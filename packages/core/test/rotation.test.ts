// Key rotation through the guard (not only per codec): a state sealed under the previous primary key still opens,
// bound to the same principal, after a new primary is put first; the flow goes on under the new key; and once the
// old key is dropped its states are refused. The principal tag is keyed by the state's own kid, so rotating the
// primary must not change who a state belongs to.
import { describe, expect, it } from 'vitest';
import { createStateGuard, generateKey, KeyRing, MrtrError } from '../src/index.js';
import { fakeClock, req, testCodec, testStore } from './helpers.js';

describe('key rotation through the guard', () => {
  it('opens an old-primary state after rotation, for its principal only; continues under the new key; refuses it once the key is dropped', async () => {
    const clock = fakeClock();
    const store = testStore(clock.now);
    const k1 = { kid: 'k1', secret: generateKey() };
    const k2 = { kid: 'k2', secret: generateKey() };
    const guardOn = (keys: KeyRing) => createStateGuard({ codec: testCodec, keys, store, audience: 'aud-1', now: clock.now });

    const before = guardOn(new KeyRing([k1]));
    const token = await before.mint({ step: 1 }, req());
    const stale = await before.mint({ step: 1 }, req());
    expect(token.startsWith('k1.')).toBe(true);

    // Rotation: k2 seals, k1 still opens.
    const after = guardOn(new KeyRing([k2, k1]));
    await expect(after.verify(token, req({ principal: 'mallory' }))).rejects.toMatchObject({ code: 'ERR_STATE_PRINCIPAL' });
    const opened = await after.open(token, req());
    expect(opened).toMatchObject({ kid: 'k1', data: { step: 1 } });
    const next = await after.mint({ step: 2 }, req(), { continues: opened });
    expect(next.startsWith('k2.')).toBe(true);
    const round2 = await after.open(next, req());
    expect(round2.flow).toMatchObject({ id: opened.flow.id, round: 2 });

    // k1 dropped: its states are refused, whoever sends them.
    const dropped = guardOn(new KeyRing([k2]));
    const error = await dropped.open(stale, req()).catch((e: unknown) => e);
    expect(MrtrError.is(error) && error.code).toBe('ERR_KEY_UNKNOWN');
  });
});

import { createStateGuard, generateKey, KeyRing, MrtrError, type RequestContext } from '@mrtr/core';
import { base64urlEncode } from '@mrtr/core/encoding';
import type { MrtrEvent } from '@mrtr/core/events';
import { fail, ok } from '../assert.js';
import type { CodecSuite } from './context.js';

/** Shortest run of characters shared by an event's JSON and a secret that counts as a leak. */
const LEAK_WINDOW = 12;

function leaks(text: string, secret: string): boolean {
  if (secret.length < LEAK_WINDOW) return text.includes(secret);
  for (let i = 0; i + LEAK_WINDOW <= secret.length; i += LEAK_WINDOW >> 1) {
    if (text.includes(secret.slice(i, i + LEAK_WINDOW))) return true;
  }
  return false;
}

/**
 * With this codec under a state guard, the guard's events (`onEvent`) report the codec's id, the token's size and
 * the key id, and never carry token text, key material, the principal, arguments or sealed data, whatever happens:
 * a round trip, a next round, a tampered token, another principal's token.
 */
export function eventProperties(suite: CodecSuite): void {
  suite.test('guard events name the codec and carry no token, key, principal, argument or sealed data', async () => {
    const secret = generateKey();
    const keys = new KeyRing([{ kid: 'k1', secret }]);
    const events: MrtrEvent[] = [];
    const guard = createStateGuard({ keys, codec: suite.factory, audience: 'events-aud', onEvent: (e) => events.push(e) });
    const marker = `EV-${base64urlEncode(crypto.getRandomValues(new Uint8Array(12)))}`;
    const request: RequestContext = {
      method: 'tools/call',
      target: 'tool',
      arguments: { arg: `${marker}-arg` },
      principal: `${marker}-who`,
    };
    const data = { answer: `${marker}-data` };
    const t1 = await guard.mint(data, request);
    const s1 = await guard.open(t1, request);
    const t2 = await guard.mint(data, request, { continues: s1 });
    const middle = Math.floor(t2.length / 2);
    const tampered = t2.slice(0, middle) + String.fromCharCode(t2.charCodeAt(middle) ^ 1) + t2.slice(middle + 1);
    for (const [token, who] of [
      [tampered, request],
      [t2, { ...request, principal: `${marker}-other` }],
    ] as const) {
      try {
        await guard.open(token, who);
        fail(`${suite.label}: a tampered or foreign token was accepted`);
      } catch (error) {
        ok(MrtrError.is(error), `${suite.label}: the guard threw a non-MrtrError`);
      }
    }
    const types = events.map((e) => e.type);
    ok(
      JSON.stringify(types) ===
        JSON.stringify(['flow.started', 'state.minted', 'state.opened', 'state.minted', 'state.rejected', 'state.rejected']),
      `${suite.label}: unexpected event sequence ${JSON.stringify(types)}`,
    );
    const codecId = guard.codec.id;
    for (const event of events) {
      ok(event.codec === codecId, `${suite.label}: an event names codec "${event.codec}", not "${codecId}"`);
      if (event.type === 'state.minted') ok(event.tokenBytes === (event.round === 1 ? t1 : t2).length, `${suite.label}: wrong tokenBytes`);
      if (event.type === 'state.minted' || event.type === 'state.opened') ok(event.kid === 'k1', `${suite.label}: wrong kid`);
    }
    const text = JSON.stringify(events);
    const subkey = base64urlEncode((await keys.subkey('k1', 'mrtr/principal-tag/v1'))!);
    const secrets = [secret, subkey, marker, t1, t2, tampered, s1.claims.jti, s1.flow.id, s1.claims.sub];
    for (const s of secrets) ok(!leaks(text, s), `${suite.label}: an event carries secret or sealed text`);
  });
}

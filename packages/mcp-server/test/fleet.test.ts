// A fleet at start: createMrtr passes allowEphemeralKeys to the guard (a generated key with a shared store is refused
// without it), and mrtr.guard.checkKeys() is the start-up check that names the kid a replica gets wrong.
import { randomBytes } from 'node:crypto';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing, type ReplayStore } from '@mrtr/core';
import type { KeyFingerprint } from '@mrtr/core/store';
import { createMrtr } from '@mrtr/mcp-server';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';

/** A memory store declared shared, with fingerprints kept as the contract says (first writer wins). */
function sharedStore(records: Map<string, KeyFingerprint>): ReplayStore {
  const store = createMemoryStore();
  return {
    consume: (id, exp) => store.consume(id, exp),
    close: () => store.close(),
    capabilities: { shared: true, keyExchange: true, clock: false, leases: false, epoch: false },
    keyFingerprints: async (offer) => {
      for (const r of offer) if (!records.has(r.kid)) records.set(r.kid, r);
      return [...records.values()];
    },
  };
}

describe('createMrtr on a fleet', () => {
  it('refuses a generated key with a shared store unless allowEphemeralKeys: true (passed through to the guard)', () => {
    const store = sharedStore(new Map());
    expect(() => createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, store, audience: 'a' })).toThrow(
      /createStateGuard: a generated key .* allowEphemeralKeys: true/,
    );
    expect(() =>
      createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, store, audience: 'a', allowEphemeralKeys: 1 as never }),
    ).toThrow(TypeError);
    const mrtr = createMrtr({ keys: KeyRing.generate(), codec: createHmacCodec, store, audience: 'a', allowEphemeralKeys: true });
    expect(typeof mrtr.guard.checkKeys).toBe('function');
  });

  it('mrtr.guard.checkKeys() passes for the fleet key and names the kid another secret is held under', async () => {
    const records = new Map<string, KeyFingerprint>();
    const k1 = { kid: 'k1', secret: randomBytes(32) };
    const replica = (secret: Uint8Array) =>
      createMrtr({ keys: new KeyRing([{ kid: 'k1', secret }]), codec: createHmacCodec, store: sharedStore(records), audience: 'a' });
    expect(await replica(k1.secret).guard.checkKeys()).toEqual({ checked: true, fleet: ['k1'] });
    expect(await replica(k1.secret).guard.checkKeys()).toEqual({ checked: true, fleet: ['k1'] });
    await expect(replica(randomBytes(32)).guard.checkKeys()).rejects.toMatchObject({
      code: 'ERR_KEY_MISMATCH',
      kid: 'k1',
      reason: 'secret',
    });
  });
});

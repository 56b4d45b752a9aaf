// Fail closed on a fleet: a generated key with a store shared across processes is refused unless opted in, and a
// replica whose ring cannot open what the fleet seals is caught by the fleet check (keyed fingerprints kept in the
// shared store, never keys), with an error naming the kid.
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { applyKeyFingerprintOffer, type KeyFingerprint } from '../src/entry-store.js';
import { checkFleetKeys, keyFingerprint } from '../src/keys/fleet.js';
import { createStateGuard, generateKey, KeyRing, type ReplayStore } from '../src/index.js';
import { isServerFault } from '../src/entry-errors.js';
import { fakeClock, testCodec, testStore } from './helpers.js';

/** A shared store as the contract of `keyFingerprints` describes it (first writer wins, expiry extended on a match). */
function fleetStore(now: () => number): ReplayStore & { records: Map<string, KeyFingerprint>; down: boolean } {
  const base = testStore(now);
  const records = new Map<string, KeyFingerprint>();
  return {
    ...base,
    capabilities: { ...base.capabilities, shared: true, keyExchange: true },
    records,
    down: false,
    async keyFingerprints(offer) {
      if (this.down) throw new Error('connection refused');
      for (const r of offer) {
        const held = records.get(r.kid);
        if (held === undefined || held.expiresAtMs <= now()) records.set(r.kid, { ...r });
        else if (held.fingerprint === r.fingerprint)
          records.set(r.kid, { ...held, expiresAtMs: Math.max(held.expiresAtMs, r.expiresAtMs) });
      }
      return [...records.values()].filter((r) => r.expiresAtMs > now());
    },
  };
}

const k1 = { kid: 'k1', secret: generateKey() };
const k2 = { kid: 'k2', secret: generateKey() };

describe('an ephemeral key with a shared store', () => {
  it('is refused at construction unless allowEphemeralKeys is set; fine with a store of this process', () => {
    const base = testStore(Date.now);
    const shared = { ...base, capabilities: { ...base.capabilities, shared: true } };
    expect(() => createStateGuard({ keys: KeyRing.generate(), codec: testCodec, store: shared, audience: 'a' })).toThrow(
      /generated key .* shared across processes/,
    );
    expect(() =>
      createStateGuard({ keys: KeyRing.generate(), codec: testCodec, store: shared, audience: 'a', allowEphemeralKeys: 'yes' as never }),
    ).toThrow(TypeError);
    createStateGuard({ keys: KeyRing.generate(), codec: testCodec, store: shared, audience: 'a', allowEphemeralKeys: true });
    createStateGuard({ keys: KeyRing.generate(), codec: testCodec, store: testStore(Date.now), audience: 'a' });
    createStateGuard({ keys: new KeyRing([k1]), codec: testCodec, store: shared, audience: 'a' });
    expect([KeyRing.generate().ephemeral, new KeyRing([k1]).ephemeral, KeyRing.parse(`k1:${k1.secret}`).ephemeral]).toEqual([
      true,
      false,
      false,
    ]);
  });
});

describe('key failures are server faults', () => {
  it('answers -32603, never "invalid state", for every key error', () => {
    for (const code of ['ERR_KEYS_UNAVAILABLE', 'ERR_KEY_SOURCE', 'ERR_KEY_CONFLICT', 'ERR_KEY_MISMATCH'] as const) {
      expect(isServerFault(code)).toBe(true);
    }
    expect(isServerFault('ERR_KEY_UNKNOWN')).toBe(false);
  });
});

describe('the fleet check (StateGuard.checkKeys)', () => {
  const guardOn = (keys: KeyRing, store: ReplayStore, now: () => number) =>
    createStateGuard({ keys, codec: testCodec, store, audience: 'a', now, ttlMs: 60_000, clockSkewMs: 5_000 });

  it('passes for replicas with the same keys, and publishes a keyed fingerprint, never the key', async () => {
    const clock = fakeClock();
    const store = fleetStore(clock.now);
    expect(await guardOn(new KeyRing([k1]), store, clock.now).checkKeys()).toEqual({ checked: true, fleet: ['k1'] });
    expect(await guardOn(new KeyRing([k2, k1]), store, clock.now).checkKeys()).toEqual({ checked: true, fleet: ['k1', 'k2'] });
    expect(await guardOn(new KeyRing([k2, k1]), store, clock.now).checkKeys()).toEqual({ checked: true, fleet: ['k1', 'k2'] });
    const record = store.records.get('k1')!;
    expect(record).toEqual({ kid: 'k1', fingerprint: await keyFingerprint(new KeyRing([k1]), 'k1'), expiresAtMs: clock.now() + 70_000 });
    expect(record.fingerprint).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(record.fingerprint).not.toContain(k1.secret.slice(0, 8));
  });

  it('refuses a replica that generated its own k1 (another secret under a fleet kid), naming the kid', async () => {
    const clock = fakeClock();
    const store = fleetStore(clock.now);
    await guardOn(new KeyRing([k1]), store, clock.now).checkKeys();
    const error = await guardOn(new KeyRing([{ kid: 'k1', secret: randomBytes(32) }]), store, clock.now)
      .checkKeys()
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_KEY_MISMATCH', kid: 'k1', reason: 'secret' });
  });

  it('refuses a replica whose source is behind the fleet (the kid the fleet seals with is missing)', async () => {
    const clock = fakeClock();
    const store = fleetStore(clock.now);
    await guardOn(new KeyRing([k2, k1]), store, clock.now).checkKeys();
    await expect(guardOn(new KeyRing([k1]), store, clock.now).checkKeys()).rejects.toMatchObject({
      code: 'ERR_KEY_MISMATCH',
      kid: 'k2',
      reason: 'missing',
    });
    // Once nothing sealed by k2 can still be presented, the record has expired and k2 is no longer asked for.
    clock.advance(70_000);
    expect(await guardOn(new KeyRing([k1]), store, clock.now).checkKeys()).toEqual({ checked: true, fleet: ['k1'] });
  });

  it('a restart with new keys is told which namespace holds the old records, until when, and how to proceed', async () => {
    const clock = fakeClock();
    const store = { ...fleetStore(clock.now), namespace: 'dev' };
    await guardOn(new KeyRing([k1]), store, clock.now).checkKeys();
    const until = new Date(clock.now() + 70_000).toISOString();
    // New keys under a new kid: the old fleet's k1 is "missing"; under the same kid: another "secret".
    for (const [keys, reason, what] of [
      [new KeyRing([k2]), 'missing', 'fingerprint of kid "k1", which this key ring lacks'],
      [new KeyRing([{ kid: 'k1', secret: randomBytes(32) }]), 'secret', 'fingerprint of another secret under kid "k1"'],
    ] as const) {
      const error = (await guardOn(keys, store, clock.now)
        .checkKeys()
        .catch((e: unknown) => e)) as Error;
      expect(error).toMatchObject({ code: 'ERR_KEY_MISMATCH', kid: 'k1', reason, namespace: 'dev', expiresAtMs: clock.now() + 70_000 });
      expect(error.message).toContain(`namespace "dev" of the shared store holds the fleet's ${what} until ${until}`);
      expect(error.message).toContain('Give this replica the same keys as the fleet');
      expect(error.message).toContain(`wait until ${until}, use another namespace, or delete that namespace's key fingerprints`);
      expect(error.message).not.toContain(k1.secret.slice(0, 8));
    }
    // A store that names no namespace: the message says "the shared store".
    const unnamed = fleetStore(clock.now);
    await guardOn(new KeyRing([k1]), unnamed, clock.now).checkKeys();
    const error = await guardOn(new KeyRing([k2]), unnamed, clock.now)
      .checkKeys()
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_KEY_MISMATCH', namespace: undefined });
    expect((error as Error).message).toContain('the shared store holds the fleet');
    // A store answering an expiry past what a Date holds still gets ERR_KEY_MISMATCH (no time in the message).
    const far = { ...unnamed, keyFingerprints: async () => [{ kid: 'k1', fingerprint: 'x', expiresAtMs: 1e300 }] };
    const odd = await checkFleetKeys(new KeyRing([k2]), far, { now: clock.now(), lifetimeMs: 1 }).catch((e: unknown) => e);
    expect(odd).toMatchObject({ code: 'ERR_KEY_MISMATCH', expiresAtMs: 1e300 });
    expect((odd as Error).message).toContain('wait until it expires');
  });

  it('applyKeyFingerprintOffer: first writer wins, a match extends, expired records are dropped, at most 256 live', () => {
    const rec = (kid: string, fingerprint: string, expiresAtMs: number) => ({ kid, fingerprint, expiresAtMs });
    const held = [rec('k1', 'a', 100), rec('k0', 'z', 10)];
    expect(
      applyKeyFingerprintOffer(
        held,
        [rec('k1', 'b', 200), rec('k1', 'a', 150), rec('k2', 'c', 90), rec('k2', 'd', 95), rec('k3', 'e', 10)],
        10,
      ),
    ).toEqual({
      records: [rec('k1', 'a', 150), rec('k2', 'c', 90)],
      writes: [rec('k1', 'a', 150), rec('k2', 'c', 90)],
    });
    expect(applyKeyFingerprintOffer(held, [rec('k1', 'a', 50)], 10)).toEqual({ records: [rec('k1', 'a', 100)], writes: [] });
    const full = Array.from({ length: 256 }, (_, i) => rec(`k${i}`, 'f', 100));
    expect(applyKeyFingerprintOffer(full, [rec('k0', 'f', 200)], 0)?.writes).toEqual([rec('k0', 'f', 200)]);
    expect(applyKeyFingerprintOffer(full, [rec('k0', 'f', 200), rec('new', 'f', 200)], 0)).toBeUndefined();
  });

  it('a store without fingerprints checks nothing; a failing one is ERR_STORE_UNAVAILABLE; a broken answer is refused', async () => {
    const clock = fakeClock();
    expect(await guardOn(new KeyRing([k1]), testStore(clock.now), clock.now).checkKeys()).toEqual({ checked: false, fleet: [] });
    const store = fleetStore(clock.now);
    store.down = true;
    await expect(guardOn(new KeyRing([k1]), store, clock.now).checkKeys()).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    const exchanging = { ...NO_CAPS, shared: true, keyExchange: true };
    const huge = {
      ...testStore(clock.now),
      capabilities: exchanging,
      keyFingerprints: async () => Array.from({ length: 257 }, () => ({})) as never,
    };
    await expect(checkFleetKeys(new KeyRing([k1]), huge, { now: clock.now(), lifetimeMs: 1 })).rejects.toMatchObject({
      code: 'ERR_STORE_UNAVAILABLE',
    });
    const malformed = { ...testStore(clock.now), capabilities: exchanging, keyFingerprints: async () => [{ kid: 'k1' }] as never };
    await expect(checkFleetKeys(new KeyRing([k1]), malformed, { now: clock.now(), lifetimeMs: 1 })).rejects.toMatchObject({
      code: 'ERR_STORE_UNAVAILABLE',
    });
    expect(() =>
      createStateGuard({
        keys: new KeyRing([k1]),
        codec: testCodec,
        store: { ...testStore(clock.now), capabilities: exchanging, keyFingerprints: 1 as never },
        audience: 'a',
      }),
    ).toThrow(/capabilities.keyExchange is declared but store.keyFingerprints is not a function/);
    // A store that keeps fingerprints but does not declare keyExchange is not asked (capabilities decide, not shape).
    const undeclared = { ...fleetStore(clock.now), capabilities: NO_CAPS };
    expect(await guardOn(new KeyRing([k1]), undeclared, clock.now).checkKeys()).toEqual({ checked: false, fleet: [] });
  });
});

const NO_CAPS = { shared: false, keyExchange: false, clock: false, leases: false, epoch: false };

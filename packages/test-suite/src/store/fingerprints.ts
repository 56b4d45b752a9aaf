import { createStateGuard, KeyRing, type MrtrError, type ReplayStore } from '@mrtr/core';
import { type KeyFingerprint, storeCapabilities } from '@mrtr/core/store';
import { fail, ok, rejectsMrtr } from '../assert.js';
import { plainCodec } from '../claims.js';
import { type StoreSuite, sleep, uniqueId } from './context.js';

type Fingerprinting = Required<Pick<ReplayStore, 'keyFingerprints'>> & ReplayStore;

/** A fingerprint test's registration: none when the store is declared without key fingerprints. */
const fingerprintTest = (s: StoreSuite): StoreSuite['test'] => (s.options.keyFingerprints === false ? () => {} : s.test);

/** Whether `store` keeps key fingerprints (failing when the test expects it to and it does not). */
const fingerprinting = (s: StoreSuite, store: ReplayStore): store is Fingerprinting => {
  if (storeCapabilities(store).keyExchange) return true;
  if (s.options.keyFingerprints === true) fail('the test expects keyFingerprints: true but the store declares no keyExchange');
  return false;
};

/** The answer as `kid=fingerprint@expiresAtMs` sorted by kid (expiry relative to `base`). */
const shown = (records: readonly KeyFingerprint[], base: number): string =>
  records
    .map((r) => `${r.kid}=${r.fingerprint}@${r.expiresAtMs - base}`)
    .sort()
    .join(',');

/** The fleet check's exchange (`shared`, `keyFingerprints`): see ReplayStore in @mrtr/core and docs/keys.md. */
export function fingerprintsGroup(s: StoreSuite): void {
  declaresShared(s);
  for (const register of [
    keyfingerprintsInsertsTheFirstWriterWins,
    keyfingerprintsARecordIsKeptUntil,
    keyfingerprintsAtMost256RecordsA,
    keyfingerprintsRejectsAMalformedOfferWith,
    underTwoStateGuardsCheckKeysPasses,
    underTwoStateGuardsAGenerated,
  ])
    register(s);
}

function declaresShared(s: StoreSuite): void {
  const { options, withStore } = s;
  const fingerprintsDeclared = options.keyFingerprints;
  s.test('declares shared, and keeps key fingerprints only as a shared store, as the test expects', async () => {
    await withStore(async (store) => {
      const { shared, keyExchange } = storeCapabilities(store);
      if (options.sharedBackend === false) ok(!shared, 'a store of this process (sharedBackend: false) must not declare shared');
      else ok(shared, 'a store whose ledger other instances share (sharedBackend) must declare shared');
      if (keyExchange) ok(shared, 'a store that keeps key fingerprints must declare shared: true');
      if (fingerprintsDeclared !== undefined) {
        ok(
          keyExchange === fingerprintsDeclared,
          `the test expects keyFingerprints: ${fingerprintsDeclared}, but the store's capabilities ${keyExchange ? 'declare' : 'lack'} keyExchange`,
        );
      }
    });
  });
}

function keyfingerprintsInsertsTheFirstWriterWins(s: StoreSuite): void {
  const { factory, options, now } = s;
  fingerprintTest(s)('keyFingerprints: inserts, the first writer wins, a matching fingerprint extends, across instances', async () => {
    const namespace = uniqueId('fp');
    const a = await factory({ namespace });
    const b = options.sharedBackend === false ? a : await factory({ namespace });
    try {
      if (!fingerprinting(s, a) || !fingerprinting(s, b)) return;
      const t = now();
      const exp = t + 60_000;
      ok(
        shown(await a.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp }]), t) === 'k1=fpA@60000',
        'a new kid is stored',
      );
      ok(
        shown(await b.keyFingerprints([{ kid: 'k1', fingerprint: 'fpB', expiresAtMs: exp + 5_000 }]), t) === 'k1=fpA@60000',
        'another fingerprint under a held kid leaves the first record as it was (first writer wins)',
      );
      ok(
        shown(await b.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp + 1_000 }]), t) === 'k1=fpA@61000',
        'the same fingerprint extends the expiry',
      );
      ok(
        shown(await a.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp }]), t) === 'k1=fpA@61000',
        'an earlier expiry never shortens a record',
      );
      const both = await a.keyFingerprints([
        { kid: 'k2', fingerprint: 'fpC', expiresAtMs: exp },
        { kid: 'k1', fingerprint: 'fpB', expiresAtMs: exp },
      ]);
      ok(shown(both, t) === 'k1=fpA@61000,k2=fpC@60000', `one offer of several records, each by the rules (got ${shown(both, t)})`);
      ok(shown(await b.keyFingerprints([]), t) === 'k1=fpA@61000,k2=fpC@60000', 'an empty offer lists every record');
      const other = await factory({ namespace: uniqueId('fp-other') });
      try {
        if (fingerprinting(s, other)) ok((await other.keyFingerprints([])).length === 0, 'another namespace holds its own records');
      } finally {
        await other.close();
      }
    } finally {
      await a.close();
      if (b !== a) await b.close();
    }
  });
}

function keyfingerprintsARecordIsKeptUntil(s: StoreSuite): void {
  const { clock, now, withStore, ttlMs } = s;
  fingerprintTest(s)('keyFingerprints: a record is kept until its expiresAtMs, then no longer listed and its kid is free', async () => {
    await withStore(async (store) => {
      if (!fingerprinting(s, store)) return;
      if (clock) {
        const exp = now() + 60_000;
        await store.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp }]);
        await clock.advance(59_999);
        ok(
          shown(await store.keyFingerprints([{ kid: 'k1', fingerprint: 'fpB', expiresAtMs: exp + 9 }]), exp) === 'k1=fpA@0',
          'live 1 ms before its expiry',
        );
        await clock.advance(1);
        ok(now() === exp, 'test clock must be at expiry');
        const at = await store.keyFingerprints([]);
        ok(shown(at, exp) === '', `a record is not listed from its expiresAtMs on (got ${shown(at, exp)})`);
        const after = await store.keyFingerprints([{ kid: 'k1', fingerprint: 'fpB', expiresAtMs: now() + 60_000 }]);
        ok(shown(after, now()) === 'k1=fpB@60000', `an expired kid takes a new fingerprint (got ${shown(after, now())})`);
        await store.keyFingerprints([{ kid: 'k2', fingerprint: 'fpC', expiresAtMs: now() }]);
        ok(shown(await store.keyFingerprints([]), now()) === 'k1=fpB@60000', 'an offer already expired is not stored');
        return;
      }
      // Real time (a backend with its own clock): "still held" is asserted only for an answer that came back before
      // expiresAtMs; if a loaded machine was later, the round is repeated with twice the TTL.
      let observedLive = false;
      for (let round = 0, ttl = ttlMs; round < 5 && !observedLive; round++, ttl *= 2) {
        const kid = `e${round}`;
        const exp = Date.now() + ttl;
        await store.keyFingerprints([{ kid, fingerprint: 'fpA', expiresAtMs: exp }]);
        const again = await store.keyFingerprints([{ kid, fingerprint: 'fpB', expiresAtMs: exp }]);
        if (Date.now() < exp) {
          ok(shown(again, exp) === `${kid}=fpA@0`, `a live record is kept (first writer wins) (got ${shown(again, exp)})`);
          observedLive = true;
        }
        while (Date.now() <= exp) await sleep(exp - Date.now() + 1);
        await sleep(Math.min(250, ttl));
        const later = Date.now() + 60_000;
        const after = await store.keyFingerprints([{ kid, fingerprint: 'fpB', expiresAtMs: later }]);
        ok(
          shown(after, later) === `${kid}=fpB@0`,
          `an expired record is not listed and its kid takes a new one (got ${shown(after, later)})`,
        );
        await store.keyFingerprints([{ kid: `x${round}`, fingerprint: 'fpC', expiresAtMs: Date.now() - 1 }]);
        const listed = shown(await store.keyFingerprints([]), later);
        ok(!listed.includes(`x${round}=`), `an offer already expired is not stored (got ${listed})`);
      }
      ok(observedLive, 'the machine never got an answer within the TTL (5 rounds, TTL doubled each time)');
    });
  });
}

function keyfingerprintsAtMost256RecordsA(s: StoreSuite): void {
  const { now, withStore } = s;
  fingerprintTest(s)(
    'keyFingerprints: at most 256 records; a new kid past them is refused (ERR_STORE_UNAVAILABLE), none dropped',
    async () => {
      await withStore(async (store) => {
        if (!fingerprinting(s, store)) return;
        const exp = now() + 60_000;
        const offer = Array.from({ length: 256 }, (_, i) => ({ kid: `k${i}`, fingerprint: `fp${i}`, expiresAtMs: exp }));
        const held = await store.keyFingerprints(offer);
        ok(held.length === 256, `256 distinct kids are all held (got ${held.length})`);
        ok(
          held.every((r) => r.fingerprint === `fp${r.kid.slice(1)}` && r.expiresAtMs === exp),
          'every record is answered as offered',
        );
        await rejectsMrtr(() => store.keyFingerprints([{ kid: 'k256', fingerprint: 'x', expiresAtMs: exp }]), 'a 257th kid', [
          'ERR_STORE_UNAVAILABLE',
        ]);
        const after = await store.keyFingerprints([{ kid: 'k0', fingerprint: 'fp0', expiresAtMs: exp + 1 }]);
        ok(after.length === 256 && !after.some((r) => r.kid === 'k256'), 'the refused kid is not stored and nothing was dropped');
      });
    },
  );
}

function keyfingerprintsRejectsAMalformedOfferWith(s: StoreSuite): void {
  const { now, withStore } = s;
  fingerprintTest(s)('keyFingerprints: rejects a malformed offer with TypeError/RangeError and stores none of it', async () => {
    await withStore(async (store) => {
      if (!fingerprinting(s, store)) return;
      const exp = now() + 60_000;
      const good = { kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp };
      const cases: [unknown, typeof TypeError | typeof RangeError][] = [
        [undefined, TypeError],
        ['k1', TypeError],
        [[null], TypeError],
        [[good, { ...good, kid: '' }], TypeError],
        [[good, { ...good, kid: 'a b' }], TypeError],
        [[good, { ...good, kid: 'k'.repeat(33) }], TypeError],
        [[good, { ...good, fingerprint: '' }], TypeError],
        [[good, { ...good, fingerprint: 7 }], TypeError],
        [[good, { ...good, expiresAtMs: Number.NaN }], TypeError],
        [[good, { ...good, expiresAtMs: '1' }], TypeError],
        [Array.from({ length: 257 }, (_, i) => ({ ...good, kid: `k${i}` })), RangeError],
      ];
      for (const [offer, kind] of cases) {
        let thrown: unknown;
        try {
          await store.keyFingerprints(offer as never);
        } catch (error) {
          thrown = error;
        }
        ok(
          thrown instanceof kind && thrown.message.startsWith('keyFingerprints'),
          `expected a labelled ${kind.name} for ${JSON.stringify(offer)?.slice(0, 80)}`,
        );
      }
      ok((await store.keyFingerprints([])).length === 0, 'a refused offer stores nothing');
    });
  });
}

function underTwoStateGuardsCheckKeysPasses(s: StoreSuite): void {
  const { options, now, withTwo } = s;
  fingerprintTest(s)('under two state guards, checkKeys passes for the same key and names the kid of another secret', async () => {
    if (options.sharedBackend === false) return;
    await withTwo(async (a, b) => {
      if (!fingerprinting(s, a)) return;
      const k1 = { kid: 'k1', secret: new Uint8Array(32).fill(1) };
      const guardOn = (store: ReplayStore, keys: KeyRing) =>
        createStateGuard({ keys, codec: plainCodec, store, audience: 'store-fleet', now, ttlMs: 60_000, clockSkewMs: 5_000 });
      const first = await guardOn(a, new KeyRing([k1])).checkKeys();
      ok(
        first.checked === true && JSON.stringify(first.fleet) === '["k1"]',
        `the first replica publishes k1 (got ${JSON.stringify(first)})`,
      );
      const same = await guardOn(b, new KeyRing([k1])).checkKeys();
      ok(same.checked === true && JSON.stringify(same.fleet) === '["k1"]', 'a replica with the same key passes');
      const error = await rejectsMrtr(
        () => guardOn(b, new KeyRing([{ kid: 'k1', secret: new Uint8Array(32).fill(2) }])).checkKeys(),
        'a replica with another secret under k1',
        ['ERR_KEY_MISMATCH'],
      );
      const { kid, reason } = error as MrtrError & { kid?: string; reason?: string };
      ok(kid === 'k1' && reason === 'secret', `the mismatch names the kid and its reason (kid ${kid}, reason ${reason})`);
    });
  });
}

function underTwoStateGuardsAGenerated(s: StoreSuite): void {
  const { options, now, withTwo } = s;
  fingerprintTest(s)(
    'under two state guards, a generated (per-process) key of a second ring is refused, naming the namespace and until when',
    async () => {
      if (options.sharedBackend === false) return;
      const namespace = uniqueId('fp-restart');
      await withTwo(
        async (a, b) => {
          if (!fingerprinting(s, a)) return;
          // A developer restarting with a new generated key: the first run's fingerprint is still held.
          const guardOn = (store: ReplayStore) =>
            createStateGuard({
              keys: KeyRing.generate(),
              allowEphemeralKeys: true,
              codec: plainCodec,
              store,
              audience: 'store-fleet',
              now,
              ttlMs: 60_000,
              clockSkewMs: 5_000,
            });
          const first = await guardOn(a).checkKeys();
          ok(
            first.checked === true && JSON.stringify(first.fleet) === '["k1"]',
            `the first run publishes k1 (got ${JSON.stringify(first)})`,
          );
          const before = now();
          const error = (await rejectsMrtr(() => guardOn(b).checkKeys(), 'a second run with a new generated k1', [
            'ERR_KEY_MISMATCH',
          ])) as MrtrError & { kid?: string; reason?: string; namespace?: string; expiresAtMs?: number };
          const { kid, reason, expiresAtMs } = error;
          ok(kid === 'k1' && reason === 'secret', `the mismatch names the kid and its reason (kid ${kid}, reason ${reason})`);
          ok(
            typeof expiresAtMs === 'number' && expiresAtMs > before && expiresAtMs <= before + 70_000 + 60_000,
            `the error says until when the first run's record is held (got ${expiresAtMs})`,
          );
          const until = new Date(expiresAtMs as number).toISOString();
          if (typeof a.namespace === 'string') {
            ok(error.namespace === namespace, `the error names the namespace (got ${error.namespace})`);
            ok(error.message.includes(`namespace ${JSON.stringify(namespace)}`), `the message names the namespace: ${error.message}`);
          }
          ok(error.message.includes(`until ${until}`), `the message says until when: ${error.message}`);
          ok(error.message.includes('another namespace'), `the message says how to proceed: ${error.message}`);
        },
        [namespace, ''],
      );
    },
  );
}

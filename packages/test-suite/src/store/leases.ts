import { ok } from '../assert.js';
import { leaseFaultTests } from './lease-faults.js';
import { guardFaultTests } from './guard-faults.js';
import { ownerTests, takeoverTests } from './lease-owners.js';
import { LONG_LEASE_MS, leaseTimes, leftOf } from './lease-times.js';
import { capabilityGroup, type GroupTest, newOwner, type StoreSuite, claimStatus, uniqueId } from './context.js';

/** A store with `leases`: owners, leases on the store's clock, fences, renew, release, record by owner. */
export function leaseGroup(suite: StoreSuite): void {
  capabilityGroup(suite, 'leases', (test) => {
    claimTests(suite, test);
    reclaimRaceTests(suite, test);
    takeoverTests(suite, test);
    ownerTests(suite, test);
    leaseFaultTests(suite, test);
    guardFaultTests(suite, test);
  });
}

function claimTests(suite: StoreSuite, test: GroupTest): void {
  test('a first claim has fence 0; identical claims are pending with leaseLeftMs within the lease; others are replays', async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, b, exp] = [uniqueId('lease'), newOwner(), newOwner(), await times.exp()];
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0',
      'a first claim is first with fence 0',
    );
    const pending = await store.claim(id, exp, 'fp');
    const left = leftOf(pending);
    ok(left > 0 && left <= LONG_LEASE_MS, `an identical claim is pending with 0 < leaseLeftMs <= leaseMs (got ${JSON.stringify(pending)})`);
    if (suite.clock) {
      await suite.clock.advance(10_000);
      const later = leftOf(await store.claim(id, exp, 'fp'));
      ok(later > 0 && later <= LONG_LEASE_MS - 10_000, `leaseLeftMs counts down on the store's clock (got ${later})`);
    }
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'pending',
      'a running lease is never reclaimed',
    );
    ok(claimStatus(await store.claim(id, exp, 'other')) === 'replayed', 'another fingerprint is replayed');
  });

  test('once a lease lapses unrecorded, identical claims are unknown; its owner can still record', async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, b, exp] = [uniqueId('lapse'), newOwner(), newOwner(), await times.exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: times.shortMs })) === 'first:0', 'first claim');
    await times.lapse(id, exp, 'fp');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'unknown', 'an identical claim after the lease lapsed is unknown');
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS })) === 'unknown',
      'and without reclaim stays unknown',
    );
    ok(
      claimStatus(await store.claim(id, exp, 'other', { owner: b, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'replayed',
      'another fingerprint is replayed, reclaim or not',
    );
    ok((await store.record(id, 'fp', 'late', { owner: a })) === true, 'a lapsed lease that nobody reclaimed still records');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'recorded:late', 'and identical claims get its outcome');
  });

  test('a claim without owner or without leaseMs holds no lease: it never lapses and is never reclaimed', async (store) => {
    const times = leaseTimes(suite, store);
    const [plain, ownerOnly, probe, a, b] = [uniqueId('plain'), uniqueId('owner-only'), uniqueId('probe'), newOwner(), newOwner()];
    const exp = await times.exp();
    ok(['first', 'first:0'].includes(claimStatus(await store.claim(plain, exp, 'fp'))), 'a claim without owner is first');
    ok(
      ['first', 'first:0'].includes(claimStatus(await store.claim(ownerOnly, exp, 'fp', { owner: a }))),
      'a claim without leaseMs is first',
    );
    // Longer than a lease: a whole short lease of another claim lapses meanwhile (the fake clock: 5 minutes).
    ok(claimStatus(await store.claim(probe, exp, 'fp', { owner: b, leaseMs: times.shortMs })) === 'first:0', 'probe claim');
    await times.lapse(probe, exp, 'fp');
    if (suite.clock) await suite.clock.advance(300_000);
    for (const id of [plain, ownerOnly]) {
      ok(claimStatus(await store.claim(id, exp, 'fp')) === 'pending', 'a claim without a lease stays pending');
      ok(
        claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'pending',
        'and is never reclaimed',
      );
    }
    ok((await store.record(plain, 'fp', 'p')) === true, 'it records as before');
    ok((await store.record(ownerOnly, 'fp', 'o', { owner: a })) === true, 'by its owner');
  });
}

function reclaimRaceTests(suite: StoreSuite, test: GroupTest): void {
  test(`32 parallel reclaims of one lapsed claim give exactly one first, with fence 1`, async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, exp] = [uniqueId('reclaim-race'), newOwner(), await times.exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: times.shortMs })) === 'first:0', 'first claim');
    await times.lapse(id, exp, 'fp');
    const owners = Array.from({ length: 32 }, newOwner);
    const results = await Promise.all(owners.map((owner) => store.claim(id, exp, 'fp', { owner, leaseMs: LONG_LEASE_MS, reclaim: true })));
    const shown = results.map(claimStatus);
    const winners = owners.filter((_, i) => shown[i] === 'first:1');
    ok(winners.length === 1, `exactly one reclaim must be first with fence 1 (got ${JSON.stringify(shown)})`);
    ok(shown.filter((s) => s === 'pending').length === 31, `the others find the winner's lease running (got ${JSON.stringify(shown)})`);
    const loser = owners.find((owner) => owner !== winners[0]) as string;
    ok((await store.record(id, 'fp', 'lost', { owner: loser })) === false, 'a loser cannot record');
    ok((await store.record(id, 'fp', 'won', { owner: winners[0] })) === true, 'the winner records');
  });
}

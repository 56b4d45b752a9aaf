import { describe, expect, it, vi } from 'vitest';
import { type StoreComplianceOptions, storeCompliance } from '../src/index.js';
import { collect, referenceRecordingStore, referenceStore, runCollected } from './fixtures.js';
import { type LeaseFlaws, referenceLeaseStore } from './lease-fixtures.js';

const GROUPS = /compliance: (clock|leases|epoch): /;

/** Runs the suite's capability groups (only) on the reference lease store with `flaws`, on a fake clock. */
async function runGroups(flaws: LeaseFlaws, options: StoreComplianceOptions = {}) {
  let t = 1_000_000;
  const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
  const tests = collect((it) =>
    storeCompliance(it, (o) => referenceLeaseStore(flaws, { ...o, now: clock.now }), { clock, sharedBackend: false, ...options }),
  );
  return runCollected(tests.filter((test) => GROUPS.test(test.name)));
}

describe('the capability groups of the store suite (clock, leases, epoch)', () => {
  it('pass a correct store with a clock, leases and an epoch: every test of the suite', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed, passed } = await runCollected(
      collect((it) =>
        storeCompliance(it, (o) => referenceLeaseStore({}, { ...o, now: clock.now }), {
          clock,
          sharedBackend: false,
          outcomes: true,
          declares: { clock: true, leases: true, epoch: true },
        }),
      ),
    );
    expect(failed).toEqual([]);
    expect(passed.filter((name) => GROUPS.test(name)).length).toBe(19);
  });

  it("pass it on the store's own clock too (no fake clock: short leases, polled until they lapse)", async () => {
    const tests = collect((it) =>
      storeCompliance(it, (o) => referenceLeaseStore({}, { ...o, now: Date.now }), { sharedBackend: false, leaseMs: 50 }),
    );
    const { failed, passed } = await runCollected(tests.filter((test) => GROUPS.test(test.name)));
    expect(failed).toEqual([]);
    expect(passed).toHaveLength(16);
  }, 60_000);

  it.each([
    ['leases that never lapse', { neverLapse: true }, ['lapses unrecorded', '32 parallel reclaims', 'reclaim takes', 'history']],
    ['a release that deletes another owner’s claim', { releaseAnyOwner: true }, ['release gives']],
    ['a release that deletes a recorded claim', { releaseRecorded: true }, ['release gives']],
    ['a clock store that writes a past expiry', { pastExpiryWritten: true }, ['at or before the store clock']],
    ['a store that decides on the wall clock, not its own', { wallClock: true }, ["time() is the store's clock", 'at or before']],
    ['an epoch never checked', { noEpochCheck: true }, ['ledgerEpoch begins the ledger', 'ledger lost after minting']],
    ['an epoch that moves to every call’s time', { epochMoves: true }, ['ledgerEpoch begins the ledger']],
    ['a record by the owner that answers false the second time', { recordNotIdempotent: true }, ['record by the owner', 'lost reply']],
    ['a record by any owner', { recordAnyOwner: true }, ['record by the owner', 'reclaim takes']],
    ['a renew by any owner', { renewAnyOwner: true }, ['renew extends']],
    ['a reclaim without the next fence', { noFence: true }, ['reclaim takes', '32 parallel reclaims']],
    ['a reclaim in two steps', { racyReclaim: true }, ['32 parallel reclaims']],
  ] as const)('fail %s', async (_label, flaws, mustFail) => {
    const { failed } = await runGroups(flaws);
    for (const fragment of mustFail)
      expect(
        failed.filter((name) => name.includes(fragment)),
        fragment,
      ).not.toEqual([]);
  });

  it('hold a store to what the test declares: a missing capability fails, an undeclared one fails', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const declares = { clock: true, leases: true, epoch: true };
    const lacking = await runCollected(
      collect((it) => storeCompliance(it, (o) => referenceStore({ ...o, now: clock.now }), { clock, sharedBackend: false, declares })),
    );
    for (const group of ['clock', 'leases', 'epoch']) {
      expect(lacking.failed.filter((name) => name.includes(`compliance: ${group}: `)).length, group).toBeGreaterThan(1);
    }
    const hiding = await runGroups({}, { declares: { clock: false, leases: false, epoch: false } });
    expect(hiding.failed).toHaveLength(3);
    expect(hiding.passed).toEqual([]);
  });

  it('skip with one line each on a store that declares none of them', async () => {
    const info = vi.spyOn(console, 'info').mockImplementation(() => {});
    try {
      const { failed, passed } = await runCollected(
        collect((it) => storeCompliance(it, (o) => referenceRecordingStore({}, { ...o, now: Date.now }), { sharedBackend: false })).filter(
          (test) => GROUPS.test(test.name),
        ),
      );
      expect(failed).toEqual([]);
      expect(passed.length).toBeGreaterThan(10);
      const lines = info.mock.calls.map((call) => String(call[0])).filter((line) => /clock|leases|epoch/.test(line));
      expect(lines).toHaveLength(3);
    } finally {
      info.mockRestore();
    }
  });
});

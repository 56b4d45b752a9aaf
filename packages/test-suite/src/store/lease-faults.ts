import type { ClaimResult } from '@mrtr/core/store';
import { ok, rejectsMrtr } from '../assert.js';
import { withFaults } from '../faults.js';
import { createHistory, type History, type HistoryAnswer } from '../history.js';
import { type FullStore, type GroupTest, newOwner, type StoreSuite, claimStatus, uniqueId } from './context.js';
import { LONG_LEASE_MS, leaseTimes, leftOf } from './lease-times.js';

const lost = ['ERR_STORE_UNAVAILABLE'] as const;

/** Lost replies and crashes, through the in-process fault wrapper: every lease operation is safe to retry. */
export function leaseFaultTests(suite: StoreSuite, test: GroupTest): void {
  test('every lease operation is safe to retry after a lost reply (claim then release, record, renew, release)', async (inner) => {
    const faults = withFaults(inner);
    const store = faults.store;
    const [id, other, a, b, c, d] = [uniqueId('lost-claim'), uniqueId('lost-renew'), newOwner(), newOwner(), newOwner(), newOwner()];
    const exp = await leaseTimes(suite, inner).exp();
    faults.loseNextReply();
    await rejectsMrtr(() => store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS }), 'a claim whose reply is lost', lost);
    ok((await store.release(id, a)) === true, 'its owner gives it back');
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: LONG_LEASE_MS })) === 'first:0', 'the id is free again');
    faults.loseNextReply();
    await rejectsMrtr(() => store.record(id, 'fp', 'out', { owner: b }), 'a record whose reply is lost', lost);
    ok((await store.record(id, 'fp', 'out', { owner: b })) === true, 'the retried record answers as the first did');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'recorded:out', 'and the outcome is kept');
    ok(claimStatus(await store.claim(other, exp, 'fp', { owner: c, leaseMs: LONG_LEASE_MS })) === 'first:0', 'first claim');
    faults.loseNextReply();
    await rejectsMrtr(() => store.renew(other, c, 2 * LONG_LEASE_MS), 'a renew whose reply is lost', lost);
    ok((await store.renew(other, c, 2 * LONG_LEASE_MS)) === true, 'the retried renew succeeds');
    ok(leftOf(await store.claim(other, exp, 'fp')) > LONG_LEASE_MS, 'and the lease was extended');
    faults.loseNextReply();
    await rejectsMrtr(() => store.release(other, c), 'a release whose reply is lost', lost);
    ok((await store.release(other, c)) === true, 'the retried release answers true');
    ok(claimStatus(await store.claim(other, exp, 'fp', { owner: d, leaseMs: LONG_LEASE_MS })) === 'first:0', 'the id was given back');
  });

  test('a history of rounds under lost replies, stalls, a black hole and crashes holds', async (inner) => {
    const times = leaseTimes(suite, inner);
    const history = createHistory();
    const exp = await times.exp();
    const run = historyRun(inner, history, exp, times.shortMs);
    const ids = Array.from({ length: 8 }, (_, i) => uniqueId(`round${i}`));
    const [s0, s1, s2, s3, s4, s5, s6, s7] = ids as [string, string, string, string, string, string, string, string];
    await run.normal(s0);
    await run.normal(s1);
    await run.lostClaim(s2);
    await run.lostRecord(s3);
    await run.crash(s4);
    await run.crash(s5);
    await run.stalled(s6);
    await run.blackholed(s7);
    for (const id of [s4, s5]) {
      await run.retry('B', id); // pending while the lease runs, or unknown already
      await times.lapse(id, exp, 'fp');
      await run.retry('B', id);
    }
    for (const id of ids) await run.retry('A', id);
    history.check();
    ok(history.events.filter((e) => e.kind === 'accept').length === 8, 'every round was accepted once');
  });
}

const answerOf = (r: ClaimResult): HistoryAnswer =>
  r.status === 'recorded' ? { result: r.outcome } : r.status === 'first' ? 'error' : r.status;

/** The rounds of the history test: two instances (A, B) of one store, each behind its own fault wrapper. */
function historyRun(inner: FullStore, history: History, exp: number, shortMs: number) {
  const a = withFaults(inner);
  const b = withFaults(inner);
  const on = { A: a, B: b };
  const claim = async (instance: 'A' | 'B', id: string, owner: string, leaseMs = LONG_LEASE_MS) => {
    const r = await on[instance].store.claim(id, exp, 'fp', { owner, leaseMs });
    if (r.status === 'first') history.accept(id, instance, r.fence);
    return r;
  };
  const finish = async (instance: 'A' | 'B', id: string, owner: string) => {
    history.effect(id, instance);
    if (await on[instance].store.record(id, 'fp', `result of ${id}`, { owner })) history.record(id, instance, `result of ${id}`);
  };
  const retry = async (instance: 'A' | 'B', id: string) =>
    history.answer(id, instance, answerOf(await on[instance].store.claim(id, exp, 'fp')));
  return {
    retry,
    async normal(id: string) {
      const owner = newOwner();
      ok((await claim('A', id, owner)).status === 'first', 'first claim');
      await retry('B', id);
      await finish('A', id, owner);
      await retry('B', id);
    },
    async lostClaim(id: string) {
      const [first, second] = [newOwner(), newOwner()];
      a.loseNextReply();
      await rejectsMrtr(() => claim('A', id, first), 'a claim whose reply is lost', lost);
      ok((await a.store.release(id, first)) === true, 'release after a lost claim reply');
      ok((await claim('A', id, second)).status === 'first', 'claimed again');
      await finish('A', id, second);
    },
    async lostRecord(id: string) {
      const owner = newOwner();
      ok((await claim('A', id, owner)).status === 'first', 'first claim');
      history.effect(id, 'A');
      a.loseNextReply();
      await rejectsMrtr(() => a.store.record(id, 'fp', `result of ${id}`, { owner }), 'a record whose reply is lost', lost);
      if (await a.store.record(id, 'fp', `result of ${id}`, { owner })) history.record(id, 'A', `result of ${id}`);
    },
    async crash(id: string) {
      ok((await claim('A', id, newOwner(), shortMs)).status === 'first', 'first claim');
      history.effect(id, 'A');
      history.strand(id, 'A');
    },
    async stalled(id: string) {
      const owner = newOwner();
      a.stall();
      const held = claim('A', id, owner);
      await a.idle(); // A's claim acted, its reply held
      await retry('B', id); // B finds it held
      a.resume();
      ok((await held).status === 'first', 'the stalled claim was first');
      await finish('A', id, owner);
    },
    async blackholed(id: string) {
      const owner = newOwner();
      a.blackhole();
      await rejectsMrtr(() => claim('A', id, newOwner()), 'a claim into a black hole', lost);
      a.heal();
      ok((await claim('B', id, owner)).status === 'first', 'the claim that never arrived took nothing');
      await finish('B', id, owner);
    },
  };
}

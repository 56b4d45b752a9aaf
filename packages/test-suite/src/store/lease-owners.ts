import { ok } from '../assert.js';
import { type GroupTest, newOwner, type StoreSuite, claimStatus, uniqueId } from './context.js';
import { LONG_LEASE_MS, leaseTimes, leftOf } from './lease-times.js';

/** Reclaim and renew: who holds a lease, and until when. */
export function takeoverTests(suite: StoreSuite, test: GroupTest): void {
  test('reclaim takes a lapsed claim over with the next fence; the owners before can no longer record, renew or release it', async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, b, c, exp] = [uniqueId('reclaim'), newOwner(), newOwner(), newOwner(), await times.exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: times.shortMs })) === 'first:0', 'first claim');
    await times.lapse(id, exp, 'fp');
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: b, leaseMs: times.shortMs, reclaim: true })) === 'first:1',
      'a reclaim is first with fence 1',
    );
    ok((await store.record(id, 'fp', 'a', { owner: a })) === false, 'the old owner cannot record');
    ok((await store.renew(id, a, LONG_LEASE_MS)) === false, 'nor renew');
    ok((await store.release(id, a)) === false, 'nor release (another owner holds it)');
    await times.lapse(id, exp, 'fp');
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: c, leaseMs: LONG_LEASE_MS, reclaim: true })) === 'first:2',
      'the next reclaim has fence 2',
    );
    ok((await store.record(id, 'fp', 'b', { owner: b })) === false, 'the owner before it cannot record');
    ok((await store.record(id, 'fp', 'c', { owner: c })) === true, 'the holder records');
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: 1, reclaim: true })) === 'recorded:c',
      'a recorded claim is never reclaimed',
    );
  });

  test('renew extends a lease (a lapsed one too, unless reclaimed), only for its owner and only while unrecorded', async (store) => {
    const times = leaseTimes(suite, store);
    const [id, a, b, exp] = [uniqueId('renew'), newOwner(), newOwner(), await times.exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0', 'first claim');
    ok((await store.renew(id, b, 2 * LONG_LEASE_MS)) === false, 'another owner cannot renew');
    ok((await store.renew(id, a, 2 * LONG_LEASE_MS)) === true, 'the owner renews');
    const left = leftOf(await store.claim(id, exp, 'fp'));
    ok(left > LONG_LEASE_MS && left <= 2 * LONG_LEASE_MS, `the lease runs leaseMs from the renewal (leaseLeftMs ${left})`);
    ok((await store.renew(id, a, times.shortMs)) === true, 'a renewal sets the lease, shorter too');
    await times.lapse(id, exp, 'fp');
    ok((await store.renew(id, a, LONG_LEASE_MS)) === true, 'a lapsed lease that nobody reclaimed is renewed (its owner was only slow)');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'pending', 'and runs again');
    ok((await store.record(id, 'fp', 'done', { owner: a })) === true, 'record');
    ok((await store.renew(id, a, LONG_LEASE_MS)) === false, 'a recorded claim is not renewed');
    ok((await store.renew(uniqueId('never'), a, LONG_LEASE_MS)) === false, 'an id never claimed is not renewed');
  });
}

/** Release and record: only the owner, and twice answers as once. */
export function ownerTests(suite: StoreSuite, test: GroupTest): void {
  test('release gives an unrecorded claim back to its owner only; twice answers as once; never a recorded claim', async (store) => {
    const [id, a, b, c, exp] = [uniqueId('release'), newOwner(), newOwner(), newOwner(), await leaseTimes(suite, store).exp()];
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0', 'first claim');
    ok((await store.release(id, b)) === false, "another owner's release is refused");
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'pending', 'and changes nothing');
    ok((await store.release(id, a)) === true, 'the owner releases');
    ok((await store.release(id, a)) === true, 'twice answers as once');
    ok(
      claimStatus(await store.claim(id, exp, 'fp', { owner: c, leaseMs: LONG_LEASE_MS })) === 'first:0',
      'the id is free again, as if never claimed',
    );
    ok((await store.release(id, a)) === false, "the former owner's release is refused once another owner holds it");
    ok((await store.record(id, 'fp', 'kept', { owner: c })) === true, 'record');
    ok((await store.release(id, c)) === false, 'a recorded claim is never released');
    ok(claimStatus(await store.claim(id, exp, 'fp')) === 'recorded:kept', 'and keeps its outcome');
    ok((await store.release(uniqueId('never'), a)) === true, 'an id never claimed: the owner holds no claim of it');
    const [consumed, plain] = [uniqueId('consumed'), uniqueId('plain')];
    ok((await store.consume(consumed, exp)) === true, 'consume');
    await store.release(consumed, a);
    ok((await store.consume(consumed, exp)) === false, 'a release never frees a consumed id');
    ok(['first', 'first:0'].includes(claimStatus(await store.claim(plain, exp, 'fp'))), 'a claim without owner');
    await store.release(plain, a);
    ok(claimStatus(await store.claim(plain, exp, 'fp')) === 'pending', 'a release never frees a claim without owner');
  });

  test(
    'record by the owner twice answers the same; another owner, or none, cannot record an owned claim',
    async (store) => {
      const [id, big, a, b, exp] = [uniqueId('record'), uniqueId('big'), newOwner(), newOwner(), await leaseTimes(suite, store).exp()];
      ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0', 'first claim');
      ok((await store.record(id, 'fp', 'theirs', { owner: b })) === false, 'another owner cannot record');
      ok((await store.record(id, 'fp', 'nobody')) === false, 'a record without owner cannot record an owned claim');
      ok((await store.record(id, 'fp', 'mine', { owner: a })) === true, 'the owner records');
      ok((await store.record(id, 'fp', 'mine', { owner: a })) === true, 'and again (a retry after a lost reply): the same answer');
      ok((await store.record(id, 'fp', 'mine', { owner: b })) === false, 'another owner still cannot');
      ok(claimStatus(await store.claim(id, exp, 'fp')) === 'recorded:mine', 'the outcome is the first one');
      ok(claimStatus(await store.claim(big, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0', 'first claim');
      ok((await store.record(big, 'fp', 'x'.repeat(1001), { owner: a })) === false, 'an outcome past maxOutcomeBytes is not kept');
      ok((await store.record(big, 'fp', 'x'.repeat(1001), { owner: a })) === false, 'and again answers the same');
      ok(claimStatus(await store.claim(big, exp, 'fp')) === 'replayed', 'its retries are replays');
    },
    { maxOutcomeBytes: 1000 },
  );

  test('misuse of owner and leaseMs is a TypeError/RangeError, and writes nothing', async (store) => {
    const [id, a, exp] = [uniqueId('misuse'), newOwner(), await leaseTimes(suite, store).exp()];
    const calls: [string, () => Promise<unknown>][] = [
      ['claim, a 5-character owner', () => store.claim(id, exp, 'fp', { owner: 'short', leaseMs: 1000 })],
      ['claim, a 65-character owner', () => store.claim(id, exp, 'fp', { owner: 'o'.repeat(65), leaseMs: 1000 })],
      ['claim, an owner with spaces', () => store.claim(id, exp, 'fp', { owner: 'not base64url at all', leaseMs: 1000 })],
      ['claim, leaseMs 0', () => store.claim(id, exp, 'fp', { owner: a, leaseMs: 0 })],
      ['claim, leaseMs -1', () => store.claim(id, exp, 'fp', { owner: a, leaseMs: -1 })],
      ['claim, leaseMs 1.5', () => store.claim(id, exp, 'fp', { owner: a, leaseMs: 1.5 })],
      ['claim, leaseMs NaN', () => store.claim(id, exp, 'fp', { owner: a, leaseMs: Number.NaN })],
      ['renew, a 5-character owner', () => store.renew(id, 'short', 1000)],
      ['renew, leaseMs 0', () => store.renew(id, a, 0)],
      ['release, a 5-character owner', () => store.release(id, 'short')],
    ];
    for (const [what, call] of calls) {
      const thrown = await call().then(
        (value) => `resolved ${JSON.stringify(value)}`,
        (error: unknown) => error,
      );
      ok(
        thrown instanceof TypeError || thrown instanceof RangeError,
        `${what}: must reject with TypeError/RangeError (got ${String(thrown)})`,
      );
    }
    ok(claimStatus(await store.claim(id, exp, 'fp', { owner: a, leaseMs: LONG_LEASE_MS })) === 'first:0', 'no refused call wrote anything');
  });
}

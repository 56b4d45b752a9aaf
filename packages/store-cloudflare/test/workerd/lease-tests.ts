// This store's own tests of its clock, leases and epoch, inside workerd against the real object (on the tests' clock).
import { MrtrError } from '@mrtr/core';
import { ownerValues } from '@mrtr/core/store';
import type { TestFn } from '../../../test-suite/src/types.js';
import { objectName } from '../../src/binding.js';
import { createDurableObjectStore, type DurableObjectReplayStore } from '../../src/index.js';
import { clock, droppingBinding, type TestEnv } from './tests.js';

/** The code a call rejects with (or what it resolved). */
export const code = async (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    (value) => `resolved ${JSON.stringify(value)}`,
    (error: unknown) => (MrtrError.is(error) ? error.code : `not an MrtrError: ${String(error)}`),
  );

export function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

const shown = (value: unknown): string => JSON.stringify(value);
const newOwner = (): string => ownerValues(1)[0] as string;
let sequence = 0;
const unique = (tag: string) => `${tag}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;

export function registerLeaseTests(it: TestFn, env: () => TestEnv): void {
  const store = (namespace: string, shards = 2): DurableObjectReplayStore =>
    createDurableObjectStore({ objects: env().STORE, namespace, shards });
  const expect = (actual: unknown, wanted: unknown, what: string) =>
    check(shown(actual) === shown(wanted), `${what}: got ${shown(actual)}, wanted ${shown(wanted)}`);

  it('clock: time() is the object clock; an expiry it has passed is refused (ERR_STATE_EXPIRED), nothing written', async () => {
    const s = store(unique('clock'));
    check(s.capabilities.clock && s.capabilities.leases && s.capabilities.epoch, 'declares clock, leases and epoch');
    check((await s.time()) === clock.now(), 'time() answers the object clock');
    const id = unique('id');
    check((await code(s.consume(id, clock.now()))) === 'ERR_STATE_EXPIRED', 'an expiry at the object clock is refused');
    check((await code(s.claim(id, clock.now() - 1, 'fp'))) === 'ERR_STATE_EXPIRED', 'one before it too, for a claim');
    check((await s.consume(id, clock.now() + 1_000)) === true, 'nothing was written: the id is still free');
    const lossy = droppingBinding(env().STORE);
    const lossyStore = createDurableObjectStore({ objects: lossy.binding, namespace: unique('clock-lost'), shards: 2 });
    lossy.drop('next', 'claim');
    check((await code(lossyStore.claim(unique('id'), clock.now(), 'fp'))) === 'ERR_STATE_EXPIRED', 'a refusal whose reply is lost too');
    lossy.drop('next', 'time');
    check((await code(lossyStore.time())) === 'ERR_STORE_UNAVAILABLE', 'a lost time() fails closed');
    let refused = '';
    try {
      createDurableObjectStore({ objects: env().STORE, now: Date.now } as never);
    } catch (error) {
      refused = (error as Error).message;
    }
    check(/now is gone/.test(refused), 'a caller clock is refused: the objects decide');
  });

  it('leases: pending with leaseLeftMs while a lease runs, renew, unknown once it lapsed, reclaim with the next fence', async () => {
    const s = store(unique('lease'));
    const [a, b, c] = [newOwner(), newOwner(), newOwner()];
    const id = unique('id');
    const exp = clock.now() + 600_000;
    expect(await s.claim(id, exp, 'fp', { owner: a, leaseMs: 1_000 }), { status: 'first', fence: 0 }, 'first claim');
    expect(await s.claim(id, exp, 'fp', { owner: b, leaseMs: 1_000 }), { status: 'pending', leaseLeftMs: 1_000 }, 'while it runs');
    clock.advance(400);
    expect(
      await s.claim(id, exp, 'fp', { owner: b, leaseMs: 1_000, reclaim: true }),
      { status: 'pending', leaseLeftMs: 600 },
      'no reclaim of a running lease',
    );
    check((await s.renew(id, a, 1_000)) === true, 'the owner renews');
    check((await s.renew(id, b, 1_000)) === false, 'no one else does');
    expect(await s.claim(id, exp, 'fp'), { status: 'pending', leaseLeftMs: 1_000 }, 'renewed from now');
    clock.advance(1_000);
    expect(await s.claim(id, exp, 'fp', { owner: b, leaseMs: 1_000 }), { status: 'unknown' }, 'lapsed, unrecorded: unknown');
    expect(await s.claim(id, exp, 'other'), { status: 'replayed' }, 'another fingerprint: replayed');
    check((await s.renew(id, a, 1_000)) === true, 'a lapsed lease nobody took over is renewed (its owner was slow)');
    expect(await s.claim(id, exp, 'fp'), { status: 'pending', leaseLeftMs: 1_000 }, 'and runs again');
    clock.advance(1_000);
    expect(await s.claim(id, exp, 'fp', { owner: b, leaseMs: 1_000, reclaim: true }), { status: 'first', fence: 1 }, 'reclaimed');
    check((await s.renew(id, a, 1_000)) === false, 'the former owner no longer renews');
    check((await s.record(id, 'fp', 'late', { owner: a })) === false, 'nor records');
    check((await s.release(id, a)) === false, 'nor releases');
    clock.advance(1_000);
    expect(await s.claim(id, exp, 'fp', { owner: c, leaseMs: 1_000, reclaim: true }), { status: 'first', fence: 2 }, 'fence 2');
    check((await s.record(id, 'fp', 'done', { owner: c })) === true, 'the owner records');
    expect(await s.claim(id, exp, 'fp', { reclaim: true, owner: b, leaseMs: 1 }), { status: 'recorded', outcome: 'done' }, 'recorded');
  });

  it('leases: without owner or leaseMs a claim never lapses; a lapsed lease still records', async () => {
    const s = store(unique('no-lease'));
    const exp = clock.now() + 600_000;
    const [plain, ownerOnly, leased] = [unique('p'), unique('o'), unique('l')];
    const a = newOwner();
    expect(await s.claim(plain, exp, 'fp'), { status: 'first', fence: 0 }, 'no owner');
    expect(await s.claim(ownerOnly, exp, 'fp', { owner: a }), { status: 'first', fence: 0 }, 'no leaseMs');
    expect(await s.claim(leased, exp, 'fp', { owner: a, leaseMs: 10 }), { status: 'first', fence: 0 }, 'a lease');
    clock.advance(100_000);
    for (const id of [plain, ownerOnly]) {
      expect(await s.claim(id, exp, 'fp', { owner: newOwner(), leaseMs: 10, reclaim: true }), { status: 'pending' }, 'never lapses');
    }
    check((await s.record(leased, 'fp', 'out', { owner: a })) === true, 'lapsed, not reclaimed: its owner records');
  });

  it('leases: record only by the owner, twice by it answers as once; release is compare-and-delete by owner', async () => {
    const s = store(unique('record'));
    const exp = clock.now() + 600_000;
    const [a, b] = [newOwner(), newOwner()];
    const id = unique('id');
    await s.claim(id, exp, 'fp', { owner: a, leaseMs: 60_000 });
    check((await s.record(id, 'fp', 'theirs', { owner: b })) === false, 'not the owner: refused');
    check((await s.record(id, 'fp', 'out', { owner: a })) === true, 'the owner records');
    check((await s.record(id, 'fp', 'out', { owner: a })) === true, 'a second record by the owner answers as the first');
    check((await s.record(id, 'fp', 'out', { owner: b })) === false, 'by anyone else: false');
    check((await s.release(id, a)) === false, 'a recorded claim is not given back');
    const big = unique('big');
    await s.claim(big, exp, 'fp', { owner: a, leaseMs: 60_000 });
    check((await s.record(big, 'fp', 'x'.repeat(s.maxOutcomeBytes + 1), { owner: a })) === false, 'not kept');
    check((await s.record(big, 'fp', 'small', { owner: a })) === false, 'and a second record by its owner answers the same');
    const free = unique('free');
    await s.claim(free, exp, 'fp', { owner: a, leaseMs: 60_000 });
    check((await s.release(free, b)) === false, 'another owner cannot give it back');
    check((await s.release(free, a)) === true, 'its owner does');
    check((await s.release(free, a)) === true, 'twice answers as once');
    expect(await s.claim(free, exp, 'fp', { owner: b, leaseMs: 60_000 }), { status: 'first', fence: 0 }, 'free again, as never claimed');
    check((await s.release(free, a)) === false, "now another owner's claim holds it");
  });

  it('lost replies: a reclaim, renew, record by owner and release whose replies are lost answer as if they arrived', async () => {
    const namespace = unique('lease-lost');
    const lossy = droppingBinding(env().STORE);
    const s = createDurableObjectStore({ objects: lossy.binding, namespace, shards: 2 });
    const peer = store(namespace);
    const exp = clock.now() + 600_000;
    const [a, b] = [newOwner(), newOwner()];
    const id = unique('id');
    lossy.drop('next', 'claim');
    expect(await s.claim(id, exp, 'fp', { owner: a, leaseMs: 1_000 }), { status: 'first', fence: 0 }, 'a lost first claim');
    clock.advance(1_000);
    lossy.drop('next', 'claim');
    expect(await s.claim(id, exp, 'fp', { owner: b, leaseMs: 1_000, reclaim: true }), { status: 'first', fence: 1 }, 'a lost reclaim');
    lossy.drop('next', 'renew');
    check((await s.renew(id, b, 5_000)) === true, 'a lost renew');
    expect(await peer.claim(id, exp, 'fp'), { status: 'pending', leaseLeftMs: 5_000 }, 'it landed');
    lossy.drop('next', 'record');
    check((await s.record(id, 'fp', 'out', { owner: b })) === true, 'a lost record by its owner');
    expect(await peer.claim(id, exp, 'fp'), { status: 'recorded', outcome: 'out' }, 'it landed');
    const other = unique('id');
    await s.claim(other, exp, 'fp', { owner: a, leaseMs: 1_000 });
    lossy.drop('next', 'release');
    check((await s.release(other, a)) === true, 'a lost release');
    expect(await peer.claim(other, exp, 'fp', { owner: b, leaseMs: 1_000 }), { status: 'first', fence: 0 }, 'it landed');
    lossy.drop('all');
    check((await code(s.renew(other, b, 1_000))) === 'ERR_STORE_UNAVAILABLE', 'every reply lost: renew unavailable');
    check((await code(s.release(other, b))) === 'ERR_STORE_UNAVAILABLE', 'release too');
    check((await code(s.record(other, 'fp', 'x', { owner: b }))) === 'ERR_STORE_UNAVAILABLE', 'record too');
    lossy.drop('none');
  });

  it('epoch: an object whose epoch row and ids are lost starts a new epoch; older mintedAtMs refused (ERR_LEDGER_LOST), newer accepted', async () => {
    const namespace = unique('epoch');
    const s = store(namespace, 1);
    const exp = clock.now() + 600_000;
    const spent = unique('spent');
    check((await s.consume(spent, exp)) === true, 'spent (the object starts its epoch)');
    check((await code(s.consume(unique('id'), exp, { mintedAtMs: clock.now() - 1 }))) === 'ERR_LEDGER_LOST', 'minted before the epoch');
    check((await s.consume(unique('id'), exp, { mintedAtMs: clock.now() })) === true, 'minted at it: accepted');
    clock.advance(1_000);
    const minted = clock.now() - 500; // before the loss
    const stub = env().STORE.get(env().STORE.idFromName(objectName('replay', namespace, 0)));
    await (await stub.fetch('https://test.internal/test/lose-epoch', { method: 'POST', body: '' })).text();
    clock.advance(10);
    check((await code(s.consume(spent, exp, { mintedAtMs: minted }))) === 'ERR_LEDGER_LOST', 'the lost id is not taken again');
    check((await code(s.claim(unique('id'), exp, 'fp', { mintedAtMs: minted }))) === 'ERR_LEDGER_LOST', 'claim too');
    const lossy = droppingBinding(env().STORE);
    const lossyStore = createDurableObjectStore({ objects: lossy.binding, namespace, shards: 1 });
    lossy.drop('next', 'consume');
    check((await code(lossyStore.consume(unique('id'), exp, { mintedAtMs: minted }))) === 'ERR_LEDGER_LOST', 'a lost refusal too');
    check((await s.consume(spent, exp, { mintedAtMs: clock.now() })) === true, 'a state minted after the new epoch is accepted');
    check((await s.consume(spent, exp, { mintedAtMs: clock.now() })) === false, 'once');
  });
}

// This store's own tests of ledgerEpoch, inside workerd against the real objects (on the tests' clock): every shard's
// object keeps its own epoch; ledgerEpoch writes each where missing and resolves the latest.
import type { TestFn } from '../../../test-suite/src/types.js';
import { objectName, shardOf } from '../../src/binding.js';
import { createDurableObjectStore, type DurableObjectReplayStore } from '../../src/index.js';
import { check, code } from './lease-tests.js';
import { clock, droppingBinding, REPLAY_SHARDS, type TestEnv } from './tests.js';

let sequence = 0;
const unique = (tag: string) => `${tag}:${(sequence++).toString(36)}:${Math.random().toString(36).slice(2)}`;
/** Every shard of the store under test (a function: this module is loaded before tests.ts sets REPLAY_SHARDS). */
const shards = (): number[] => Array.from({ length: REPLAY_SHARDS }, (_, shard) => shard);

/** A test request to the object of `shard` (see the test subclass in suite-worker.ts). */
async function testRequest(env: TestEnv, namespace: string, shard: number, path: string): Promise<Record<string, unknown>> {
  const stub = env.STORE.get(env.STORE.idFromName(objectName('replay', namespace, shard)));
  const response = await stub.fetch(`https://test.internal${path}`, { method: 'POST', body: '' });
  return JSON.parse(await response.text()) as Record<string, unknown>;
}

/** Deletes the epoch row and every id of one shard's object: its storage lost under it. */
export const loseShard = (env: TestEnv, namespace: string, shard: number): Promise<unknown> =>
  testRequest(env, namespace, shard, '/test/lose-epoch');

/** The epoch row of one shard's object as it is (`null`: missing), written by nothing but the object's start. */
const peekEpoch = async (env: TestEnv, namespace: string, shard: number): Promise<number | null> =>
  (await testRequest(env, namespace, shard, '/test/epoch')).epoch as number | null;

/** An id of each shard, `count` of them per shard. */
function idsByShard(count = 1): string[][] {
  const ids: string[][] = shards().map(() => []);
  for (let i = 0; i < 10_000 && ids.some((list) => list.length < count); i++) {
    const id = unique('id');
    ids[shardOf(id, REPLAY_SHARDS)]?.push(id);
  }
  return ids.map((list) => list.slice(0, count));
}

export function registerEpochTests(it: TestFn, env: () => TestEnv): void {
  const store = (namespace: string): DurableObjectReplayStore =>
    createDurableObjectStore({ objects: env().STORE, namespace, shards: REPLAY_SHARDS });

  it('ledgerEpoch: on a fresh namespace it writes every shard epoch (the objects clock) and resolves their latest, never moving one', async () => {
    const namespace = unique('fresh');
    const s = store(namespace);
    const begun = clock.now();
    check((await s.ledgerEpoch()) === begun, 'a fresh namespace: every shard begins now');
    clock.advance(1_000);
    for (const shard of shards()) check((await peekEpoch(env(), namespace, shard)) === begun, `shard ${shard} has its epoch`);
    check((await s.ledgerEpoch()) === begun, 'again: the same, nothing moved');
    // Shard 2 loses its epoch row: ledgerEpoch writes it again (the object's clock now) and it is the latest.
    await loseShard(env(), namespace, 2);
    check((await peekEpoch(env(), namespace, 2)) === null, 'the row is gone');
    clock.advance(1_000);
    const later = clock.now();
    clock.advance(1_000);
    const latest = await s.ledgerEpoch();
    check(latest === later + 1_000, `the rewritten shard is the latest (${latest})`);
    const epochs = await Promise.all(shards().map((shard) => peekEpoch(env(), namespace, shard)));
    const wanted = shards().map((shard) => (shard === 2 ? latest : begun));
    check(JSON.stringify(epochs) === JSON.stringify(wanted), `every other shard kept its own: ${epochs}`);
    check(latest === Math.max(...(epochs as number[])), 'the answer is their maximum');
  });

  it('ledgerEpoch: a state spent with mintedAtMs = ledgerEpoch is accepted on ids of every shard; one before the latest is refused there', async () => {
    const namespace = unique('every');
    // The shards begin at different times (each at its first request), the last one latest.
    for (const shard of shards()) {
      await peekEpoch(env(), namespace, shard);
      clock.advance(1_000);
    }
    const s = store(namespace);
    const epoch = await s.ledgerEpoch();
    const firsts = await Promise.all(shards().map((shard) => peekEpoch(env(), namespace, shard)));
    check(epoch === firsts[REPLAY_SHARDS - 1] && epoch > (firsts[0] as number), `the latest of ${firsts}: ${epoch}`);
    const exp = clock.now() + 600_000;
    for (const [shard, ids] of idsByShard(2).entries()) {
      const [consumed, claimed] = ids as [string, string];
      check((await s.consume(consumed, exp, { mintedAtMs: epoch })) === true, `consume accepted on shard ${shard}`);
      const first = await s.claim(claimed, exp, 'fp', { mintedAtMs: epoch });
      check(first.status === 'first', `claim accepted on shard ${shard}`);
    }
    const [last] = idsByShard()[REPLAY_SHARDS - 1] as [string];
    check((await code(s.consume(last, exp, { mintedAtMs: epoch - 1 }))) === 'ERR_LEDGER_LOST', 'before the latest shard epoch: refused');
  });

  it('ledgerEpoch: after a shard loses its epoch row and ids, the old epoch is refused on that shard only; ledgerEpoch resolves a later one', async () => {
    const namespace = unique('lost');
    const s = store(namespace);
    const exp = clock.now() + 600_000;
    const old = await s.ledgerEpoch();
    const ids = idsByShard(3);
    for (const list of ids) check((await s.consume(list[0] as string, exp, { mintedAtMs: old })) === true, 'spent on its shard');
    clock.advance(1_000);
    await loseShard(env(), namespace, 1);
    clock.advance(10);
    const [spent, other] = ids[1] as [string, string];
    check((await code(s.consume(spent, exp, { mintedAtMs: old }))) === 'ERR_LEDGER_LOST', 'the lost shard refuses the spent state');
    check((await code(s.claim(other, exp, 'fp', { mintedAtMs: old }))) === 'ERR_LEDGER_LOST', 'and any state minted on the old epoch');
    for (const shard of [0, 2, 3]) {
      check((await s.consume((ids[shard] as string[])[1] as string, exp, { mintedAtMs: old })) === true, `shard ${shard} still serves it`);
    }
    const since = await s.ledgerEpoch();
    check(since > old && since <= clock.now(), `a later epoch (${since} after ${old})`);
    check((await s.consume(spent, exp, { mintedAtMs: since })) === true, 'a state minted on the new epoch is accepted');
    check((await s.consume(spent, exp, { mintedAtMs: since })) === false, 'once');
  });

  it('ledgerEpoch: a lost reply is asked again (the epoch it wrote answers), every reply lost is ERR_STORE_UNAVAILABLE', async () => {
    const namespace = unique('lossy');
    const lossy = droppingBinding(env().STORE);
    const s = createDurableObjectStore({ objects: lossy.binding, namespace, shards: REPLAY_SHARDS });
    const begun = clock.now();
    lossy.drop('next', 'epoch');
    check((await s.ledgerEpoch()) === begun, 'one reply lost: asked again');
    clock.advance(1_000);
    lossy.drop('next', 'epoch');
    check((await s.ledgerEpoch()) === begun, 'and it never moves');
    lossy.drop('all');
    check((await code(s.ledgerEpoch())) === 'ERR_STORE_UNAVAILABLE', 'every reply lost');
    lossy.drop('none');
    await s.close();
    check((await code(s.ledgerEpoch())) === 'ERR_STORE_UNAVAILABLE', 'closed');
    const broken = createDurableObjectStore({ objects: env().BROKEN, namespace, shards: 2 });
    check((await code(broken.ledgerEpoch())) === 'ERR_STORE_UNAVAILABLE', 'a broken object');
  });
}

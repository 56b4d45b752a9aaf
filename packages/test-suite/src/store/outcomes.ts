import type { ReplayStore } from '@mrtr/core';
import { type ClaimResult, type OutcomeStoreLimits, storeCapabilities } from '@mrtr/core/store';
import { fail, ok } from '../assert.js';
import { type StoreSuite, sleep, uniqueId, unlessExpired } from './context.js';

/** A store that records outcomes (`claim` + `record`). */
export type Recording = Required<Pick<ReplayStore, 'claim' | 'record'>> & ReplayStore;

/** An outcome test's registration: none when the store is declared without outcomes. */
export const outcomeTest = (s: StoreSuite): StoreSuite['test'] => (s.options.outcomes === false ? () => {} : s.test);

/** A store on a fresh namespace that records outcomes; on one that does not, the test passes (or fails, if declared). */
export async function withOutcomes(
  s: StoreSuite,
  fn: (store: Recording, namespace: string) => Promise<void>,
  limits?: OutcomeStoreLimits,
): Promise<void> {
  await s.withStore(async (store, namespace) => {
    if (storeCapabilities(store).outcomes === undefined) {
      if (s.options.outcomes === true) fail('the test expects outcomes: true but the store declares none');
      return;
    }
    await fn(store as Recording, namespace);
  }, limits);
}

const status = (r: ClaimResult): string => (r.status === 'recorded' ? `recorded:${r.outcome}` : r.status);
// A sealed outcome is an ASCII token up to a codec's cap (16 KiB by default, up to ~1 MiB); 64 KiB here.
const bigOutcome = (tag: string) => `${tag}.${'x'.repeat(64 * 1024 - tag.length - 1)}`;

/** Outcome recording (`claim` + `record`): registered for every store, which must implement both or neither. */
export function outcomesGroup(s: StoreSuite): void {
  declaresOutcomes(s);
  if (s.options.outcomes === false)
    console.info(`[${s.label}] outcome tests skipped: the store is declared with outcomes: false (every retry is a replay)`);
  for (const register of [
    recordsOfOneClaimSentTogether,
    claimFirstThenPendingForThe,
    recordKeepsNoOutcomeLongerThan,
    theOutcomesHeldNeverPassOutcomeBudgetBytes,
    aStateIsNoOracleThe,
    claimAndConsumeShareOneLedger,
    parallelClaimsOfOneIdOne,
    parallelClaimsOfOneIdWith,
    aClaimedIdWithItsOutcome,
    twoInstancesOnOneNamespaceShare2,
  ])
    register(s);
}

function declaresOutcomes(s: StoreSuite): void {
  const { label, withStore } = s;
  const declared = s.options.outcomes;
  s.test('declares its capabilities, and has the methods of each (outcomes: claim and record), as the test expects', async () => {
    await withStore(async (store) => {
      const caps = storeCapabilities(store);
      const records = caps.outcomes !== undefined;
      if (declared !== undefined) {
        ok(
          records === declared,
          `the test expects outcomes: ${declared}, but the store's capabilities ${records ? 'declare' : 'lack'} outcomes`,
        );
      } else {
        console.info(
          `[${label}] outcome tests: ${records ? 'run (the store declares outcomes)' : 'pass trivially (the store declares no outcomes; pass outcomes: false to skip them)'}`,
        );
      }
    });
  });
}

function recordsOfOneClaimSentTogether(s: StoreSuite): void {
  const { now } = s;
  outcomeTest(s)('records of one claim sent together (one batch): only the fingerprint that claimed is stored', async () => {
    await withOutcomes(s, async (store) => {
      const id = uniqueId('together');
      ok(status(await store.claim(id, now() + 60_000, 'fp-a')) === 'first', 'the first claim must be first');
      const [theirs, mine] = await Promise.all([store.record(id, 'fp-b', 'theirs'), store.record(id, 'fp-a', 'mine')]);
      ok(theirs === false, 'a record with another fingerprint must be refused, also beside the right one');
      ok(mine === true, 'the record by the fingerprint that claimed must be stored');
      const again = await store.claim(id, now() + 60_000, 'fp-a');
      ok(again.status === 'recorded' && again.outcome === 'mine', "the stored outcome is the claimant's");
    });
  });
}

function claimFirstThenPendingForThe(s: StoreSuite): void {
  const { now } = s;
  outcomeTest(s)('claim: first, then pending for the same fingerprint, recorded after record, replayed for another', async () => {
    await withOutcomes(
      s,
      async (store) => {
        const id = uniqueId('claim');
        const exp = now() + 60_000;
        ok(status(await store.claim(id, exp, 'fp-a')) === 'first', 'the first claim must be first');
        ok(status(await store.claim(id, exp, 'fp-a')) === 'pending', 'the same fingerprint before record must be pending');
        ok(status(await store.claim(id, exp, 'fp-b')) === 'replayed', 'another fingerprint must be replayed');
        ok((await store.record(id, 'fp-b', 'theirs')) === false, 'record with another fingerprint must be refused');
        ok(status(await store.claim(id, exp, 'fp-a')) === 'pending', 'a refused record changes nothing');
        const outcome = bigOutcome('mine');
        ok((await store.record(id, 'fp-a', outcome)) === true, 'record by the fingerprint that claimed must be stored');
        ok((await store.record(id, 'fp-a', 'again')) === false, 'a second record must be refused');
        const again = await store.claim(id, exp, 'fp-a');
        ok(again.status === 'recorded' && again.outcome === outcome, 'an identical claim after record gets the outcome, unchanged');
        ok(status(await store.claim(id, exp, 'fp-b')) === 'replayed', 'another fingerprint stays replayed');
        ok((await store.consume(id, exp)) === false, 'a claimed id is consumed for consume too');
      },
      { maxOutcomeBytes: 64 * 1024 },
    );
  });
}

function recordKeepsNoOutcomeLongerThan(s: StoreSuite): void {
  const { now } = s;
  outcomeTest(s)('record keeps no outcome longer than maxOutcomeBytes, and says how large it keeps', async () => {
    await withOutcomes(
      s,
      async (store) => {
        const declaredMax = storeCapabilities(store).outcomes?.maxOutcomeBytes;
        ok(declaredMax === 1000, `the store must declare the maxOutcomeBytes it was given (got ${String(declaredMax)})`);
        const exp = now() + 60_000;
        const fits = uniqueId('fits');
        ok(status(await store.claim(fits, exp, 'fp')) === 'first', 'first claim');
        ok((await store.record(fits, 'fp', 'y'.repeat(1000))) === true, 'an outcome of exactly maxOutcomeBytes is kept');
        const big = uniqueId('big');
        ok(status(await store.claim(big, exp, 'fp')) === 'first', 'first claim');
        ok((await store.record(big, 'fp', 'y'.repeat(1001))) === false, 'an outcome past maxOutcomeBytes is not kept');
        ok(status(await store.claim(big, exp, 'fp')) === 'replayed', 'its retries are replays');
        ok((await store.record(big, 'fp', 'small')) === false, 'and it cannot be recorded again');
      },
      { maxOutcomeBytes: 1000 },
    );
  });
}

function theOutcomesHeldNeverPassOutcomeBudgetBytes(s: StoreSuite): void {
  const { clock, now } = s;
  outcomeTest(s)('the outcomes held never pass outcomeBudgetBytes; past it a round is done, not kept', async () => {
    const size = 10_000;
    const budget = 4 * size + size / 2;
    await withOutcomes(
      s,
      async (store) => {
        const exp = now() + 60_000;
        const ids = Array.from({ length: 10 }, () => uniqueId('budget'));
        for (const id of ids) ok(status(await store.claim(id, exp, 'fp')) === 'first', 'first claim');
        // In parallel: the budget is checked and taken in one step, whatever the concurrency.
        const results = await Promise.all(ids.map((id, i) => store.record(id, 'fp', `${i}`.padEnd(size, 'z'))));
        const kept = ids.filter((_, i) => results[i] === true);
        ok(kept.length >= 1, 'the first outcome within the budget must be kept');
        ok(kept.length <= 4, `at most 4 outcomes of ${size} bytes fit in ${budget}, ${kept.length} were kept`);
        for (const [i, id] of ids.entries()) {
          const found = await store.claim(id, exp, 'fp');
          if (kept.includes(id)) ok(found.status === 'recorded' && found.outcome.startsWith(`${i}`), 'a kept outcome stays');
          else ok(found.status === 'replayed', `an outcome past the budget is done, not kept (got ${found.status})`);
        }
        const more = uniqueId('budget-more');
        await store.claim(more, exp, 'fp');
        if (kept.length === 4) ok((await store.record(more, 'fp', 'r'.repeat(size))) === false, 'a full budget keeps nothing more');
        if (clock) {
          // The budget frees as the ids holding it expire (a store may count them a little past their expiry).
          await clock.advance(60_000 + 3_600_000);
          const later = uniqueId('budget-later');
          ok(status(await store.claim(later, now() + 60_000, 'fp')) === 'first', 'first claim');
          ok((await store.record(later, 'fp', 'w'.repeat(size))) === true, 'expired outcomes no longer count against the budget');
        }
      },
      { maxOutcomeBytes: size, outcomeBudgetBytes: budget },
    );
  });
}

function aStateIsNoOracleThe(s: StoreSuite): void {
  const { now } = s;
  outcomeTest(s)('a state is no oracle: the third claim with another fingerprint drops the outcome, recorded or pending', async () => {
    await withOutcomes(s, async (store) => {
      const exp = now() + 60_000;
      const recorded = uniqueId('oracle');
      ok(status(await store.claim(recorded, exp, 'right')) === 'first', 'first claim');
      ok((await store.record(recorded, 'right', 'secret-result')) === true, 'record');
      ok(status(await store.claim(recorded, exp, 'guess-1')) === 'replayed', 'a wrong guess is a replay');
      ok(status(await store.claim(recorded, exp, 'guess-2')) === 'replayed', 'a second wrong guess is a replay');
      ok(status(await store.claim(recorded, exp, 'right')) === 'recorded:secret-result', 'two misses leave the outcome');
      ok(status(await store.claim(recorded, exp, 'guess-3')) === 'replayed', 'a third wrong guess is a replay');
      ok(status(await store.claim(recorded, exp, 'right')) === 'replayed', 'after three misses the outcome is gone for everyone');
      const pending = uniqueId('oracle-pending');
      ok(status(await store.claim(pending, exp, 'right')) === 'first', 'first claim');
      for (let i = 0; i < 3; i++) ok(status(await store.claim(pending, exp, `guess-${i}`)) === 'replayed', 'wrong guesses are replays');
      ok((await store.record(pending, 'right', 'late-result')) === false, 'a round that ends after three misses keeps nothing');
      ok(status(await store.claim(pending, exp, 'right')) === 'replayed', 'and its retries are replays');
      const consumed = uniqueId('oracle-consumed');
      ok((await store.consume(consumed, exp)) === true, 'consume');
      for (let i = 0; i < 4; i++) ok(status(await store.claim(consumed, exp, `g-${i}`)) === 'replayed', 'a consumed id stays replayed');
    });
  });
}

function claimAndConsumeShareOneLedger(s: StoreSuite): void {
  const { now } = s;
  outcomeTest(s)('claim and consume share one ledger; an outcome recorded as not kept makes retries replays', async () => {
    await withOutcomes(s, async (store) => {
      const exp = now() + 60_000;
      const consumed = uniqueId('consumed');
      ok((await store.consume(consumed, exp)) === true, 'consume first');
      ok(status(await store.claim(consumed, exp, 'fp')) === 'replayed', 'a consumed id must be replayed for claim');
      ok((await store.record(consumed, 'fp', 'x')) === false, 'record on a consumed id must be refused');
      const unkept = uniqueId('unkept');
      ok(status(await store.claim(unkept, exp, 'fp')) === 'first', 'claim first');
      ok((await store.record(unkept, 'fp', '')) === false, "record of '' (done, not kept) resolves false");
      ok(status(await store.claim(unkept, exp, 'fp')) === 'replayed', "after '' an identical claim is replayed");
      ok((await store.record(uniqueId('never'), 'fp', 'x')) === false, 'record on an id never claimed must be refused');
    });
  });
}

function parallelClaimsOfOneIdOne(s: StoreSuite): void {
  const { now, parallel } = s;
  outcomeTest(s)(`${parallel} parallel claims of one id: one first; identical ones pending, then all the same outcome`, async () => {
    await withOutcomes(s, async (store) => {
      const id = uniqueId('claim-race');
      const exp = now() + 60_000;
      const results = await Promise.all(Array.from({ length: parallel }, () => store.claim(id, exp, 'same')));
      const firsts = results.filter((r) => r.status === 'first').length;
      ok(firsts === 1, `exactly one claim must be first, got ${firsts}`);
      const pending = results.filter((r) => r.status === 'pending').length;
      ok(pending === parallel - 1, `every other identical claim must be pending, got ${pending} of ${parallel - 1}`);
      ok((await store.record(id, 'same', 'the-outcome')) === true, 'the winner records');
      const after = await Promise.all(Array.from({ length: parallel }, () => store.claim(id, exp, 'same')));
      ok(
        after.every((r) => r.status === 'recorded' && r.outcome === 'the-outcome'),
        'every identical claim gets the one outcome',
      );
    });
  });
}

function parallelClaimsOfOneIdWith(s: StoreSuite): void {
  const { now, parallel } = s;
  outcomeTest(s)(`${parallel} parallel claims of one id with other fingerprints: all replayed, and the outcome is gone`, async () => {
    await withOutcomes(s, async (store) => {
      const id = uniqueId('miss-race');
      const exp = now() + 60_000;
      ok(status(await store.claim(id, exp, 'owner')) === 'first', 'first claim');
      ok((await store.record(id, 'owner', 'the-outcome')) === true, 'record');
      const results = await Promise.all(Array.from({ length: parallel }, (_, i) => store.claim(id, exp, `guess-${i}`)));
      ok(
        results.every((r) => r.status === 'replayed'),
        'every claim with another fingerprint must be replayed',
      );
      ok(status(await store.claim(id, exp, 'owner')) === 'replayed', 'the misses, counted atomically, dropped the outcome');
    });
  });
}

function aClaimedIdWithItsOutcome(s: StoreSuite): void {
  const { clock, now, ttlMs } = s;
  outcomeTest(s)('a claimed id with its outcome expires with the id and is claimable again', async () => {
    await withOutcomes(s, async (store) => {
      if (!clock) {
        // Real time: one TTL, doubled when a loaded machine overslept (nothing asserted about that moment).
        for (let round = 0, ttl = ttlMs; round < 5; round++, ttl *= 2) {
          const id = uniqueId('claim-exp');
          const exp = Date.now() + ttl;
          const first = await unlessExpired(store.claim(id, exp, 'fp'));
          if (first === 'expired') continue;
          ok(status(first) === 'first', 'first claim');
          const recorded = await store.record(id, 'fp', 'out');
          if (Date.now() >= exp) continue;
          ok(recorded === true, 'record before expiry must be stored');
          while (Date.now() <= exp) await sleep(exp - Date.now() + 1);
          await sleep(Math.min(250, ttl));
          ok(status(await store.claim(id, Date.now() + 60_000, 'fp2')) === 'first', 'an expired id must be claimable again');
          return;
        }
        fail('the machine never recorded within the TTL (5 rounds, TTL doubled each time)');
      }
      const id = uniqueId('claim-exp');
      const exp = now() + 60_000;
      ok(status(await store.claim(id, exp, 'fp')) === 'first', 'first claim');
      ok((await store.record(id, 'fp', 'out')) === true, 'record');
      await clock.advance(60_000);
      ok(status(await store.claim(id, exp + 60_000, 'fp')) === 'recorded:out', 'still recorded at exactly expiresAtMs');
      await clock.advance(1);
      ok(status(await store.claim(id, now() + 60_000, 'fp2')) === 'first', 'an expired id must be claimable again');
      ok(status(await store.claim(id, now() + 60_000, 'fp')) === 'replayed', 'the old outcome is gone with it');
    });
  });
}

function twoInstancesOnOneNamespaceShare2(s: StoreSuite): void {
  const { options, now, withTwo } = s;
  if (options.sharedBackend !== false) {
    outcomeTest(s)('two instances on one namespace share claims and outcomes', async () => {
      await withTwo(async (first, second) => {
        if (storeCapabilities(first).outcomes === undefined) return;
        const [a, b] = [first, second] as Recording[] as [Recording, Recording];
        const id = uniqueId('fleet-claim');
        const exp = now() + 60_000;
        ok(status(await a.claim(id, exp, 'fp')) === 'first', 'A claims first');
        ok(status(await b.claim(id, exp, 'fp')) === 'pending', 'B sees it pending');
        ok((await a.record(id, 'fp', 'done')) === true, 'A records');
        ok(status(await b.claim(id, exp, 'fp')) === 'recorded:done', 'B gets the outcome');
      });
    });
  }
}

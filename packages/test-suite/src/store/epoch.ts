import { storeCapabilities } from '@mrtr/core/store';
import { ok, rejectsMrtr } from '../assert.js';
import { capabilityGroup, type FullStore, passTime, type StoreSuite, claimStatus, storeTime, uniqueId } from './context.js';

const LEDGER_LOST = ['ERR_LEDGER_LOST'] as const;

/** A store with `epoch`: a `mintedAtMs` before its ledger began is refused; none, no check. */
export function epochGroup(suite: StoreSuite): void {
  capabilityGroup(suite, 'epoch', (test) => {
    test('ledgerEpoch begins the ledger and stays; a mintedAtMs before it is refused ERR_LEDGER_LOST, unwritten; from it on accepted', async (store) => {
      const exp = (await storeTime(suite, store)) + 3_600_000;
      const epoch = await store.ledgerEpoch();
      ok(Number.isSafeInteger(epoch) && epoch >= 0, `ledgerEpoch must resolve a non-negative safe integer (got ${String(epoch)})`);
      ok(epoch <= (await storeTime(suite, store)), 'the epoch is not in the future of the store');
      const [id, claimed, later] = [uniqueId('before'), uniqueId('before-claim'), uniqueId('later')];
      await rejectsMrtr(() => store.consume(id, exp, { mintedAtMs: epoch - 1 }), 'a state minted before the ledger began', LEDGER_LOST);
      if (storeCapabilities(store).outcomes !== undefined) {
        await rejectsMrtr(() => store.claim(claimed, exp, 'fp', { mintedAtMs: 1 }), 'a claim of a state minted in 1970', LEDGER_LOST);
        ok(claimStatus(await store.claim(claimed, exp, 'fp')).startsWith('first'), 'the refused claim wrote nothing');
      }
      ok((await store.consume(id, exp)) === true, 'the refused consume wrote nothing, and without mintedAtMs there is no check');
      // What a guard seals in a state minted now (the epoch it learned) is accepted, on every part of the ledger.
      for (let i = 0; i < 8; i++) {
        ok((await store.consume(uniqueId(`now${i}`), exp, { mintedAtMs: epoch })) === true, 'a state minted on this ledger is accepted');
      }
      // The epoch stays where it began: the same state later on is still accepted, and ledgerEpoch answers the same.
      await passTime(suite, store, (await storeTime(suite, store)) + (suite.clock ? 1_800_000 : 5));
      ok((await store.consume(later, exp, { mintedAtMs: epoch })) === true, 'the epoch does not move while the ledger lives');
      ok((await store.ledgerEpoch()) === epoch, 'ledgerEpoch answers the same while the ledger lives');
    });

    const { loseLedger, sharedBackend } = suite.options;
    if (loseLedger === undefined && sharedBackend !== false) {
      console.info(`[${suite.label}] epoch: "a ledger lost after minting" skipped: no loseLedger option (a shared store needs one)`);
      return;
    }
    test('a ledger lost after minting refuses the states minted before, and accepts the ones minted after', async (first, namespace) => {
      const exp = (await storeTime(suite, first)) + 3_600_000;
      const [spent, fresh] = [uniqueId('spent'), uniqueId('fresh')];
      const minted = await first.ledgerEpoch();
      ok((await first.consume(spent, exp, { mintedAtMs: minted })) === true, 'a state is spent');
      await passTime(suite, first, (await storeTime(suite, first)) + 1);
      // A shared store loses its ledger in place (flush, restart without persistence); one of this process is lost
      // with the process: a new store on the namespace is its restart.
      await loseLedger?.(namespace);
      const second = (await suite.factory({ namespace })) as FullStore;
      try {
        const stores = loseLedger === undefined ? [second] : [first, second];
        for (const store of stores)
          await rejectsMrtr(() => store.consume(spent, exp, { mintedAtMs: minted }), 'the spent state again', LEDGER_LOST);
        const since = await second.ledgerEpoch();
        ok(since > minted, `the ledger begun again has a later epoch (${since} after ${minted})`);
        ok((await second.consume(fresh, exp, { mintedAtMs: since })) === true, 'a state minted after the loss is accepted');
        ok((await second.consume(fresh, exp, { mintedAtMs: since })) === false, 'once');
      } finally {
        await second.close();
      }
    });
  });
}

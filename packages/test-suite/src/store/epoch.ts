import { storeCapabilities } from '@mrtr/core/authoring';
import { ok, rejectsMrtr } from '../assert.js';
import { capabilityGroup, type FullStore, passTime, type StoreSuite, claimStatus, storeTime, uniqueId } from './context.js';

const LEDGER_LOST = ['ERR_LEDGER_LOST'] as const;

/** A store with `epoch`: a `mintedAtMs` before its ledger began is refused; none, no check. */
export function epochGroup(suite: StoreSuite): void {
  capabilityGroup(suite, 'epoch', (test) => {
    test('a mintedAtMs before the ledger began is refused with ERR_LEDGER_LOST, unwritten; from it on accepted; absent, no check', async (store) => {
      const exp = (await storeTime(suite, store)) + 3_600_000;
      ok((await store.consume(uniqueId('warm'), exp)) === true, 'a first write begins the ledger');
      const [id, claimed, later] = [uniqueId('before'), uniqueId('before-claim'), uniqueId('later')];
      await rejectsMrtr(() => store.consume(id, exp, { mintedAtMs: 1 }), 'a state minted in 1970', LEDGER_LOST);
      if (storeCapabilities(store).outcomes !== undefined) {
        await rejectsMrtr(() => store.claim(claimed, exp, 'fp', { mintedAtMs: 1 }), 'a claim of a state minted in 1970', LEDGER_LOST);
        ok(claimStatus(await store.claim(claimed, exp, 'fp')).startsWith('first'), 'the refused claim wrote nothing');
      }
      ok((await store.consume(id, exp)) === true, 'the refused consume wrote nothing, and without mintedAtMs there is no check');
      const minted = await storeTime(suite, store);
      ok((await store.consume(uniqueId('now'), exp, { mintedAtMs: minted })) === true, 'a state minted since the ledger began is accepted');
      // The epoch stays where it began: the same state later on is still accepted.
      await passTime(suite, store, minted + (suite.clock ? 1_800_000 : 5));
      ok((await store.consume(later, exp, { mintedAtMs: minted })) === true, 'the epoch does not move while the ledger lives');
    });

    const { loseLedger, sharedBackend } = suite.options;
    if (loseLedger === undefined && sharedBackend !== false) {
      console.info(`[${suite.label}] epoch: "a ledger lost after minting" skipped: no loseLedger option (a shared store needs one)`);
      return;
    }
    test('a ledger lost after minting refuses the states minted before, and accepts the ones minted after', async (first, namespace) => {
      const exp = (await storeTime(suite, first)) + 3_600_000;
      const [spent, fresh] = [uniqueId('spent'), uniqueId('fresh')];
      ok((await first.consume(uniqueId('warm'), exp)) === true, 'a first write begins the ledger');
      const minted = await storeTime(suite, first);
      ok((await first.consume(spent, exp, { mintedAtMs: minted })) === true, 'a state is spent');
      await passTime(suite, first, minted);
      // A shared store loses its ledger in place (flush, restart without persistence); one of this process is lost
      // with the process: a new store on the namespace is its restart.
      await loseLedger?.(namespace);
      const second = (await suite.factory({ namespace })) as FullStore;
      try {
        const stores = loseLedger === undefined ? [second] : [first, second];
        for (const store of stores)
          await rejectsMrtr(() => store.consume(spent, exp, { mintedAtMs: minted }), 'the spent state again', LEDGER_LOST);
        const since = await storeTime(suite, second);
        ok((await second.consume(fresh, exp, { mintedAtMs: since })) === true, 'a state minted after the loss is accepted');
        ok((await second.consume(fresh, exp, { mintedAtMs: since })) === false, 'once');
      } finally {
        await second.close();
      }
    });
  });
}

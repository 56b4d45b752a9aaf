import { storeCapabilities } from '@mrtr/core/store';
import { ok, rejectsMrtr } from '../assert.js';
import { capabilityGroup, type StoreSuite, claimStatus, storeTime, uniqueId } from './context.js';

/** A store with `clock`: `time()` is its clock, and a write whose expiry that clock has passed is refused, unwritten. */
export function clockGroup(suite: StoreSuite): void {
  capabilityGroup(suite, 'clock', (test) => {
    test("time() is the store's clock: finite epoch ms, steady between answers (the suite's clock when it has one)", async (store) => {
      const first = await store.time();
      const second = await store.time();
      ok(typeof first === 'number' && Number.isFinite(first), `time() must answer a finite number (got ${String(first)})`);
      ok(second >= first - 1000 && second - first < 60_000, `two answers of time() a moment apart: ${first}, then ${second}`);
      const { clock } = suite;
      if (clock) {
        ok(first === clock.now(), `a store built on the suite's clock must answer it (time() ${first}, clock ${clock.now()})`);
        await clock.advance(1234);
        ok((await store.time()) === first + 1234, "time() must follow the suite's clock");
        return;
      }
      ok(first > 1_500_000_000_000 && first < 100_000_000_000_000, `time() must be epoch milliseconds (got ${first})`);
    });

    test('an expiresAtMs at or before the store clock is refused with ERR_STATE_EXPIRED, and nothing is written', async (store) => {
      const claims = storeCapabilities(store).outcomes !== undefined;
      const id = uniqueId('expired');
      const t = await storeTime(suite, store);
      for (const exp of [t - 60_000, t - 1, t]) {
        await rejectsMrtr(() => store.consume(id, exp), `consume with an expiry ${t - exp} ms before the store's clock`, [
          'ERR_STATE_EXPIRED',
        ]);
        if (claims) {
          await rejectsMrtr(() => store.claim(id, exp, 'fp'), `claim with an expiry ${t - exp} ms before the store's clock`, [
            'ERR_STATE_EXPIRED',
          ]);
        }
      }
      const live = (await storeTime(suite, store)) + 60_000;
      if (claims) ok(claimStatus(await store.claim(id, live, 'fp')).startsWith('first'), 'the id is still free: a live claim is first');
      else ok((await store.consume(id, live)) === true, 'the id is still free: a live consume is true');
      ok((await store.consume(id, live)) === false, 'and then held');
      if (suite.clock) {
        // One millisecond ahead of the store's clock is live (a store judging by another clock would refuse or drop it).
        const soon = uniqueId('soon');
        ok((await store.consume(soon, suite.clock.now() + 1)) === true, 'an expiry 1 ms after the store clock is accepted');
        ok((await store.consume(soon, suite.clock.now() + 60_000)) === false, 'and held until it');
      }
    });
  });
}

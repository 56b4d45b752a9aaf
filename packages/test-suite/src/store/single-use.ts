import { MrtrError } from '@mrtr/core';
import { fail, ok, rejectsMrtr, refusesUnknownOption } from '../assert.js';
import { type StoreSuite, sleep, uniqueId, unlessExpired } from './context.js';
import type { StoreFactory } from './options.js';

/** Single use: one true per id, expiry, namespaces, a shared ledger, misuse, bursts, close, a lost reply. */
export function singleUseGroup(s: StoreSuite): void {
  for (const register of [
    refusesAnUnknownOptionWithA,
    consumeIsTrueTheFirstTime,
    acceptsLongAndUnicodeIdsAs,
    parallelConsumesOfOneIdGive,
    anIdStaysConsumedUntilIts,
    namespacesDoNotCollide,
    twoInstancesOnOneNamespaceShare,
    rejectsInvalidArgumentsWithTypeErrorRangeError,
    aBurstOfDistinctAndRepeated,
    closeIsIdempotentAndAClosed,
    aConsumeWhoseReplyIsLost,
  ])
    register(s);
}

function refusesAnUnknownOptionWithA(s: StoreSuite): void {
  const { factory } = s;
  s.test('refuses an unknown option with a TypeError naming it', async () => {
    const misspelt = { namespace: uniqueId('strict'), maxOutcomeByte: 1024 } as Parameters<StoreFactory>[0];
    await refusesUnknownOption(
      () => factory(misspelt),
      'maxOutcomeByte',
      (store) => store.close(),
    );
  });
}

function consumeIsTrueTheFirstTime(s: StoreSuite): void {
  const { now, withStore } = s;
  s.test('consume is true the first time and false every later time', async () => {
    await withStore(async (store) => {
      const id = uniqueId('first');
      const exp = now() + 60_000;
      ok((await store.consume(id, exp)) === true, 'the first consume must resolve true');
      for (let i = 0; i < 3; i++) ok((await store.consume(id, exp)) === false, 'a later consume must resolve false');
      ok((await store.consume(`${id}x`, exp)) === true, 'another id is independent');
    });
  });
}

function acceptsLongAndUnicodeIdsAs(s: StoreSuite): void {
  const { now, withStore } = s;
  s.test('accepts long and unicode ids as distinct keys', async () => {
    await withStore(async (store) => {
      const exp = now() + 60_000;
      const long = `${uniqueId('long')}:${'a'.repeat(300)}`;
      ok((await store.consume(long, exp)) === true, 'a long id must be accepted');
      ok((await store.consume(long.slice(0, -1), exp)) === true, 'a prefix of an id is a different id');
      const unicode = `${uniqueId('u')}:ünï:😀`;
      ok((await store.consume(unicode, exp)) === true, 'a unicode id must be accepted');
      ok((await store.consume(unicode, exp)) === false, 'a unicode id must be single-use');
    });
  });
}

function parallelConsumesOfOneIdGive(s: StoreSuite): void {
  const { now, withStore, parallel } = s;
  s.test(`${parallel} parallel consumes of one id give exactly one true`, async () => {
    await withStore(async (store) => {
      for (let round = 0; round < 3; round++) {
        const id = uniqueId('race');
        const exp = now() + 60_000;
        const results = await Promise.all(Array.from({ length: parallel }, () => store.consume(id, exp)));
        const trues = results.filter((r) => r === true).length;
        ok(trues === 1, `expected exactly one true, got ${trues}`);
        ok(
          results.every((r) => r === true || r === false),
          'every consume must resolve a boolean',
        );
      }
    });
  });
}

function anIdStaysConsumedUntilIts(s: StoreSuite): void {
  const { clock, now, withStore, ttlMs } = s;
  s.test('an id stays consumed until its expiresAtMs and is consumable again after it', async () => {
    await withStore(async (store) => {
      if (clock) {
        const id = uniqueId('exp');
        const ttl = 60_000;
        const exp = now() + ttl;
        ok((await store.consume(id, exp)) === true, 'first consume must be true');
        await clock.advance(ttl - 1);
        ok(now() < exp, 'test clock must still be before expiry');
        ok((await store.consume(id, exp)) === false, 'an id must not expire before expiresAtMs');
        // The guard accepts a state up to and including its expiry, so the id is live at exactly expiresAtMs (probed
        // with a later expiry: a store with a clock refuses a write whose own expiry has come).
        await clock.advance(1);
        ok(now() === exp, 'test clock must be at expiry');
        ok((await store.consume(id, exp + ttl)) === false, 'an id must still be live at exactly expiresAtMs');
        await clock.advance(1);
        ok(now() > exp, 'test clock must be past expiry');
        ok((await store.consume(id, now() + ttl)) === true, 'an expired id must be consumable again');
        ok((await store.consume(id, now() + ttl)) === false, 'and single-use again');
        return;
      }
      // Real time (a backend with its own clock). Nothing is asserted about a moment the machine may
      // have overslept: "still consumed" is checked only for a consume that finished before
      // expiresAtMs; if a loaded machine finished it later, the round is repeated with twice the TTL.
      let observedLive = false;
      for (let round = 0, ttl = ttlMs; round < 5 && !observedLive; round++, ttl *= 2) {
        const id = uniqueId('exp');
        const exp = Date.now() + ttl;
        const first = await unlessExpired(store.consume(id, exp));
        if (first === 'expired') continue; // a store with a clock found it late: the machine overslept
        ok(first === true, 'first consume must be true');
        await sleep(Math.floor(ttl / 2));
        const again = await store.consume(id, exp + ttl);
        if (Date.now() < exp) {
          ok(again === false, 'an id must not expire before expiresAtMs');
          observedLive = true;
        }
        // Wait (as long as it takes) until the id has expired; an expired id is consumable again.
        while (Date.now() <= exp) await sleep(exp - Date.now() + 1);
        await sleep(Math.min(250, ttl));
        if (again === true) continue; // it expired before the check; that consume already took it again
        ok((await store.consume(id, Date.now() + 60_000)) === true, 'an expired id must be consumable again');
        ok((await store.consume(id, Date.now() + 60_000)) === false, 'and single-use again');
      }
      ok(observedLive, 'the machine never finished a consume within the TTL (5 rounds, TTL doubled each time)');
    });
  });
}

function namespacesDoNotCollide(s: StoreSuite): void {
  const { now, withTwo } = s;
  s.test('namespaces do not collide', async () => {
    const id = uniqueId('ns-shared-id');
    const exp = now() + 60_000;
    await withTwo(
      async (a, b) => {
        ok((await a.consume(id, exp)) === true, 'namespace A: first consume true');
        ok((await b.consume(id, exp)) === true, 'namespace B: the same id is independent');
        ok((await a.consume(id, exp)) === false, 'namespace A: second consume false');
      },
      [uniqueId('nsA'), uniqueId('nsB')],
    );
  });
}

function twoInstancesOnOneNamespaceShare(s: StoreSuite): void {
  const { options, now, withTwo } = s;
  if (options.sharedBackend !== false) {
    s.test('two instances on one namespace share the ledger', async () => {
      await withTwo(async (a, b) => {
        const id = uniqueId('fleet');
        const exp = now() + 60_000;
        ok((await a.consume(id, exp)) === true, 'instance A consumes first');
        ok((await b.consume(id, exp)) === false, 'instance B must see the id as used');
      });
    });
  }
}

function rejectsInvalidArgumentsWithTypeErrorRangeError(s: StoreSuite): void {
  const { now, withStore } = s;
  s.test('rejects invalid arguments with TypeError/RangeError, never true', async () => {
    await withStore(async (store) => {
      const bad: [unknown, unknown][] = [
        ['', now() + 1000],
        [42, now() + 1000],
        [undefined, now() + 1000],
        [uniqueId('bad'), Number.NaN],
        [uniqueId('bad'), Number.POSITIVE_INFINITY],
        [uniqueId('bad'), '123'],
      ];
      for (const [id, exp] of bad) {
        let outcome: unknown;
        try {
          outcome = await store.consume(id as string, exp as number);
        } catch (error) {
          ok(error instanceof TypeError || error instanceof RangeError, `misuse must throw TypeError/RangeError (got ${String(error)})`);
          continue;
        }
        fail(`consume(${String(id)}, ${String(exp)}) must throw, resolved ${String(outcome)}`);
      }
    });
  });
}

function aBurstOfDistinctAndRepeated(s: StoreSuite): void {
  const { now, withStore } = s;
  s.test('a burst of distinct and repeated ids in one tick: each consume gets its own answer', async () => {
    await withStore(async (store) => {
      const exp = now() + 60_000;
      const [a, b, c, used] = ['a', 'b', 'c', 'used'].map((tag) => uniqueId(`burst-${tag}`)) as [string, string, string, string];
      ok((await store.consume(used, exp)) === true, 'the first consume of an id must be true');
      // Started together, so a store that batches (group commit, pipelines) gets them in one batch.
      const order = [a, b, a, used, c, a, b];
      const results = await Promise.all(order.map((id) => store.consume(id, exp)));
      ok(
        results.every((r) => r === true || r === false),
        'every consume must resolve a boolean',
      );
      for (const id of [a, b, c]) {
        const trues = results.filter((r, i) => r === true && order[i] === id).length;
        ok(trues === 1, `an id repeated in one burst must be true exactly once, got ${trues}`);
      }
      ok(results[3] === false, 'an id consumed before the burst must be false in it');
      const again = await Promise.all([a, b, c].map((id) => store.consume(id, exp)));
      ok(
        again.every((r) => r === false),
        'every id of the burst must be consumed afterwards',
      );
    });
  });
}

function closeIsIdempotentAndAClosed(s: StoreSuite): void {
  const { factory, now } = s;
  s.test('close() is idempotent and a closed store never accepts', async () => {
    const store = await factory({ namespace: uniqueId('close') });
    ok((await store.consume(uniqueId('c'), now() + 60_000)) === true, 'an open store consumes');
    await store.close();
    await store.close();
    const error = await rejectsMrtr(() => store.consume(uniqueId('after-close'), now() + 60_000), 'consume after close');
    ok(MrtrError.is(error), 'consume after close must reject with a MrtrError');
  });
}

function aConsumeWhoseReplyIsLost(s: StoreSuite): void {
  const { factory, options, now } = s;
  if (options.lostReply) {
    const lostReply = options.lostReply;
    if (options.sharedBackend === false) throw new TypeError('storeCompliance: lostReply needs a shared backend');
    s.test('a consume whose reply is lost is resolved correctly', async () => {
      const namespace = uniqueId('lost');
      const lossy = await lostReply({ namespace });
      const peer = await factory({ namespace });
      const exp = now() + 60_000;
      try {
        // Warm up (connection open, schema ready), so the next request is the consume itself.
        ok((await lossy.store.consume(uniqueId('warm'), exp)) === true, 'warm-up consume must be true');
        ok((await peer.consume(uniqueId('warm'), exp)) === true, 'warm-up consume of the peer must be true');

        const mine = uniqueId('late-mine');
        lossy.loseNextReply('late');
        ok((await lossy.store.consume(mine, exp)) === true, "the write was this call's: a late reply must still give true");
        lossy.restore();
        ok((await peer.consume(mine, exp)) === false, 'and the id is consumed for everyone');
        ok((await lossy.store.consume(mine, exp)) === false, 'a retry of the same id must be false');

        const theirs = uniqueId('late-theirs');
        ok((await peer.consume(theirs, exp)) === true, 'the peer consumes first');
        lossy.loseNextReply('late');
        ok((await lossy.store.consume(theirs, exp)) === false, "someone else's write: a late reply must give false");
        lossy.restore();

        const unknown = uniqueId('lost');
        lossy.loseNextReply('lost');
        await rejectsMrtr(() => lossy.store.consume(unknown, exp), 'a consume whose reply and check are both lost', [
          'ERR_STORE_UNAVAILABLE',
        ]);
        lossy.restore();
        ok((await peer.consume(unknown, exp)) === false, 'the write landed: the state must stay single-use');
        // The lossy store recovers and answers false for that id too (bounded: 300 tries, 30 s).
        const deadline = Date.now() + 30_000;
        let outcome: boolean | string = 'none';
        for (let i = 0; i < 300 && Date.now() < deadline; i++) {
          try {
            outcome = await lossy.store.consume(unknown, exp);
            break;
          } catch (error) {
            ok(MrtrError.is(error) && error.code === 'ERR_STORE_UNAVAILABLE', `while recovering: ${String(error)}`);
            await sleep(50);
          }
        }
        ok(outcome === false, `after recovery a retry of the same id must be false (got ${String(outcome)})`);
      } finally {
        lossy.restore();
        await peer.close();
        await lossy.close();
      }
    });
  }
}

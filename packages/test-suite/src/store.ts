import {
  type ClaimResult,
  createStateGuard,
  type JsonValue,
  type KeyFingerprint,
  KeyRing,
  MrtrError,
  type MrtrEvent,
  type OutcomeStoreLimits,
  type ReplayStore,
} from '@mrtr/core';
import { storeCapabilities } from '@mrtr/core/authoring';

const NO_CAPABILITIES = { shared: false, keyExchange: false, clock: false, leases: false, epoch: false } as const;
import { fail, ok, rejectsMrtr, refusesUnknownOption } from './assert.js';
import { plainCodec } from './claims.js';
import { clockGroup } from './store/clock.js';
import { type StoreSuite, sleep, uniqueId } from './store/context.js';
import { epochGroup } from './store/epoch.js';
import { leaseGroup } from './store/leases.js';
import type { TestFn } from './types.js';

export interface StoreComplianceOptions {
  /**
   * A fake clock the store was built on. Give one whenever the store judges expiry by an injectable
   * clock. Without it (a backend that expires ids by its own clock, like Redis) the expiry test sleeps in
   * real time for about `ttlMs` twice, and repeats with a doubled TTL when a loaded machine overslept.
   */
  clock?: { now(): number; advance(ms: number): void | Promise<void> };
  /** Real-time TTL for the expiry tests when there is no fake clock. @default 1000 */
  ttlMs?: number;
  /** A store pointed at a backend that does not answer; its consume must reject with ERR_STORE_UNAVAILABLE. */
  unreachable?: () => ReplayStore | Promise<ReplayStore>;
  /** Concurrent consumers of one id; values below 64 are raised to 64. @default 64 */
  parallel?: number;
  /** Stores made by two factory calls with one namespace share one ledger (false for in-process stores). @default true */
  sharedBackend?: boolean;
  /** Label used in test names. @default "store" */
  name?: string;
  /** Per-test timeout in ms. @default 30_000 */
  timeoutMs?: number;
  /**
   * A store whose link to its backend can lose the reply to one consume (for stores that talk to a
   * server, or wrap a driver, where a write can succeed while its answer never arrives: a timeout on a
   * slow event loop, a connection cut in flight). With it the suite checks that such a consume is
   * resolved correctly: the write was this call's → `true`; someone else's → `false`; unknown →
   * `ERR_STORE_UNAVAILABLE`, and a retry of the same id afterwards is `false` (the write landed).
   * `startReplyLosingProxy` from this package does it for Redis and PostgreSQL over TCP.
   *
   * Needs `sharedBackend` (a store from `factory` with the same namespace must see the lossy store's
   * ids). A store whose consume cannot lose its answer — an in-process map like the memory store,
   * where the write and its result are one synchronous step — leaves this out, and the test is not
   * registered for it.
   */
  lostReply?: (options: { namespace: string }) => LossyStore | Promise<LossyStore>;
  /**
   * Whether the store records outcomes (`claim` and `record`, with the bounds of `OutcomeStoreLimits`). Declared:
   * `true` runs the outcome tests and fails them when the store lacks `claim`/`record`; `false` skips them (said
   * once, with the reason) and fails if the store has them after all. Left out, it is read off the store, and the
   * first outcome test says which it found.
   */
  outcomes?: boolean;
  /**
   * Whether the store keeps key fingerprints (`keyFingerprints`, the fleet check's exchange). `true` runs its tests
   * and fails them when the store lacks it; `false` skips them and fails if the store has it. Left out, it is read off
   * the store.
   */
  keyFingerprints?: boolean;
  /**
   * What the store must declare of the capabilities the suite has groups for (`clock`, `leases`, `epoch`; see
   * `StoreCapabilities`). `true`: the group runs and fails on a store that does not declare it; `false`: the group is
   * skipped (one line says so) and fails if the store declares it after all. Left out, each is read off the store
   * (`storeCapabilities`): its group runs when declared, else passes at once after one line says why.
   */
  declares?: { clock?: boolean; leases?: boolean; epoch?: boolean };
  /**
   * The lease (ms) of the tests that wait for one to lapse, on a store without the suite's fake `clock` (a lease on the
   * server's clock: Redis, PostgreSQL). They poll for the lapse (bounded: 30 s), so it needs no margin for a loaded
   * machine; shorter is faster. @default 250
   */
  leaseMs?: number;
  /**
   * Makes the store's ledger in `namespace` be lost, as a restart without persistence or a flush would (Redis: FLUSHDB
   * on a private server; SQL: TRUNCATE). The epoch group then checks that states minted before the loss are refused,
   * by the store that saw the loss and by a new one. A store of this process (`sharedBackend: false`) needs none: a
   * new store is a new ledger. A shared store without it skips that test (one line says so).
   */
  loseLedger?: (namespace: string) => Promise<void>;
}

/** See {@link StoreComplianceOptions.lostReply}. */
export interface LossyStore {
  readonly store: ReplayStore;
  /**
   * The next consume's write reaches the backend and runs, but its reply is lost: `'late'` — held back
   * until the store asks the backend anything else, then delivered; `'lost'` — discarded, and so is
   * every later answer until `restore()`.
   */
  loseNextReply(mode: 'late' | 'lost'): void;
  /** Back to normal (after `'lost'` the store may need a moment to reconnect). */
  restore(): void;
  /** Closes the store and whatever `lostReply` set up for it. */
  close(): Promise<void>;
}

/**
 * Makes a store on `namespace`. The outcome tests also pass the outcome bounds ({@link OutcomeStoreLimits}) to a store
 * that records outcomes, which must take them (other tests leave them out, for the store's defaults). Pass what it is given
 * through to the store's factory: one test gives a misspelt option, which the store's factory must refuse.
 */
export type StoreFactory = (options: { namespace: string } & OutcomeStoreLimits) => ReplayStore | Promise<ReplayStore>;

/** The clock skew the suite's state guards tolerate (their `clockSkewMs`). */
const GUARD_SKEW_MS = 1000;

/**
 * A write in real time on a store with a clock of its own may come after its expiry on a loaded machine, and is then
 * refused (`ERR_STATE_EXPIRED`): `'expired'`, for the test to repeat the round.
 */
const unlessExpired = <T>(write: Promise<T>): Promise<T | 'expired'> =>
  write.catch((error: unknown) => {
    if (MrtrError.is(error) && error.code === 'ERR_STATE_EXPIRED') return 'expired' as const;
    throw error;
  });

/** The single-use contract of a `ReplayStore`: `storeCompliance(it, ({ namespace }) => createMyStore({ namespace }))`. */
export function storeCompliance(it: TestFn, factory: StoreFactory, options: StoreComplianceOptions = {}): void {
  const label = options.name ?? 'store';
  const timeout = options.timeoutMs ?? 30_000;
  const parallel = Math.max(64, options.parallel ?? 64);
  const ttlMs = options.ttlMs ?? 1000;
  const clock = options.clock;
  const now = () => (clock ? clock.now() : Date.now());
  const test = (name: string, fn: () => Promise<void>): void => it(`${label} compliance: ${name}`, fn, timeout);

  // The outcome bounds go only to a store that records outcomes (another refuses them as unknown options): declared, or
  // read off a store built on the defaults, once.
  let records: Promise<boolean> | undefined;
  const recordsOutcomes = (): Promise<boolean> =>
    (records ??=
      options.outcomes !== undefined
        ? Promise.resolve(options.outcomes)
        : (async () => {
            const store = await factory({ namespace: uniqueId('ns') });
            try {
              return storeCapabilities(store).outcomes !== undefined;
            } finally {
              await store.close();
            }
          })());
  const withStore = async (
    fn: (store: ReplayStore, namespace: string) => Promise<void>,
    limits: OutcomeStoreLimits = {},
  ): Promise<void> => {
    const namespace = uniqueId('ns');
    const store = await factory({ namespace, ...(Object.keys(limits).length > 0 && (await recordsOutcomes()) ? limits : {}) });
    try {
      await fn(store, namespace);
    } finally {
      await store.close();
    }
  };

  /** Two instances, on the given namespaces (one shared namespace by default), closed afterwards. */
  const withTwo = async (
    fn: (a: ReplayStore, b: ReplayStore) => Promise<void>,
    namespaces: [string, string] = [uniqueId('shared'), ''],
  ): Promise<void> => {
    const a = await factory({ namespace: namespaces[0] });
    const b = await factory({ namespace: namespaces[1] === '' ? namespaces[0] : namespaces[1] });
    try {
      await fn(a, b);
    } finally {
      await a.close();
      await b.close();
    }
  };

  const suite: StoreSuite = { label, factory, options, clock, now, test, withStore };
  test('refuses an unknown option with a TypeError naming it', async () => {
    const misspelt = { namespace: uniqueId('strict'), maxOutcomeByte: 1024 } as Parameters<StoreFactory>[0];
    await refusesUnknownOption(
      () => factory(misspelt),
      'maxOutcomeByte',
      (store) => store.close(),
    );
  });
  test('consume is true the first time and false every later time', async () => {
    await withStore(async (store) => {
      const id = uniqueId('first');
      const exp = now() + 60_000;
      ok((await store.consume(id, exp)) === true, 'the first consume must resolve true');
      for (let i = 0; i < 3; i++) ok((await store.consume(id, exp)) === false, 'a later consume must resolve false');
      ok((await store.consume(`${id}x`, exp)) === true, 'another id is independent');
    });
  });

  test('accepts long and unicode ids as distinct keys', async () => {
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

  test(`${parallel} parallel consumes of one id give exactly one true`, async () => {
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

  test('an id stays consumed until its expiresAtMs and is consumable again after it', async () => {
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

  test('namespaces do not collide', async () => {
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

  if (options.sharedBackend !== false) {
    test('two instances on one namespace share the ledger', async () => {
      await withTwo(async (a, b) => {
        const id = uniqueId('fleet');
        const exp = now() + 60_000;
        ok((await a.consume(id, exp)) === true, 'instance A consumes first');
        ok((await b.consume(id, exp)) === false, 'instance B must see the id as used');
      });
    });
  }

  test('rejects invalid arguments with TypeError/RangeError, never true', async () => {
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

  test('a burst of distinct and repeated ids in one tick: each consume gets its own answer', async () => {
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

  test('close() is idempotent and a closed store never accepts', async () => {
    const store = await factory({ namespace: uniqueId('close') });
    ok((await store.consume(uniqueId('c'), now() + 60_000)) === true, 'an open store consumes');
    await store.close();
    await store.close();
    const error = await rejectsMrtr(() => store.consume(uniqueId('after-close'), now() + 60_000), 'consume after close');
    ok(MrtrError.is(error), 'consume after close must reject with a MrtrError');
  });

  if (options.lostReply) {
    const lostReply = options.lostReply;
    if (options.sharedBackend === false) throw new TypeError('storeCompliance: lostReply needs a shared backend');
    test('a consume whose reply is lost is resolved correctly', async () => {
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

  // Outcome recording (`claim` + `record`): registered for every store, which must implement both or neither.
  const declared = options.outcomes;
  test('declares its capabilities, and has the methods of each (outcomes: claim and record), as the test expects', async () => {
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
  if (declared === false)
    console.info(`[${label}] outcome tests skipped: the store is declared with outcomes: false (every retry is a replay)`);

  /** An outcome test: registered unless the store is declared without outcomes. */
  const outcomeTest: typeof test = declared === false ? () => {} : test;
  type Recording = Required<Pick<ReplayStore, 'claim' | 'record'>> & ReplayStore;
  const withOutcomes = async (fn: (store: Recording, namespace: string) => Promise<void>, limits?: OutcomeStoreLimits): Promise<void> => {
    await withStore(async (store, namespace) => {
      if (storeCapabilities(store).outcomes === undefined) {
        if (declared === true) fail('the test expects outcomes: true but the store declares none');
        return;
      }
      await fn(store as Recording, namespace);
    }, limits);
  };
  const status = (r: ClaimResult): string => (r.status === 'recorded' ? `recorded:${r.outcome}` : r.status);
  // A sealed outcome is an ASCII token up to a codec's cap (16 KiB by default, up to ~1 MiB); 64 KiB here.
  const bigOutcome = (tag: string) => `${tag}.${'x'.repeat(64 * 1024 - tag.length - 1)}`;

  outcomeTest('records of one claim sent together (one batch): only the fingerprint that claimed is stored', async () => {
    await withOutcomes(async (store) => {
      const id = uniqueId('together');
      ok(status(await store.claim(id, now() + 60_000, 'fp-a')) === 'first', 'the first claim must be first');
      const [theirs, mine] = await Promise.all([store.record(id, 'fp-b', 'theirs'), store.record(id, 'fp-a', 'mine')]);
      ok(theirs === false, 'a record with another fingerprint must be refused, also beside the right one');
      ok(mine === true, 'the record by the fingerprint that claimed must be stored');
      const again = await store.claim(id, now() + 60_000, 'fp-a');
      ok(again.status === 'recorded' && again.outcome === 'mine', "the stored outcome is the claimant's");
    });
  });

  outcomeTest('claim: first, then pending for the same fingerprint, recorded after record, replayed for another', async () => {
    await withOutcomes(
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

  outcomeTest('record keeps no outcome longer than maxOutcomeBytes, and says how large it keeps', async () => {
    await withOutcomes(
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

  outcomeTest('the outcomes held never pass outcomeBudgetBytes; past it a round is done, not kept', async () => {
    const size = 10_000;
    const budget = 4 * size + size / 2;
    await withOutcomes(
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

  outcomeTest('a state is no oracle: the third claim with another fingerprint drops the outcome, recorded or pending', async () => {
    await withOutcomes(async (store) => {
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

  outcomeTest('claim and consume share one ledger; an outcome recorded as not kept makes retries replays', async () => {
    await withOutcomes(async (store) => {
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

  outcomeTest(`${parallel} parallel claims of one id: one first; identical ones pending, then all the same outcome`, async () => {
    await withOutcomes(async (store) => {
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

  outcomeTest(`${parallel} parallel claims of one id with other fingerprints: all replayed, and the outcome is gone`, async () => {
    await withOutcomes(async (store) => {
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

  outcomeTest('a claimed id with its outcome expires with the id and is claimable again', async () => {
    await withOutcomes(async (store) => {
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

  if (options.sharedBackend !== false) {
    outcomeTest('two instances on one namespace share claims and outcomes', async () => {
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

  // The fleet check's exchange (`shared`, `keyFingerprints`): see ReplayStore in @mrtr/core and docs/keys.md.
  const fingerprintsDeclared = options.keyFingerprints;
  test('declares shared, and keeps key fingerprints only as a shared store, as the test expects', async () => {
    await withStore(async (store) => {
      const { shared, keyExchange } = storeCapabilities(store);
      if (options.sharedBackend === false) ok(!shared, 'a store of this process (sharedBackend: false) must not declare shared');
      else ok(shared, 'a store whose ledger other instances share (sharedBackend) must declare shared');
      if (keyExchange) ok(shared, 'a store that keeps key fingerprints must declare shared: true');
      if (fingerprintsDeclared !== undefined) {
        ok(
          keyExchange === fingerprintsDeclared,
          `the test expects keyFingerprints: ${fingerprintsDeclared}, but the store's capabilities ${keyExchange ? 'declare' : 'lack'} keyExchange`,
        );
      }
    });
  });
  const fingerprintTest: typeof test = fingerprintsDeclared === false ? () => {} : test;
  type Fingerprinting = Required<Pick<ReplayStore, 'keyFingerprints'>> & ReplayStore;
  const fingerprinting = (store: ReplayStore): store is Fingerprinting => {
    if (storeCapabilities(store).keyExchange) return true;
    if (fingerprintsDeclared === true) fail('the test expects keyFingerprints: true but the store declares no keyExchange');
    return false;
  };
  /** The answer as `kid=fingerprint@expiresAtMs` sorted by kid (expiry relative to `base`). */
  const shown = (records: readonly KeyFingerprint[], base: number): string =>
    records
      .map((r) => `${r.kid}=${r.fingerprint}@${r.expiresAtMs - base}`)
      .sort()
      .join(',');

  fingerprintTest('keyFingerprints: inserts, the first writer wins, a matching fingerprint extends, across instances', async () => {
    const namespace = uniqueId('fp');
    const a = await factory({ namespace });
    const b = options.sharedBackend === false ? a : await factory({ namespace });
    try {
      if (!fingerprinting(a) || !fingerprinting(b)) return;
      const t = now();
      const exp = t + 60_000;
      ok(
        shown(await a.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp }]), t) === 'k1=fpA@60000',
        'a new kid is stored',
      );
      ok(
        shown(await b.keyFingerprints([{ kid: 'k1', fingerprint: 'fpB', expiresAtMs: exp + 5_000 }]), t) === 'k1=fpA@60000',
        'another fingerprint under a held kid leaves the first record as it was (first writer wins)',
      );
      ok(
        shown(await b.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp + 1_000 }]), t) === 'k1=fpA@61000',
        'the same fingerprint extends the expiry',
      );
      ok(
        shown(await a.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp }]), t) === 'k1=fpA@61000',
        'an earlier expiry never shortens a record',
      );
      const both = await a.keyFingerprints([
        { kid: 'k2', fingerprint: 'fpC', expiresAtMs: exp },
        { kid: 'k1', fingerprint: 'fpB', expiresAtMs: exp },
      ]);
      ok(shown(both, t) === 'k1=fpA@61000,k2=fpC@60000', `one offer of several records, each by the rules (got ${shown(both, t)})`);
      ok(shown(await b.keyFingerprints([]), t) === 'k1=fpA@61000,k2=fpC@60000', 'an empty offer lists every record');
      const other = await factory({ namespace: uniqueId('fp-other') });
      try {
        if (fingerprinting(other)) ok((await other.keyFingerprints([])).length === 0, 'another namespace holds its own records');
      } finally {
        await other.close();
      }
    } finally {
      await a.close();
      if (b !== a) await b.close();
    }
  });

  fingerprintTest('keyFingerprints: a record is kept until its expiresAtMs, then no longer listed and its kid is free', async () => {
    await withStore(async (store) => {
      if (!fingerprinting(store)) return;
      if (clock) {
        const exp = now() + 60_000;
        await store.keyFingerprints([{ kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp }]);
        await clock.advance(59_999);
        ok(
          shown(await store.keyFingerprints([{ kid: 'k1', fingerprint: 'fpB', expiresAtMs: exp + 9 }]), exp) === 'k1=fpA@0',
          'live 1 ms before its expiry',
        );
        await clock.advance(1);
        ok(now() === exp, 'test clock must be at expiry');
        const at = await store.keyFingerprints([]);
        ok(shown(at, exp) === '', `a record is not listed from its expiresAtMs on (got ${shown(at, exp)})`);
        const after = await store.keyFingerprints([{ kid: 'k1', fingerprint: 'fpB', expiresAtMs: now() + 60_000 }]);
        ok(shown(after, now()) === 'k1=fpB@60000', `an expired kid takes a new fingerprint (got ${shown(after, now())})`);
        await store.keyFingerprints([{ kid: 'k2', fingerprint: 'fpC', expiresAtMs: now() }]);
        ok(shown(await store.keyFingerprints([]), now()) === 'k1=fpB@60000', 'an offer already expired is not stored');
        return;
      }
      // Real time (a backend with its own clock): "still held" is asserted only for an answer that came back before
      // expiresAtMs; if a loaded machine was later, the round is repeated with twice the TTL.
      let observedLive = false;
      for (let round = 0, ttl = ttlMs; round < 5 && !observedLive; round++, ttl *= 2) {
        const kid = `e${round}`;
        const exp = Date.now() + ttl;
        await store.keyFingerprints([{ kid, fingerprint: 'fpA', expiresAtMs: exp }]);
        const again = await store.keyFingerprints([{ kid, fingerprint: 'fpB', expiresAtMs: exp }]);
        if (Date.now() < exp) {
          ok(shown(again, exp) === `${kid}=fpA@0`, `a live record is kept (first writer wins) (got ${shown(again, exp)})`);
          observedLive = true;
        }
        while (Date.now() <= exp) await sleep(exp - Date.now() + 1);
        await sleep(Math.min(250, ttl));
        const later = Date.now() + 60_000;
        const after = await store.keyFingerprints([{ kid, fingerprint: 'fpB', expiresAtMs: later }]);
        ok(
          shown(after, later) === `${kid}=fpB@0`,
          `an expired record is not listed and its kid takes a new one (got ${shown(after, later)})`,
        );
        await store.keyFingerprints([{ kid: `x${round}`, fingerprint: 'fpC', expiresAtMs: Date.now() - 1 }]);
        const listed = shown(await store.keyFingerprints([]), later);
        ok(!listed.includes(`x${round}=`), `an offer already expired is not stored (got ${listed})`);
      }
      ok(observedLive, 'the machine never got an answer within the TTL (5 rounds, TTL doubled each time)');
    });
  });

  fingerprintTest(
    'keyFingerprints: at most 256 records; a new kid past them is refused (ERR_STORE_UNAVAILABLE), none dropped',
    async () => {
      await withStore(async (store) => {
        if (!fingerprinting(store)) return;
        const exp = now() + 60_000;
        const offer = Array.from({ length: 256 }, (_, i) => ({ kid: `k${i}`, fingerprint: `fp${i}`, expiresAtMs: exp }));
        const held = await store.keyFingerprints(offer);
        ok(held.length === 256, `256 distinct kids are all held (got ${held.length})`);
        ok(
          held.every((r) => r.fingerprint === `fp${r.kid.slice(1)}` && r.expiresAtMs === exp),
          'every record is answered as offered',
        );
        await rejectsMrtr(() => store.keyFingerprints([{ kid: 'k256', fingerprint: 'x', expiresAtMs: exp }]), 'a 257th kid', [
          'ERR_STORE_UNAVAILABLE',
        ]);
        const after = await store.keyFingerprints([{ kid: 'k0', fingerprint: 'fp0', expiresAtMs: exp + 1 }]);
        ok(after.length === 256 && !after.some((r) => r.kid === 'k256'), 'the refused kid is not stored and nothing was dropped');
      });
    },
  );

  fingerprintTest('keyFingerprints: rejects a malformed offer with TypeError/RangeError and stores none of it', async () => {
    await withStore(async (store) => {
      if (!fingerprinting(store)) return;
      const exp = now() + 60_000;
      const good = { kid: 'k1', fingerprint: 'fpA', expiresAtMs: exp };
      const cases: [unknown, typeof TypeError | typeof RangeError][] = [
        [undefined, TypeError],
        ['k1', TypeError],
        [[null], TypeError],
        [[good, { ...good, kid: '' }], TypeError],
        [[good, { ...good, kid: 'a b' }], TypeError],
        [[good, { ...good, kid: 'k'.repeat(33) }], TypeError],
        [[good, { ...good, fingerprint: '' }], TypeError],
        [[good, { ...good, fingerprint: 7 }], TypeError],
        [[good, { ...good, expiresAtMs: Number.NaN }], TypeError],
        [[good, { ...good, expiresAtMs: '1' }], TypeError],
        [Array.from({ length: 257 }, (_, i) => ({ ...good, kid: `k${i}` })), RangeError],
      ];
      for (const [offer, kind] of cases) {
        let thrown: unknown;
        try {
          await store.keyFingerprints(offer as never);
        } catch (error) {
          thrown = error;
        }
        ok(
          thrown instanceof kind && thrown.message.startsWith('keyFingerprints'),
          `expected a labelled ${kind.name} for ${JSON.stringify(offer)?.slice(0, 80)}`,
        );
      }
      ok((await store.keyFingerprints([])).length === 0, 'a refused offer stores nothing');
    });
  });

  fingerprintTest('under two state guards, checkKeys passes for the same key and names the kid of another secret', async () => {
    if (options.sharedBackend === false) return;
    await withTwo(async (a, b) => {
      if (!fingerprinting(a)) return;
      const k1 = { kid: 'k1', secret: new Uint8Array(32).fill(1) };
      const guardOn = (store: ReplayStore, keys: KeyRing) =>
        createStateGuard({ keys, codec: plainCodec, store, audience: 'store-fleet', now, ttlMs: 60_000, clockSkewMs: 5_000 });
      const first = await guardOn(a, new KeyRing([k1])).checkKeys();
      ok(
        first.checked === true && JSON.stringify(first.fleet) === '["k1"]',
        `the first replica publishes k1 (got ${JSON.stringify(first)})`,
      );
      const same = await guardOn(b, new KeyRing([k1])).checkKeys();
      ok(same.checked === true && JSON.stringify(same.fleet) === '["k1"]', 'a replica with the same key passes');
      const error = await rejectsMrtr(
        () => guardOn(b, new KeyRing([{ kid: 'k1', secret: new Uint8Array(32).fill(2) }])).checkKeys(),
        'a replica with another secret under k1',
        ['ERR_KEY_MISMATCH'],
      );
      const { kid, reason } = error as MrtrError & { kid?: string; reason?: string };
      ok(kid === 'k1' && reason === 'secret', `the mismatch names the kid and its reason (kid ${kid}, reason ${reason})`);
    });
  });

  fingerprintTest(
    'under two state guards, a generated (per-process) key of a second ring is refused, naming the namespace and until when',
    async () => {
      if (options.sharedBackend === false) return;
      const namespace = uniqueId('fp-restart');
      await withTwo(
        async (a, b) => {
          if (!fingerprinting(a)) return;
          // A developer restarting with a new generated key: the first run's fingerprint is still held.
          const guardOn = (store: ReplayStore) =>
            createStateGuard({
              keys: KeyRing.generate(),
              allowEphemeralKeys: true,
              codec: plainCodec,
              store,
              audience: 'store-fleet',
              now,
              ttlMs: 60_000,
              clockSkewMs: 5_000,
            });
          const first = await guardOn(a).checkKeys();
          ok(
            first.checked === true && JSON.stringify(first.fleet) === '["k1"]',
            `the first run publishes k1 (got ${JSON.stringify(first)})`,
          );
          const before = now();
          const error = (await rejectsMrtr(() => guardOn(b).checkKeys(), 'a second run with a new generated k1', [
            'ERR_KEY_MISMATCH',
          ])) as MrtrError & { kid?: string; reason?: string; namespace?: string; expiresAtMs?: number };
          const { kid, reason, expiresAtMs } = error;
          ok(kid === 'k1' && reason === 'secret', `the mismatch names the kid and its reason (kid ${kid}, reason ${reason})`);
          ok(
            typeof expiresAtMs === 'number' && expiresAtMs > before && expiresAtMs <= before + 70_000 + 60_000,
            `the error says until when the first run's record is held (got ${expiresAtMs})`,
          );
          const until = new Date(expiresAtMs as number).toISOString();
          if (typeof a.namespace === 'string') {
            ok(error.namespace === namespace, `the error names the namespace (got ${error.namespace})`);
            ok(error.message.includes(`namespace ${JSON.stringify(namespace)}`), `the message names the namespace: ${error.message}`);
          }
          ok(error.message.includes(`until ${until}`), `the message says until when: ${error.message}`);
          ok(error.message.includes('another namespace'), `the message says how to proceed: ${error.message}`);
        },
        [namespace, ''],
      );
    },
  );

  /** A guard over `store` with a plain (unprotected) codec, recording its events: the store's part is what is tested. */
  const observed = (store: ReplayStore, keys: KeyRing = KeyRing.generate(), clock: () => number = now) => {
    const events: MrtrEvent[] = [];
    const guard = createStateGuard({
      keys,
      allowEphemeralKeys: true, // one test process: a generated key is fine with a shared store
      codec: plainCodec,
      store,
      audience: 'store-events',
      now: clock,
      clockSkewMs: GUARD_SKEW_MS,
      // The store's clock, measured by the guard (store.clock), is not what these tests look at.
      onEvent: (e) => void (e.type === 'store.clock' || events.push(e)),
    });
    const request = { method: 'tools/call', target: 'tool', arguments: {}, principal: 'p' };
    return { guard, events, request };
  };
  const codeOf = async (promise: Promise<unknown>): Promise<string | undefined> =>
    promise.then(
      () => undefined,
      (error: unknown) => (MrtrError.is(error) ? error.code : 'not an MrtrError'),
    );

  test('under a state guard, a replay is reported once as state.rejected ERR_STATE_REPLAYED, with the store timed', async () => {
    await withStore(async (store) => {
      const { guard, events, request } = observed(store);
      const token = await guard.mint(null, request);
      await guard.open(token, request);
      ok((await codeOf(guard.open(token, request))) === 'ERR_STATE_REPLAYED', 'the replay must be refused with ERR_STATE_REPLAYED');
      const types = events.map((e) => (e.type === 'state.rejected' ? `${e.type}:${e.code}` : e.type));
      ok(
        JSON.stringify(types) === JSON.stringify(['flow.started', 'state.minted', 'state.opened', 'state.rejected:ERR_STATE_REPLAYED']),
        `unexpected events ${JSON.stringify(types)}`,
      );
      const opened = events[2];
      ok(opened?.type === 'state.opened' && typeof opened.storeMs === 'number' && opened.storeMs >= 0, 'state.opened must carry storeMs');
    });
  });

  outcomeTest(
    'under two state guards, 50 identical retries run the round once and all get its outcome; other answers are replays',
    async () => {
      const namespace = uniqueId('admit');
      const storeA = await factory({ namespace });
      const storeB = options.sharedBackend === false ? storeA : await factory({ namespace });
      try {
        if (storeCapabilities(storeA).outcomes === undefined) return;
        const keys = KeyRing.generate();
        const make = (store: ReplayStore) =>
          createStateGuard({
            keys,
            allowEphemeralKeys: true,
            codec: plainCodec,
            store,
            now,
            clockSkewMs: GUARD_SKEW_MS,
            audience: 'store-admit',
            retryWaitMs: 20_000,
            maxWaitingRetries: { perPrincipal: 64 },
          });
        const guards = [make(storeA), make(storeB)];
        const request = { method: 'tools/call', target: 'delete', arguments: { paths: ['a'] }, principal: 'p' };
        const token = await guards[0]!.mint(null, request);
        const answers: JsonValue = { confirm: { action: 'accept', content: { ok: true } } };
        let executions = 0;
        const attempt = async (i: number, a: JsonValue): Promise<JsonValue> => {
          const admission = await guards[i % 2]!.admit(token, request, a);
          if (admission.replay) return admission.outcome;
          executions++;
          // The round's effect, after the claim: identical retries arrive while it is still running.
          await sleep(20);
          const outcome: JsonValue = { content: [{ type: 'text', text: `deleted once (${executions})` }] };
          await admission.record(outcome);
          return outcome;
        };
        const identical = await Promise.all(Array.from({ length: 50 }, (_, i) => attempt(i, answers)));
        ok(executions === 1, `the round must run once, ran ${executions} times`);
        const first = JSON.stringify(identical[0]);
        ok(
          identical.every((r) => JSON.stringify(r) === first),
          'all 50 identical retries must get the same outcome',
        );

        const other = await factory({ namespace: uniqueId('admit-other') });
        try {
          const guard = make(other);
          const fresh = await guard.mint(null, request);
          executions = 0;
          const codes = await Promise.all(
            Array.from({ length: 50 }, (_, i) =>
              guard.admit(fresh, request, { confirm: { action: 'accept', content: { n: i } } }).then(
                async (admission) => {
                  if (admission.replay) return 'replay';
                  executions++;
                  await admission.record({ n: i });
                  return 'ran';
                },
                (error: unknown) => (MrtrError.is(error) ? error.code : String(error)),
              ),
            ),
          );
          ok(executions === 1, `with 50 different answers the round must run once, ran ${executions}`);
          ok(codes.filter((c) => c === 'ERR_STATE_REPLAYED').length === 49, `49 must be replays, got ${JSON.stringify(codes)}`);
          const otherPrincipal = await codeOf(
            guard.admit(fresh, { ...request, principal: 'q' }, { confirm: { action: 'accept', content: { n: 0 } } }),
          );
          ok(otherPrincipal === 'ERR_STATE_PRINCIPAL', `another principal must be refused, got ${String(otherPrincipal)}`);
        } finally {
          await other.close();
        }
      } finally {
        await storeA.close();
        if (storeB !== storeA) await storeB.close();
      }
    },
  );

  if (options.unreachable) {
    const unreachable = options.unreachable;
    test('under a state guard, an unreachable backend is reported as store.error then state.rejected', async () => {
      const store = await unreachable();
      try {
        // The state is minted by a fleet member that still reaches its store (a guard with an epoch asks the store
        // before it mints); the guard under test, cut off from the store, is presented it.
        const keys = KeyRing.generate();
        const reachable: ReplayStore = { capabilities: NO_CAPABILITIES, consume: async () => true, close: async () => {} };
        // The unreachable store is built on no fake clock: these guards run on this process's.
        const request = { method: 'tools/call', target: 'tool', arguments: {}, principal: 'p' };
        const token = await observed(reachable, keys, Date.now).guard.mint(null, request);
        const { guard, events } = observed(store, keys, Date.now);
        ok((await codeOf(guard.open(token, request))) === 'ERR_STORE_UNAVAILABLE', 'an outage must refuse with ERR_STORE_UNAVAILABLE');
        const types = events.map((e) => (e.type === 'state.rejected' || e.type === 'store.error' ? `${e.type}:${e.code}` : e.type));
        ok(
          JSON.stringify(types) === JSON.stringify(['store.error:ERR_STORE_UNAVAILABLE', 'state.rejected:ERR_STORE_UNAVAILABLE']),
          `unexpected events ${JSON.stringify(types)}`,
        );
        if (storeCapabilities(store).epoch) {
          // A guard that cannot learn its store's ledger epoch mints nothing (fail closed), and says so.
          const minted = await codeOf(guard.mint(null, request));
          ok(minted === 'ERR_STORE_UNAVAILABLE', `a mint without the ledger epoch must fail closed (got ${String(minted)})`);
          const last = events.at(-1);
          ok(last?.type === 'state.rejected' && last.operation === 'mint', 'the refused mint is reported as state.rejected (mint)');
        }
      } finally {
        await store.close();
      }
    });
    test('an unreachable backend gives ERR_STORE_UNAVAILABLE, never true', async () => {
      const store = await unreachable();
      try {
        for (let i = 0; i < 3; i++) {
          await rejectsMrtr(() => store.consume(uniqueId('down'), Date.now() + 60_000), 'consume on a dead backend', [
            'ERR_STORE_UNAVAILABLE',
          ]);
        }
      } finally {
        await store.close();
      }
    });
  }

  // The groups of the capabilities a store declares (clock, leases, epoch): see StoreCapabilities in @mrtr/core.
  clockGroup(suite);
  leaseGroup(suite);
  epochGroup(suite);
}

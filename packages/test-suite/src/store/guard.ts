import { createStateGuard, type JsonValue, KeyRing, MrtrError, type ReplayStore } from '@mrtr/core';
import type { MrtrEvent } from '@mrtr/core/events';
import { storeCapabilities } from '@mrtr/core/store';
import { ok, rejectsMrtr } from '../assert.js';
import { plainCodec } from '../claims.js';
import { type StoreSuite, sleep, uniqueId } from './context.js';
import { outcomeTest } from './outcomes.js';

const NO_CAPABILITIES = { shared: false, keyExchange: false, clock: false, leases: false, epoch: false } as const;

/** The clock skew the suite's state guards tolerate (their `clockSkewMs`). */
const GUARD_SKEW_MS = 1000;

/** A guard over `store` with a plain (unprotected) codec, recording its events: the store's part is what is tested. */
function observed(s: StoreSuite, store: ReplayStore, keys: KeyRing = KeyRing.generate(), clock: () => number = s.now) {
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
}

const codeOf = async (promise: Promise<unknown>): Promise<string | undefined> =>
  promise.then(
    () => undefined,
    (error: unknown) => (MrtrError.is(error) ? error.code : 'not an MrtrError'),
  );

/** The store under state guards: what a replay, identical retries and an outage look like to the guard. */
export function guardGroup(s: StoreSuite): void {
  for (const register of [underAStateGuardAReplay, underTwoStateGuards50Identical, underAStateGuardAnUnreachable]) register(s);
}

function underAStateGuardAReplay(s: StoreSuite): void {
  const { withStore } = s;
  s.test('under a state guard, a replay is reported once as state.rejected ERR_STATE_REPLAYED, with the store timed', async () => {
    await withStore(async (store) => {
      const { guard, events, request } = observed(s, store);
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
}

function underTwoStateGuards50Identical(s: StoreSuite): void {
  const { factory, options, now } = s;
  outcomeTest(s)(
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
}

function underAStateGuardAnUnreachable(s: StoreSuite): void {
  const { options } = s;
  if (options.unreachable) {
    const unreachable = options.unreachable;
    s.test('under a state guard, an unreachable backend is reported as store.error then state.rejected', async () => {
      const store = await unreachable();
      try {
        // The state is minted by a fleet member that still reaches its store (a guard with an epoch asks the store
        // before it mints); the guard under test, cut off from the store, is presented it.
        const keys = KeyRing.generate();
        const reachable: ReplayStore = { capabilities: NO_CAPABILITIES, consume: async () => true, close: async () => {} };
        // The unreachable store is built on no fake clock: these guards run on this process's.
        const request = { method: 'tools/call', target: 'tool', arguments: {}, principal: 'p' };
        const token = await observed(s, reachable, keys, Date.now).guard.mint(null, request);
        const { guard, events } = observed(s, store, keys, Date.now);
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
    s.test('an unreachable backend gives ERR_STORE_UNAVAILABLE, never true', async () => {
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
}

import { createStateGuard, type JsonValue, KeyRing, MrtrError, type ReplayStore, type StateGuard } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { fail, ok } from '../assert.js';
import { plainCodec } from '../claims.js';
import { type GroupTest, sleep, type StoreSuite, uniqueId } from './context.js';

/** Flows of the load run, and how many run at once (bounded in count; the whole run is bounded in time below). */
const FLOWS = 100;
const CONCURRENCY = 10;
/** How long a stalled store call holds its reply before its instance gives up on it (the store's own timeout). */
const STALL_MS = 150;
/** Attempts at a flow's last round while the faults last; attempts once they healed; how long the run may take. */
const FAULTY_ATTEMPTS = 20;
const MAX_ATTEMPTS = 200;
const RUN_MS = 60_000;
/** Once the faults heal, every flow is answered within this (the bound). */
const HEAL_MS = 5_000;

/**
 * A store whose calls fail as a network does, at random while `on`: 5 % act and lose their reply, 20 % act and stall
 * until their instance gives up (`STALL_MS`, then `ERR_STORE_UNAVAILABLE`). The dice are a seeded sequence: a failing
 * run is the same run again.
 */
function flaky(inner: ReplayStore, seed: number): { store: ReplayStore; on: boolean; faults: number } {
  let state = seed >>> 0 || 1;
  const roll = (): number => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  const control = { store: inner, on: true, faults: 0 };
  const faulted = new Set(['consume', 'claim', 'record', 'renew', 'release']);
  control.store = new Proxy(inner, {
    get(target, property) {
      const value = Reflect.get(target, property);
      if (typeof value !== 'function') return value;
      if (!faulted.has(property as string)) return value.bind(target);
      return async (...args: unknown[]) => {
        const dice = control.on ? roll() : 1;
        const reply = (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        if (dice >= 0.25) return reply;
        control.faults++;
        await reply.catch(() => {});
        if (dice >= 0.05) await sleep(STALL_MS);
        throw new StoreUnavailableError({ cause: new Error(dice < 0.05 ? 'fault: reply lost' : 'fault: stalled, gave up') });
      };
    },
  });
  return control;
}

const codeOf = (error: unknown): string => (MrtrError.is(error) ? error.code : 'not an MrtrError');

/**
 * Two state guards (two instances) over a store whose replies are lost and stalled at random, with clients that retry
 * the same request: at most one effect per confirmed state, every client that completes gets the effect's result, at
 * least 99 % of flows complete, and once the faults heal no round stays in progress (a store with `leases`).
 */
export function guardFaultTests(suite: StoreSuite, test: GroupTest): void {
  test('two instances under lost and stalled replies: ≥ 99 % of flows complete, none runs twice, none stays in progress', async (first, namespace) => {
    const second = suite.options.sharedBackend === false ? first : await suite.factory({ namespace });
    try {
      await faultRun(suite, [first, second]);
    } finally {
      if (second !== first) await second.close();
    }
  });
}

/** One fault run: two guards over flaky links to the two stores, and what the run saw (effects, answers, tokens). */
interface FaultRun {
  readonly links: ReturnType<typeof flaky>[];
  readonly guards: StateGuard[];
  /** The effects each flow ran (more than one: a confirmed state ran twice). */
  readonly effects: Map<number, string[]>;
  /** What each flow's client was answered. */
  readonly answers: Map<number, string>;
  /** The state each flow's client holds for its last round. */
  readonly tokens: Map<number, string>;
  /** The end of the whole run (`RUN_MS`). */
  readonly deadline: number;
}

const request = (i: number) => ({ method: 'tools/call', target: 'deploy', arguments: { flow: i }, principal: `user-${i % 7}` });

async function faultRun(suite: StoreSuite, stores: [ReplayStore, ReplayStore]): Promise<void> {
  const keys = KeyRing.generate();
  const links = stores.map((store, i) => flaky(store, 0x9e3779b9 + i));
  const guards: StateGuard[] = links.map((link) =>
    createStateGuard({
      keys,
      allowEphemeralKeys: true, // one test process: a generated key is fine with a shared store
      codec: plainCodec,
      store: link.store,
      audience: 'guard-faults',
      now: () => suite.now(),
      clockSkewMs: 1_000,
      retryWaitMs: 50,
      leaseMs: 30_000,
    }),
  );
  const run: FaultRun = { links, guards, effects: new Map(), answers: new Map(), tokens: new Map(), deadline: Date.now() + RUN_MS };
  await underFaults(run);
  await afterHealing(run);
  const { effects, answers } = run;
  const ran = [...effects.values()];
  ok(
    ran.every((list) => list.length <= 1),
    `a confirmed state ran more than once: ${JSON.stringify([...effects].filter(([, l]) => l.length > 1))}`,
  );
  for (const [i, result] of answers) {
    const effect = effects.get(i)?.[0];
    ok(effect === result, `flow ${i}: the client was answered ${result}, the effect was ${String(effect)}`);
  }
}

/** One identical attempt at flow `i`'s last round on `guard`: its result, or the code it was refused with. */
async function attempt(run: FaultRun, guard: StateGuard, token: string, i: number): Promise<{ result: string } | string> {
  try {
    const admission = await guard.admit(token, request(i), { confirm: true });
    if (admission.replay) return { result: String((admission.outcome as { release: string }).release) };
    const release = uniqueId(`release-${i}`);
    run.effects.set(i, [...(run.effects.get(i) ?? []), release]);
    await admission.record({ release } as JsonValue).catch(() => false);
    return { result: release };
  } catch (error) {
    return codeOf(error);
  }
}

/** A client under faults: mints on one instance, then sends the last round until it has an answer (bounded). */
async function client(run: FaultRun, i: number): Promise<string | undefined> {
  const { guards, deadline } = run;
  let token: string | undefined;
  for (let n = 0; token === undefined && n < MAX_ATTEMPTS && Date.now() < deadline; n++) {
    token = await guards[n % 2]!.mint({ flow: i }, request(i)).catch(() => undefined);
  }
  if (token === undefined) return fail(`flow ${i}: no state could be minted`);
  run.tokens.set(i, token);
  for (let n = 0; n < FAULTY_ATTEMPTS && Date.now() < deadline; n++) {
    const got = await attempt(run, guards[(i + n) % 2]!, token, i);
    if (typeof got !== 'string') return got.result;
    if (got === 'ERR_OUTCOME_UNKNOWN' || got === 'ERR_STATE_REPLAYED') return fail(`flow ${i}: ${got} under faults without a crash`);
    await sleep(5);
  }
  return undefined;
}

/** Every flow, `CONCURRENCY` at a time, while the faults last: at least 99 % complete. */
async function underFaults(run: FaultRun): Promise<void> {
  const { links, answers } = run;
  const queue = Array.from({ length: FLOWS }, (_, i) => i);
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
        const result = await client(run, i);
        if (result !== undefined) answers.set(i, result);
      }
    }),
  );
  ok(
    links.every((link) => link.faults > 0),
    'the run must have met faults on both instances',
  );
  // While the faults last, clients retrying the same request complete (the faults heal round by round).
  ok(answers.size >= FLOWS * 0.99, `at least 99 % of flows must complete under the faults (${answers.size} of ${FLOWS})`);
}

/**
 * The faults heal. Within 5 s every flow's identical retry gets its answer — the claims whose replies were lost are
 * given back, the records that failed land — and none stays in progress.
 */
async function afterHealing(run: FaultRun): Promise<void> {
  const { links, guards, answers, tokens } = run;
  for (const link of links) link.on = false;
  // Every flow retries at once (as its client would), so a slow machine delays them all alike; a flow whose first
  // retry starts late (a starved event loop) gets its 5 s from then.
  const healed = Date.now();
  const still = await Promise.all(
    Array.from({ length: FLOWS }, async (_, i): Promise<string | undefined> => {
      const deadline = Math.max(healed, Date.now()) + HEAL_MS;
      let last = '';
      for (let n = 0; n < MAX_ATTEMPTS && Date.now() < deadline; n++) {
        const got = await attempt(run, guards[(i + n) % 2]!, tokens.get(i)!, i);
        if (typeof got !== 'string') {
          const before = answers.get(i);
          if (before !== undefined && before !== got.result) return `flow ${i}: answered ${got.result} after ${before}`;
          answers.set(i, got.result);
          return undefined;
        }
        last = got;
        await sleep(25);
      }
      return `flow ${i}: still ${last} ${Date.now() - healed} ms after the faults healed`;
    }),
  );
  const stuck = still.filter((problem) => problem !== undefined);
  ok(stuck.length === 0, stuck.slice(0, 5).join('; '));
}

// The guard under faults, on a store that declares leases, a clock and an epoch: a lost claim reply is released, a
// failed record is retried, a lapsed lease is "outcome unknown", a skewed clock refuses, a lost ledger refuses.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createStateGuard, generateKey, KeyRing, type ReplayStore, type RequestContext } from '../src/index.js';
import { LedgerLostError, StateExpiredError } from '../src/entry-errors.js';
import type { MrtrEvent } from '../src/entry-events.js';
import type { ClaimOptions, ClaimResult } from '../src/entry-store.js';
import { fakeClock, testCodec } from './helpers.js';

interface Entry {
  exp: number;
  fp: string;
  fence?: number;
  owner?: string | undefined;
  leaseUntil?: number | undefined;
  outcome?: string | undefined;
}

/**
 * A store in a Map on `clock` with every capability, and switches for faults: down, a failed call (`failNext`, by
 * operation), a lost reply (`loseNextReply`, or `loseNext` by operation), an epoch.
 */
function leasedStore(clock: { now(): number }) {
  const held = new Map<string, Entry>();
  const calls: { op: string; args: unknown[] }[] = [];
  const faults = {
    down: false,
    loseNextReply: false,
    epoch: Number.NEGATIVE_INFINITY,
    skewMs: 0,
    failNext: {} as Record<string, number>,
    loseNext: {} as Record<string, number>,
  };
  const storeNow = () => clock.now() + faults.skewMs;
  /** Runs `op`; down: fails before acting; a lost reply: acts, then fails. */
  const io = async <T>(op: string, args: unknown[], act: () => T): Promise<T> => {
    calls.push({ op, args });
    if (faults.down) throw new Error('connection refused');
    if ((faults.failNext[op] ?? 0) > 0) {
      faults.failNext[op]!--;
      throw new Error('connection reset');
    }
    const result = act();
    if (faults.loseNextReply || (faults.loseNext[op] ?? 0) > 0) {
      if (faults.loseNextReply) faults.loseNextReply = false;
      else faults.loseNext[op]!--;
      throw new Error('reply lost');
    }
    return result;
  };
  const spend = (exp: number, mintedAtMs: number | undefined): void => {
    if (exp <= storeNow()) throw new StateExpiredError();
    if (mintedAtMs !== undefined && mintedAtMs < faults.epoch) throw new LedgerLostError();
  };
  const store: ReplayStore = {
    capabilities: {
      shared: true,
      outcomes: { maxOutcomeBytes: 1 << 20, outcomeBudgetBytes: 1 << 30 },
      keyExchange: false,
      clock: true,
      leases: true,
      epoch: true,
    },
    consume: (id, exp, options) =>
      io('consume', [id, exp, options], () => {
        spend(exp, options?.mintedAtMs);
        const h = held.get(id);
        if (h !== undefined && h.exp >= storeNow()) return false;
        held.set(id, { exp, fp: '' });
        return true;
      }),
    claim: (id, exp, fp, options?: ClaimOptions) =>
      io('claim', [id, exp, fp, options], (): ClaimResult => {
        spend(exp, options?.mintedAtMs);
        const h = held.get(id);
        const leaseUntil = options?.owner !== undefined && options.leaseMs !== undefined ? storeNow() + options.leaseMs : undefined;
        if (h === undefined || h.exp < storeNow()) {
          held.set(id, { exp, fp, owner: options?.owner, leaseUntil });
          return { status: 'first', fence: 0 };
        }
        if (h.fp !== fp) return { status: 'replayed' };
        if (h.outcome !== undefined) return h.outcome === '' ? { status: 'replayed' } : { status: 'recorded', outcome: h.outcome };
        if (h.leaseUntil !== undefined && h.leaseUntil < storeNow()) {
          if (options?.reclaim !== true || leaseUntil === undefined) return { status: 'unknown' };
          h.owner = options.owner;
          h.leaseUntil = leaseUntil;
          h.fence = (h.fence ?? 0) + 1;
          return { status: 'first', fence: h.fence };
        }
        return { status: 'pending', ...(h.leaseUntil !== undefined && { leaseLeftMs: h.leaseUntil - storeNow() }) };
      }),
    record: (id, fp, outcome, options) =>
      io('record', [id, fp, outcome, options], () => {
        const h = held.get(id);
        if (h === undefined || h.fp !== fp || h.owner !== options?.owner) return false;
        if (h.outcome !== undefined) return h.outcome === outcome && outcome !== '';
        h.outcome = outcome;
        return outcome !== '';
      }),
    renew: (id, owner, leaseMs) =>
      io('renew', [id, owner, leaseMs], () => {
        const h = held.get(id);
        if (h === undefined || h.owner !== owner || h.outcome !== undefined) return false;
        h.leaseUntil = storeNow() + leaseMs;
        return true;
      }),
    release: (id, owner) =>
      io('release', [id, owner], () => {
        const h = held.get(id);
        if (h === undefined) return true;
        if (h.owner !== owner || h.outcome !== undefined) return false;
        held.delete(id);
        return true;
      }),
    time: () => io('time', [], storeNow),
    ledgerEpoch: () =>
      io('ledgerEpoch', [], () => {
        if (faults.epoch === Number.NEGATIVE_INFINITY) faults.epoch = storeNow();
        return faults.epoch;
      }),
    close: async () => {},
  };
  return { store, held, calls, faults };
}

const req = (): RequestContext => ({ principal: 'alice', method: 'tools/call', target: 'deploy', arguments: { env: 'prod' } });
const yes = { confirm: { action: 'accept', content: { ok: true } } };
const codeOf = async (p: Promise<unknown>): Promise<string | undefined> =>
  p.then(
    () => undefined,
    (e: { code?: string }) => e.code,
  );

/** Lets the background work scheduled on fake timers run: `ms` of timer time, promises settled in between. */
const run = (ms: number) => vi.advanceTimersByTimeAsync(ms);

function setup(over: { leaseMs?: number; clockSkewMs?: number } = {}) {
  const clock = fakeClock();
  const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
  const ledger = leasedStore(clock);
  const events: MrtrEvent[] = [];
  const make = (store: ReplayStore = ledger.store) =>
    createStateGuard({
      codec: testCodec,
      keys,
      store,
      audience: 'aud-1',
      now: clock.now,
      leaseMs: over.leaseMs ?? 300,
      clockSkewMs: over.clockSkewMs ?? 5_000,
      onEvent: (event) => events.push(event),
    });
  return { clock, ledger, events, guard: make(), make };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('leases', () => {
  it('the owner renews its lease every third of leaseMs while the round runs, and stops once it recorded', async () => {
    const { guard, ledger, clock } = setup({ leaseMs: 300 });
    const first = await guard.admit(await guard.mint(null, req()), req(), yes);
    if (first.replay) throw new Error('first must run');
    const claim = ledger.calls.find((c) => c.op === 'claim')!;
    const owner = (claim.args[3] as ClaimOptions).owner!;
    expect(owner).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect((claim.args[3] as ClaimOptions).leaseMs).toBe(300);
    for (let i = 0; i < 3; i++) {
      clock.advance(100);
      await run(100);
    }
    const renews = ledger.calls.filter((c) => c.op === 'renew');
    expect(renews.length).toBe(3);
    expect(renews.every((c) => c.args[1] === owner && c.args[2] === 300)).toBe(true);
    expect(await first.record({ ok: 1 })).toBe(true);
    await run(1_000);
    expect(ledger.calls.filter((c) => c.op === 'renew').length).toBe(3);
  });

  it('an instance that stops renewing (dead or cut off) leaves "outcome unknown" to identical retries, with round.unknown', async () => {
    const { guard, ledger, clock, events, make } = setup({ leaseMs: 300 });
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    // The instance is cut off from the store: its renewals fail, its lease lapses on the store's clock.
    const other = make({ ...ledger.store, renew: async () => Promise.reject(new Error('partitioned')) } as ReplayStore);
    ledger.faults.down = true;
    clock.advance(400);
    await run(400);
    ledger.faults.down = false;
    expect(await codeOf(other.admit(token, req(), yes))).toBe('ERR_OUTCOME_UNKNOWN');
    const unknown = events.find((e) => e.type === 'round.unknown');
    expect(unknown).toMatchObject({ type: 'round.unknown', method: 'tools/call', target: 'deploy', round: 2, at: clock.now() });
    expect(typeof (unknown as { principal: string }).principal).toBe('string');
    // Other answers are still a replay, never a second run.
    expect(await codeOf(other.admit(token, req(), { confirm: { action: 'decline' } }))).toBe('ERR_STATE_REPLAYED');
  });

  it('a tool that opts in to at-least-once (reclaim) runs again after the lease lapsed, with the next fence; the old run cannot record', async () => {
    const { guard, ledger, clock, make } = setup({ leaseMs: 300 });
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes, { reclaim: true });
    if (first.replay) throw new Error('first must run');
    expect(first.fence).toBe(0);
    // Its instance is cut off; the lease lapses.
    ledger.faults.down = true;
    clock.advance(400);
    await run(400);
    ledger.faults.down = false;
    const other = make();
    const again = await other.admit(token, req(), yes, { reclaim: true });
    if (again.replay) throw new Error('the retry must run the round again');
    expect(again.fence).toBe(1);
    expect(await first.record({ run: 0 })).toBe(false);
    expect(await again.record({ run: 1 })).toBe(true);
    expect(await make().admit(token, req(), yes, { reclaim: true })).toMatchObject({ replay: true, outcome: { run: 1 } });
    // Without the opt-in the same situation is "outcome unknown".
    const token2 = await guard.mint(null, req());
    const once = await guard.admit(token2, req(), yes);
    if (once.replay) throw new Error('first must run');
    ledger.faults.down = true;
    clock.advance(400);
    await run(400);
    ledger.faults.down = false;
    expect(await codeOf(make().admit(token2, req(), yes))).toBe('ERR_OUTCOME_UNKNOWN');
  });

  it('a claim whose reply was lost is released in the background: the next identical retry owns the round', async () => {
    const { guard, ledger } = setup();
    const token = await guard.mint(null, req());
    ledger.faults.loseNextReply = true;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
    const claimOwner = (ledger.calls.find((c) => c.op === 'claim')!.args[3] as ClaimOptions).owner;
    await run(10);
    const release = ledger.calls.find((c) => c.op === 'release');
    expect(release?.args[1]).toBe(claimOwner);
    expect(ledger.held.size).toBe(0);
    const again = await guard.admit(token, req(), yes);
    expect(again.replay).toBe(false);
  });

  it('a release that fails while the store is down is retried until it lands', async () => {
    const { guard, ledger } = setup();
    const token = await guard.mint(null, req());
    ledger.faults.loseNextReply = true;
    ledger.faults.failNext.release = 3;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
    await run(250);
    expect(ledger.held.size).toBe(1);
    await run(2_000);
    expect(ledger.calls.filter((c) => c.op === 'release').length).toBe(4);
    expect(ledger.held.size).toBe(0);
  });

  it('a second lost claim reply for the same state does not cancel the release of the first (each owner is given back)', async () => {
    const { guard, ledger } = setup();
    const token = await guard.mint(null, req());
    // The first claim lands and its reply is lost; its release fails once, so it is still being retried ...
    ledger.faults.loseNextReply = true;
    ledger.faults.failNext.release = 1;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
    // ... when an identical retry's claim (pending behind the first owner) loses its reply too.
    ledger.faults.loseNextReply = true;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
    const [first, second] = ledger.calls.filter((c) => c.op === 'claim').map((c) => (c.args[3] as ClaimOptions).owner);
    expect(first).not.toBe(second);
    await run(2_500);
    const released = ledger.calls.filter((c) => c.op === 'release').map((c) => c.args[1]);
    expect(released).toContain(second);
    expect(released.filter((owner) => owner === first).length).toBe(2);
    expect(ledger.held.size).toBe(0);
    expect((await guard.admit(token, req(), yes)).replay).toBe(false);
  });

  it("a retry polling another instance's round gives back the claim it took when that claim's reply was lost", async () => {
    const { guard, ledger, make } = setup();
    const other = make();
    const token = await guard.mint(null, req());
    // The first attempt's claim lands and its reply is lost; its release lands on the second try (at 100 ms).
    ledger.faults.loseNextReply = true;
    ledger.faults.failNext.release = 1;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
    // An identical retry on the other instance finds the round pending and polls it (at 50 ms, then 150 ms) ...
    const polled = codeOf(other.admit(token, req(), yes));
    await run(60);
    expect(ledger.calls.filter((c) => c.op === 'claim').length).toBe(3);
    // ... and the poll at 150 ms, after the release, takes the claim: its reply is lost.
    ledger.faults.loseNext.claim = 1;
    await run(100);
    expect(await polled).toBe('ERR_STORE_UNAVAILABLE');
    await run(2_500);
    expect(ledger.held.size).toBe(0);
    expect((await guard.admit(token, req(), yes)).replay).toBe(false);
  });

  it('a poll whose claim is the first gives it back even when the release fails at first', async () => {
    const { guard, ledger, make } = setup();
    const other = make();
    const token = await guard.mint(null, req());
    ledger.faults.loseNextReply = true;
    ledger.faults.failNext.release = 1;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
    const polled = codeOf(other.admit(token, req(), yes));
    await run(110);
    expect(ledger.held.size).toBe(0);
    // The poll at 150 ms takes the given-back claim; its own release fails once and is retried.
    ledger.faults.failNext.release = 1;
    await run(3_000);
    expect(ledger.calls.filter((c) => c.op === 'release').length).toBe(4);
    expect(await polled).toBe('ERR_ROUND_IN_PROGRESS');
    expect(ledger.held.size).toBe(0);
    expect((await guard.admit(token, req(), yes)).replay).toBe(false);
  });

  it('a record that fails while the store is down is retried; identical retries here get the outcome meanwhile', async () => {
    const { guard, ledger, make } = setup();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    ledger.faults.down = true;
    expect(await codeOf(first.record({ deployed: 'v2' }))).toBe('ERR_STORE_UNAVAILABLE');
    const local = await guard.admit(token, req(), yes).catch((e: { code: string }) => e.code);
    // The store is down: this instance answers from what it holds.
    expect(local).toMatchObject({ replay: true, outcome: { deployed: 'v2' } });
    ledger.faults.down = false;
    await run(2_500);
    const elsewhere = await make().admit(token, req(), yes);
    expect(elsewhere).toMatchObject({ replay: true, outcome: { deployed: 'v2' } });
  });
});

describe("the store's clock", () => {
  it('an instance whose clock is off the store by more than clockSkewMs refuses spends and mints, and reports the offset', async () => {
    const { guard, ledger, events } = setup({ clockSkewMs: 5_000 });
    const token = await guard.mint(null, req());
    ledger.faults.skewMs = 30_000;
    const sample = await guard.checkClock();
    expect(sample.skewed).toBe(true);
    expect(Math.round(sample.offsetMs)).toBe(30_000);
    expect(events.filter((e) => e.type === 'store.clock').at(-1)).toMatchObject({ skewed: true, toleranceMs: 5_000 });
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_CLOCK_SKEW');
    expect(await codeOf(guard.open(token, req()))).toBe('ERR_CLOCK_SKEW');
    expect(await codeOf(guard.mint(null, req()))).toBe('ERR_CLOCK_SKEW');
    // Back within bounds: served again.
    ledger.faults.skewMs = 1_000;
    expect((await guard.checkClock()).skewed).toBe(false);
    expect((await guard.admit(token, req(), yes)).replay).toBe(false);
  });

  it("a state the store's clock says has expired is refused as clock skew, and nothing is written", async () => {
    const { guard, ledger, clock } = setup({ clockSkewMs: 1_000 });
    const token = await guard.mint(null, req());
    // The store's clock runs far ahead, unmeasured yet: the store refuses the state as expired.
    ledger.faults.skewMs = 3_600_000;
    clock.advance(1);
    expect(await codeOf(guard.open(token, req()))).toBe('ERR_CLOCK_SKEW');
    expect(ledger.held.size).toBe(0);
  });
});

describe("the store's epoch", () => {
  it('the epoch is written before the first mint and sealed in the state: a brand-new ledger serves what was minted on it', async () => {
    const { guard, ledger, clock } = setup({ clockSkewMs: 2_000 });
    expect(ledger.faults.epoch).toBe(Number.NEGATIVE_INFINITY);
    const token = await guard.mint(null, req());
    expect(ledger.faults.epoch).toBe(clock.now());
    // The first spend of the ledger comes later; the state was minted on this ledger and is served.
    clock.advance(10);
    expect((await guard.admit(token, req(), yes)).replay).toBe(false);
    expect((ledger.calls.find((c) => c.op === 'claim')!.args[3] as ClaimOptions).mintedAtMs).toBe(ledger.faults.epoch);
    await guard.mint(null, req());
    expect(ledger.calls.filter((c) => c.op === 'ledgerEpoch').length).toBe(1);
  });

  it('a ledger lost and begun again after the mint refuses the state (ERR_LEDGER_LOST); the guard learns the new epoch', async () => {
    const { guard, ledger, clock } = setup({ clockSkewMs: 2_000 });
    const token = await guard.mint(null, req());
    const spent = await guard.admit(token, req(), yes);
    if (spent.replay) throw new Error('first must run');
    await spent.record({ ok: 1 });
    // The store restarts empty: its ledger begins again later.
    clock.advance(1_000);
    ledger.held.clear();
    ledger.faults.epoch = clock.now();
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_LEDGER_LOST');
    expect(await codeOf(guard.open(token, req()))).toBe('ERR_LEDGER_LOST');
    // States minted from now on carry the new epoch and are served at once.
    const fresh = await guard.mint(null, req());
    expect(ledger.calls.filter((c) => c.op === 'ledgerEpoch').length).toBe(2);
    expect((await guard.admit(fresh, req(), yes)).replay).toBe(false);
  });

  it('a state that carries no epoch is judged by its iat less the tolerated skew', async () => {
    const { ledger, clock, make } = setup({ clockSkewMs: 2_000 });
    const noEpoch = { ...ledger.store, capabilities: { ...ledger.store.capabilities, epoch: false } };
    const minter = make(noEpoch as ReplayStore);
    const token = await minter.mint(null, req());
    ledger.faults.epoch = clock.now() - 1_000;
    const guard = make();
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_LEDGER_LOST');
    expect((ledger.calls.find((c) => c.op === 'claim')!.args[3] as ClaimOptions).mintedAtMs).toBe(clock.now() - 2_000);
  });

  it('a mint that cannot learn the epoch fails closed, and the next one tries again', async () => {
    const { guard, ledger } = setup();
    ledger.faults.failNext.ledgerEpoch = 1;
    expect(await codeOf(guard.mint(null, req()))).toBe('ERR_STORE_UNAVAILABLE');
    expect(typeof (await guard.mint(null, req()))).toBe('string');
  });
});

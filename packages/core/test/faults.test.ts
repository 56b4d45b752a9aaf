// The guard under faults, on a store that declares leases, a clock and an epoch: a lost claim reply is released, a
// failed record is retried, a lapsed lease is "outcome unknown", a skewed clock refuses, a lost ledger refuses.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  type ClaimOptions,
  type ClaimResult,
  createStateGuard,
  generateKey,
  KeyRing,
  type MrtrEvent,
  type ReplayStore,
  type RequestContext,
} from '../src/index.js';
import { LedgerLostError, StateExpiredError } from '../src/authoring.js';
import { fakeClock, testCodec } from './helpers.js';

interface Entry {
  exp: number;
  fp: string;
  owner?: string | undefined;
  leaseUntil?: number | undefined;
  outcome?: string | undefined;
}

/** A store in a Map on `clock` with every capability, and switches for faults: down, a lost reply, an epoch. */
function leasedStore(clock: { now(): number }) {
  const held = new Map<string, Entry>();
  const calls: { op: string; args: unknown[] }[] = [];
  const faults = { down: false, loseNextReply: false, epoch: Number.NEGATIVE_INFINITY, skewMs: 0, failNext: {} as Record<string, number> };
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
    if (faults.loseNextReply) {
      faults.loseNextReply = false;
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
        if (h.leaseUntil !== undefined && h.leaseUntil < storeNow()) return { status: 'unknown' };
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
    expect(unknown).toMatchObject({ type: 'round.unknown', method: 'tools/call', target: 'deploy', round: 2 });
    expect(typeof (unknown as { principal: string }).principal).toBe('string');
    // Other answers are still a replay, never a second run.
    expect(await codeOf(other.admit(token, req(), { confirm: { action: 'decline' } }))).toBe('ERR_STATE_REPLAYED');
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
  it('states carry their mint time less the skew; a store whose ledger began later refuses them as ERR_LEDGER_LOST', async () => {
    const { guard, ledger, clock } = setup({ clockSkewMs: 2_000 });
    const minted = clock.now();
    const token = await guard.mint(null, req());
    ledger.faults.epoch = minted + 1;
    expect(await codeOf(guard.admit(token, req(), yes))).toBe('ERR_LEDGER_LOST');
    expect((ledger.calls.find((c) => c.op === 'claim')!.args[3] as ClaimOptions).mintedAtMs).toBe(minted - 2_000);
    expect(await codeOf(guard.open(token, req()))).toBe('ERR_LEDGER_LOST');
    // A state minted once the new ledger began is served.
    // A state minted within the tolerated skew after the new ledger began is refused too (its minter's clock may run
    // ahead); one minted past it is served.
    clock.advance(10);
    expect(await codeOf(guard.admit(await guard.mint(null, req()), req(), yes))).toBe('ERR_LEDGER_LOST');
    clock.advance(2_000);
    expect((await guard.admit(await guard.mint(null, req()), req(), yes)).replay).toBe(false);
  });
});

import { describe, expect, it, vi } from 'vitest';
import {
  createStateGuard,
  generateKey,
  KeyProvider,
  KeyRing,
  MrtrError,
  type MrtrErrorCode,
  type ReplayStore,
  type StateGuardOptions,
} from '../src/index.js';
import type { StateClaims } from '../src/entry-codec.js';
import type { GuardEvent, OutcomeDroppedEvent } from '../src/entry-events.js';
import type { ClaimResult } from '../src/entry-store.js';
import { fakeClock, req, testCodec } from './helpers.js';

// Outcome recording (issue 20): guard.admit runs a round once per state and gives an identical retry (the same
// state, principal and answers) what the first attempt recorded. The store side is the shared compliance suite's
// (@mrtr/test-suite); these tests cover the guard's part: fingerprints, sealing, waiting, and failing closed.

const yes = { confirm: { action: 'accept', content: { confirm: true } } };

/** A correct claim/record store in a Map (the real ones live in their packages), with counters and an outage switch. */
function recordingStore(now: () => number) {
  const held = new Map<string, { exp: number; fp?: string; outcome?: string }>();
  const calls = { claim: 0, record: 0, consume: 0 };
  let down = false;
  const store: ReplayStore & { setDown(v: boolean): void; calls: typeof calls; held: typeof held } = {
    capabilities: {
      shared: false,
      outcomes: { maxOutcomeBytes: 1 << 20, outcomeBudgetBytes: 1 << 30 },
      keyExchange: false,
      clock: false,
      leases: false,
      epoch: false,
    },
    calls,
    held,
    setDown: (v) => {
      down = v;
    },
    async consume(id, exp) {
      calls.consume++;
      if (down) throw new Error('connection refused');
      const h = held.get(id);
      if (h !== undefined && h.exp >= now()) return false;
      held.set(id, { exp });
      return true;
    },
    async claim(id, exp, fp): Promise<ClaimResult> {
      calls.claim++;
      if (down) throw new Error('connection refused');
      const h = held.get(id);
      if (h === undefined || h.exp < now()) {
        held.set(id, { exp, fp });
        return { status: 'first' };
      }
      if (h.fp !== fp) return { status: 'replayed' };
      if (h.outcome === undefined) return { status: 'pending' };
      return h.outcome === '' ? { status: 'replayed' } : { status: 'recorded', outcome: h.outcome };
    },
    async record(id, fp, outcome) {
      calls.record++;
      if (down) throw new Error('connection refused');
      const h = held.get(id);
      if (h === undefined || h.fp !== fp || h.outcome !== undefined || h.exp < now()) return false;
      h.outcome = outcome;
      return outcome !== '';
    },
    async close() {},
  };
  return store;
}

function setup(over: Partial<StateGuardOptions> = {}) {
  const clock = fakeClock();
  const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
  const store = recordingStore(clock.now);
  const make = (extra: Partial<StateGuardOptions> = {}) =>
    createStateGuard({ codec: testCodec, keys, store, audience: 'aud-1', now: clock.now, ...over, ...extra });
  return { clock, keys, store, guard: make(), make };
}

async function code(promise: Promise<unknown>): Promise<MrtrErrorCode | string> {
  try {
    await promise;
  } catch (error) {
    return MrtrError.is(error) ? error.code : `not an MrtrError: ${String(error)}`;
  }
  return 'resolved';
}

describe('guard.admit: one run per state, the first answer for an identical retry', () => {
  it('records the outcome; an identical retry (answers in any key order) gets it; nothing is run twice', async () => {
    const { guard, store } = setup();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), { b: 2, ...yes });
    expect(first.replay).toBe(false);
    if (first.replay) return;
    expect(first.state.flow.round).toBe(1);
    expect(await first.record({ r: { content: [{ type: 'text', text: 'deleted' }] } })).toBe(true);
    const retry = await guard.admit(token, req(), { ...yes, b: 2 });
    expect(retry).toMatchObject({ replay: true, outcome: { r: { content: [{ type: 'text', text: 'deleted' }] } } });
    expect(store.calls).toMatchObject({ claim: 2, record: 1, consume: 0 });
  });

  it('other answers → ERR_STATE_REPLAYED; another principal → ERR_STATE_PRINCIPAL; other arguments → ERR_STATE_BINDING', async () => {
    const { guard } = setup();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (!first.replay) await first.record('done');
    expect(await code(guard.admit(token, req(), { confirm: { action: 'decline' } }))).toBe('ERR_STATE_REPLAYED');
    expect(await code(guard.admit(token, req(), null))).toBe('ERR_STATE_REPLAYED');
    expect(await code(guard.admit(token, req({ principal: 'mallory' }), yes))).toBe('ERR_STATE_PRINCIPAL');
    expect(await code(guard.admit(token, req({ arguments: { paths: ['/'] } }), yes))).toBe('ERR_STATE_BINDING');
  });

  it('a retry while the first attempt runs on this instance waits for its record, without polling the store', async () => {
    const { guard, store } = setup();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    const waiting = guard.admit(token, req(), yes);
    const claimsBefore = store.calls.claim;
    await first.record({ r: 'the result' });
    expect(await waiting).toMatchObject({ replay: true, outcome: { r: 'the result' } });
    expect(store.calls.claim).toBe(claimsBefore);
  });

  it('with retryWaitMs 0 a retry while the first attempt runs gets ERR_ROUND_IN_PROGRESS, here and on another instance', async () => {
    const { guard, make } = setup({ retryWaitMs: 0 });
    const other = make();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    expect(first.replay).toBe(false);
    expect(await code(guard.admit(token, req(), yes))).toBe('ERR_ROUND_IN_PROGRESS');
    expect(await code(other.admit(token, req(), yes))).toBe('ERR_ROUND_IN_PROGRESS');
    // Other answers are not "in progress": they are a replay at once.
    expect(await code(other.admit(token, req(), { confirm: { action: 'decline' } }))).toBe('ERR_STATE_REPLAYED');
  });

  it('another instance polls the store until the first attempt records, then gets its outcome', async () => {
    const { guard, make } = setup({ retryWaitMs: 600_000 });
    const other = make();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    const polling = other.admit(token, req(), yes);
    await first.record({ r: 42 });
    expect(await polling).toMatchObject({ replay: true, outcome: { r: 42 } });
  });

  it('an outcome too large for the codec is not kept: record resolves false, waiters and retries get ERR_STATE_REPLAYED', async () => {
    const { guard } = setup();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    const waiting = code(guard.admit(token, req(), yes));
    expect(await first.record({ r: 'x'.repeat(70 * 1024) })).toBe(false);
    expect(await waiting).toBe('ERR_STATE_REPLAYED');
    expect(await code(guard.admit(token, req(), yes))).toBe('ERR_STATE_REPLAYED');
  });

  it('record twice is a TypeError; a store failure while recording rejects with ERR_STORE_UNAVAILABLE and nothing runs again', async () => {
    const { guard, store } = setup({ retryWaitMs: 0 });
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    store.setDown(true);
    expect(await code(first.record('x'))).toBe('ERR_STORE_UNAVAILABLE');
    await expect(first.record('x')).rejects.toThrow(TypeError);
    store.setDown(false);
    // The store still holds the round as running: an identical retry is told so, never run again.
    expect(await code(guard.admit(token, req(), yes))).toBe('ERR_ROUND_IN_PROGRESS');
    store.setDown(true);
    expect(await code(guard.admit(token, req(), yes))).toBe('ERR_STORE_UNAVAILABLE');
  });

  it('an outcome in the store that was not sealed for this state, principal and answers is refused (ERR_STATE_REPLAYED)', async () => {
    const { guard, store, make } = setup({ retryWaitMs: 0 });
    const other = make();
    const a = await guard.mint(null, req());
    const b = await guard.mint(null, req());
    const first = await guard.admit(a, req(), yes);
    if (first.replay) throw new Error('first must run');
    await first.record({ r: 'for a' });
    const second = await guard.admit(b, req(), yes);
    if (second.replay) throw new Error('first must run');
    // Move a's sealed outcome onto b's entry (a store that mixed up rows, or someone with write access to it).
    const entries = [...store.held.values()];
    const sealedForA = entries.find((e) => e.outcome !== undefined)!.outcome!;
    entries.find((e) => e.outcome === undefined)!.outcome = sealedForA;
    // On another instance (this one still holds b's attempt as running and would wait for it).
    expect(await code(other.admit(b, req(), yes))).toBe('ERR_STATE_REPLAYED');
    // A sealed outcome never passes as a state either.
    expect(await code(guard.open(sealedForA, req()))).toBe('ERR_STATE_AUDIENCE');
  });

  it('answers with no canonical form (nested too deep) run once; their retries are replays', async () => {
    const { guard } = setup();
    let deep: unknown = 'leaf';
    for (let i = 0; i < 200; i++) deep = { d: deep };
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), deep as never);
    expect(first.replay).toBe(false);
    if (!first.replay) expect(await first.record('done')).toBe(true);
    expect(await code(guard.admit(token, req(), deep as never))).toBe('ERR_STATE_REPLAYED');
  });

  it('a store without claim/record: admit consumes, every retry is a replay', async () => {
    const clock = fakeClock();
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const full = recordingStore(clock.now);
    const plain: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: (id, exp) => full.consume(id, exp),
      close: async () => {},
    };
    const guard = createStateGuard({ codec: testCodec, keys, store: plain, audience: 'aud-1', now: clock.now });
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    expect(first.replay).toBe(false);
    if (!first.replay) expect(await first.record('x')).toBe(false);
    expect(await code(guard.admit(token, req(), yes))).toBe('ERR_STATE_REPLAYED');
  });

  it('a store with claim but no record is refused at construction', () => {
    const clock = fakeClock();
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const full = recordingStore(clock.now);
    const half = { consume: full.consume, claim: full.claim, close: full.close } as ReplayStore;
    expect(() => createStateGuard({ codec: testCodec, keys, store: half, audience: 'aud-1' })).toThrow(TypeError);
  });

  it('an expired state is refused before any claim', async () => {
    const { guard, clock, store } = setup({ ttlMs: 60_000, clockSkewMs: 5_000 });
    const token = await guard.mint(null, req());
    clock.advance(60_000 + 5_001);
    expect(await code(guard.admit(token, req(), yes))).toBe('ERR_STATE_EXPIRED');
    expect(store.calls.claim).toBe(0);
  });
});

// Issue 31: what safe retry may cost is bounded — bytes per principal, nothing sealed that will not be kept,
// waiting retries, and no answer oracle under a shared principal.
describe('sealing an outcome', () => {
  /** testCodec with `sealJson` (seal of the parsed text: the same token when the text is the claims' JSON), counted. */
  const jsonCodec = (calls: { seal: number; sealJson: number }) => (keys: KeyRing) => {
    const inner = testCodec(keys);
    return {
      ...inner,
      seal: (claims: StateClaims) => {
        calls.seal++;
        return inner.seal(claims);
      },
      sealJson: (json: string) => {
        calls.sealJson++;
        return inner.seal(JSON.parse(json) as StateClaims);
      },
    };
  };
  const outcome = { r: { content: [{ type: 'text', text: 'deleted ✓ "quoted" \u2028' }], structuredContent: { n: [1, 2.5, null] } } };

  it('with a codec that seals JSON, the outcome is written once and sealed from its JSON, to the token its claims seal to', async () => {
    const calls = { seal: 0, sealJson: 0 };
    const { guard, store, keys } = setup({ codec: jsonCodec(calls) });
    const token = await guard.mint(null, req());
    expect(calls).toEqual({ seal: 1, sealJson: 0 });
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    expect(await first.record(outcome)).toBe(true);
    // The mint sealed claims; the outcome went through sealJson alone.
    expect(calls).toEqual({ seal: 1, sealJson: 1 });
    const sealed = [...store.held.values()].find((e) => e.outcome !== undefined)!.outcome!;
    // The same token as sealing the claims object member by member (how outcomes were sealed before: those in a store
    // at upgrade time read the same).
    const { claims } = await testCodec(keys).unseal(sealed);
    const data = claims.data as { f: string; o: unknown };
    const asObject = {
      v: claims.v,
      iat: claims.iat,
      exp: claims.exp,
      jti: claims.jti,
      aud: claims.aud,
      sub: claims.sub,
      req: claims.req,
      flow: claims.flow,
      data: { f: data.f, o: outcome },
    };
    expect(sealed).toBe(testCodec(keys).seal(asObject));
    expect(claims.aud).toBe('aud-1#outcome');
    // An identical retry gets it.
    expect(await guard.admit(token, req(), yes)).toMatchObject({ replay: true, outcome });
  });

  it('an outcome sealed from the claims object (a codec without sealJson, or before it) is read by a guard whose codec has it', async () => {
    const calls = { seal: 0, sealJson: 0 };
    const { guard, store, make } = setup({ retryWaitMs: 0 });
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    expect(await first.record(outcome)).toBe(true);
    expect(await make({ codec: jsonCodec(calls) }).admit(token, req(), yes)).toMatchObject({ replay: true, outcome });
    expect(store.calls.record).toBe(1);
  });

  it('on a refreshing ring the outcome is sealed from its JSON by the key in force, and read back', async () => {
    const calls = { seal: 0, sealJson: 0 };
    const clock = fakeClock();
    const provider = await KeyProvider.create({
      load: () => [
        { kid: 'k1', secret: generateKey() },
        { kid: 'k2', secret: generateKey(), notBefore: clock.now() + 1_000 },
      ],
      refreshMs: 0,
      now: clock.now,
    });
    const store = recordingStore(clock.now);
    const guard = createStateGuard({ codec: jsonCodec(calls), keys: provider.keys, store, audience: 'aud-1', now: clock.now });
    clock.advance(1_000); // k2 seals from now on
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    expect(await first.record(outcome)).toBe(true);
    expect(calls.sealJson).toBe(1);
    const sealed = [...store.held.values()].find((e) => e.outcome !== undefined)!.outcome!;
    expect(sealed.startsWith('k2.')).toBe(true);
    expect(await guard.admit(token, req(), yes)).toMatchObject({ replay: true, outcome });
    provider.close();
  });
});

describe('guard.admit: bounded bytes, bounded waiting, no oracle', () => {
  /** Runs one round for `principal` and records an outcome of about `bytes` characters: whether it was kept. */
  const round = async (guard: ReturnType<typeof setup>['guard'], principal: string, bytes: number, tag = principal) => {
    const token = await guard.mint(null, req({ principal }));
    const first = await guard.admit(token, req({ principal }), yes);
    if (first.replay) throw new Error('first must run');
    return { token, kept: await first.record({ r: `${tag}:`.padEnd(bytes, 'x') }) };
  };
  const heldBytes = (store: ReturnType<typeof setup>['store']) =>
    [...store.held.values()].reduce((sum, h) => sum + (h.outcome?.length ?? 0), 0);

  it("one principal's outcomes stop being kept past its outcomeQuota; its retries are replays; another principal's are kept", async () => {
    const { guard, store } = setup({ outcomeQuota: { maxBytes: 40_000 } });
    const results = [];
    for (let i = 0; i < 10; i++) results.push(await round(guard, 'mallory', 8_000));
    const kept = results.filter((r) => r.kept).length;
    expect(kept).toBeGreaterThanOrEqual(1);
    expect(kept).toBeLessThan(10);
    expect(heldBytes(store)).toBeLessThanOrEqual(40_000);
    const unkept = results.find((r) => !r.kept)!;
    expect(await code(guard.admit(unkept.token, req({ principal: 'mallory' }), yes))).toBe('ERR_STATE_REPLAYED');
    const alice = await round(guard, 'alice', 8_000);
    expect(alice.kept).toBe(true);
    expect(await guard.admit(alice.token, req({ principal: 'alice' }), yes)).toMatchObject({ replay: true });
  });

  it('the outcome budget counts a principal once across a key rotation (states sealed by the old and the new key)', async () => {
    const clock = fakeClock();
    const provider = await KeyProvider.create({
      load: () => [
        { kid: 'k1', secret: generateKey() },
        { kid: 'k2', secret: generateKey(), notBefore: clock.now() + 1_000 },
      ],
      refreshMs: 0,
      now: clock.now,
    });
    const store = recordingStore(clock.now);
    const guard = createStateGuard({
      codec: testCodec,
      keys: provider.keys,
      store,
      audience: 'aud-1',
      now: clock.now,
      outcomeQuota: { maxBytes: 40_000 },
    });
    const before = [];
    for (let i = 0; i < 10; i++) before.push(await round(guard, 'mallory', 8_000));
    expect(before.some((r) => !r.kept)).toBe(true);
    clock.advance(1_000); // k2 seals from now on: a new principal tag in the states, the same principal
    const after = await round(guard, 'mallory', 8_000);
    expect(after.token.startsWith('k2.')).toBe(true);
    expect(after.kept).toBe(false);
    expect(heldBytes(store)).toBeLessThanOrEqual(40_000);
  });

  it('by default one principal keeps at most 1 MiB of outcomes, however many rounds it runs (the review flood)', async () => {
    const { guard, store } = setup();
    for (let i = 0; i < 100; i++) await round(guard, 'mallory', 15_000);
    expect(heldBytes(store)).toBeLessThanOrEqual(1024 * 1024);
    expect((await round(guard, 'alice', 15_000)).kept).toBe(true);
  });

  it('nothing is sealed that will not be kept: an outcome far past the store’s maxOutcomeBytes is recorded as done, not kept', async () => {
    const clock = fakeClock();
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const store = recordingStore(clock.now);
    Object.assign(store, { capabilities: { ...store.capabilities, outcomes: { maxOutcomeBytes: 4_096, outcomeBudgetBytes: 1 << 30 } } });
    let seals = 0;
    const codec = (k: KeyRing) => {
      const inner = testCodec(k);
      const seal = (claims: Parameters<typeof inner.seal>[0]) => {
        seals++;
        return inner.seal(claims);
      };
      return { ...inner, seal };
    };
    const guard = createStateGuard({ codec, keys, store, audience: 'aud-1', now: clock.now });
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    const sealsBefore = seals;
    expect(await first.record({ r: 'x'.repeat(100 * 1024) })).toBe(false);
    expect(seals).toBe(sealsBefore);
    expect([...store.held.values()].some((h) => h.outcome === '')).toBe(true);
    // One that fits is sealed and kept.
    const small = await guard.mint(null, req());
    const again = await guard.admit(small, req(), yes);
    if (again.replay) throw new Error('first must run');
    expect(await again.record({ r: 'small' })).toBe(true);
  });

  it('a dropped outcome is reported once as outcome.dropped with its reason (principal_quota), never the principal or a value', async () => {
    const events: GuardEvent[] = [];
    const { guard } = setup({ outcomeQuota: { maxBytes: 40_000 }, onEvent: (e) => events.push(e) });
    const results = [];
    for (let i = 0; i < 10; i++) results.push(await round(guard, 'mallory', 8_000, 'secret-value'));
    const dropped = events.filter((e) => e.type === 'outcome.dropped');
    const unkept = results.filter((r) => !r.kept).length;
    expect(unkept).toBeGreaterThan(0);
    expect(dropped.length).toBe(unkept);
    for (const event of dropped) {
      expect(event).toMatchObject({
        method: 'tools/call',
        target: 'delete_files',
        codec: 'test',
        round: 2,
        kid: 'k1',
        reason: 'principal_quota',
      });
      expect(event).toMatchObject({ flow: expect.stringMatching(/^[0-9a-f]{16}$/), outcomeBytes: expect.any(Number) });
      const text = JSON.stringify(event);
      for (const secret of ['mallory', 'secret-value', ...results.map((r) => r.token)]) expect(text).not.toContain(secret);
    }
    // A kept outcome is not reported.
    events.length = 0;
    expect((await round(guard, 'alice', 8_000)).kept).toBe(true);
    expect(events.filter((e) => e.type === 'outcome.dropped')).toEqual([]);
  });

  it('outcome.dropped tells too_large (the codec, the store) and store_refused (the store recorded done, not kept)', async () => {
    const events: GuardEvent[] = [];
    const { guard, store } = setup({ onEvent: (e) => events.push(e) });
    const reasons = () => events.filter((e) => e.type === 'outcome.dropped').map((e) => (e as OutcomeDroppedEvent).reason);
    expect((await round(guard, 'alice', 70 * 1024)).kept).toBe(false);
    expect((await round(guard, 'alice', 5 * 1024 * 1024)).kept).toBe(false);
    expect(reasons()).toEqual(['too_large', 'too_large']);
    // The store's outcome budget is full: it records '' and answers false.
    const record = store.record!;
    store.record = async (id, fp) => record(id, fp, '');
    expect((await round(guard, 'alice', 100)).kept).toBe(false);
    expect(reasons()).toEqual(['too_large', 'too_large', 'store_refused']);
    expect(events.at(-1)).toMatchObject({ type: 'outcome.dropped', outcomeBytes: expect.any(Number) });
  });

  it('300 identical retries of a round running elsewhere: one poller, 16 wait, the rest ERR_ROUND_IN_PROGRESS at once; a stalled round is not polled again', async () => {
    const { guard, make, store } = setup({ retryWaitMs: 400 });
    const other = make();
    const token = await guard.mint(null, req());
    const first = await guard.admit(token, req(), yes);
    if (first.replay) throw new Error('first must run');
    const claimsBefore = store.calls.claim;
    // The poller's pauses and its deadline run on fake timers (the guard's `now` does not time waits): the wait of
    // retryWaitMs passes without waiting for it.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    let codes: (MrtrErrorCode | string)[];
    try {
      const all = Promise.all(Array.from({ length: 300 }, () => code(other.admit(token, req(), yes))));
      await vi.advanceTimersByTimeAsync(400);
      codes = await all;
    } finally {
      vi.useRealTimers();
    }
    expect(codes.every((c) => c === 'ERR_ROUND_IN_PROGRESS')).toBe(true);
    // Each retry asked the store once; the one poller at most once per pause of its wait (50, 100, 200 ms…).
    const polls = store.calls.claim - claimsBefore - 300;
    expect(polls).toBeGreaterThanOrEqual(0);
    expect(polls).toBeLessThanOrEqual(4);
    // A retry after the wait ran out: one claim, no polling, in progress at once.
    const before = store.calls.claim;
    expect(await code(other.admit(token, req(), yes))).toBe('ERR_ROUND_IN_PROGRESS');
    expect(store.calls.claim).toBe(before + 1);
    // Once the round records, a retry gets its outcome.
    await first.record({ r: 'done' });
    expect(await other.admit(token, req(), yes)).toMatchObject({ replay: true, outcome: { r: 'done' } });
  });

  it('the waiting bound is per principal: a principal at its bound does not stop another from waiting', async () => {
    const { guard, make } = setup({ retryWaitMs: 60_000, maxWaitingRetries: { perPrincipal: 2 } });
    const other = make();
    const start = async (principal: string) => {
      const token = await guard.mint(null, req({ principal }));
      const first = await guard.admit(token, req({ principal }), yes);
      if (first.replay) throw new Error('first must run');
      return { token, first };
    };
    const m = await start('mallory');
    const waits = [other.admit(m.token, req({ principal: 'mallory' }), yes), other.admit(m.token, req({ principal: 'mallory' }), yes)];
    expect(await code(other.admit(m.token, req({ principal: 'mallory' }), yes))).toBe('ERR_ROUND_IN_PROGRESS');
    const a = await start('alice');
    const aliceWait = other.admit(a.token, req({ principal: 'alice' }), yes);
    await a.first.record({ r: 'alice' });
    expect(await aliceWait).toMatchObject({ replay: true, outcome: { r: 'alice' } });
    await m.first.record({ r: 'mallory' });
    for (const w of waits) expect(await w).toMatchObject({ replay: true, outcome: { r: 'mallory' } });
  });

  it('under the shared unauthenticated principal an outcome is not returned (a copy of a spent state is no oracle) unless opted in', async () => {
    const anonymous = req({ principal: undefined });
    const { guard } = setup({ unauthenticated: { principal: 'anonymous' } });
    const token = await guard.mint(null, anonymous);
    const first = await guard.admit(token, anonymous, { code: '4711' });
    if (first.replay) throw new Error('first must run');
    expect(await first.record({ r: 'the owner’s result' })).toBe(false);
    for (const guess of ['0000', '4711']) expect(await code(guard.admit(token, anonymous, { code: guess }))).toBe('ERR_STATE_REPLAYED');
    // Authenticated principals keep safe retry under the same guard.
    const alice = await guard.mint(null, req());
    const own = await guard.admit(alice, req(), yes);
    if (own.replay) throw new Error('first must run');
    expect(await own.record({ r: 'hers' })).toBe(true);
    expect(await guard.admit(alice, req(), yes)).toMatchObject({ replay: true, outcome: { r: 'hers' } });

    const { guard: optedIn } = setup({ unauthenticated: { principal: 'anonymous', recordOutcomes: true } });
    const t2 = await optedIn.mint(null, anonymous);
    const f2 = await optedIn.admit(t2, anonymous, { code: '4711' });
    if (f2.replay) throw new Error('first must run');
    expect(await f2.record({ r: 'kept' })).toBe(true);
    expect(await optedIn.admit(t2, anonymous, { code: '4711' })).toMatchObject({ replay: true, outcome: { r: 'kept' } });
  });

  it('options: outcomeQuota, maxWaitingRetries and unauthenticated.recordOutcomes are checked', () => {
    expect(() => setup({ outcomeQuota: { maxBytes: 0 } })).toThrow(RangeError);
    expect(() => setup({ outcomeQuota: 'big' as never })).toThrow(TypeError);
    expect(() => setup({ maxWaitingRetries: { perPrincipal: 1.5 } })).toThrow(TypeError);
    expect(() => setup({ maxWaitingRetries: { total: -1 } })).toThrow(RangeError);
    expect(() => setup({ unauthenticated: { principal: 'a', recordOutcomes: 'yes' as never } })).toThrow(TypeError);
  });
});

describe('claimKey: a first-round call by its idempotency key (issue 42)', () => {
  it('runs once per (principal, target, key); the same arguments get the outcome, other arguments a conflict', async () => {
    const events: GuardEvent[] = [];
    const { guard, store } = setup({ onEvent: (e) => void events.push(e) });
    const first = await guard.forRequest(req()).claimKey('k-1');
    expect(first.replay).toBe(false);
    if (first.replay) return;
    expect(first.state.claims.jti).not.toContain('k-1');
    expect(await first.record({ r: 'sent' })).toBe(true);
    const again = await guard.forRequest(req({ arguments: { paths: ['/tmp/a'] } })).claimKey('k-1');
    expect(again).toMatchObject({ replay: true, outcome: { r: 'sent' } });
    expect(await code(guard.forRequest(req({ arguments: { paths: ['/tmp/b'] } })).claimKey('k-1'))).toBe('ERR_IDEMPOTENCY_KEY_CONFLICT');
    expect(events.map((e) => e.type)).toEqual(['state.opened', 'state.retried', 'state.rejected']);
    expect(events[1]).toMatchObject({ keyed: true, round: 1, tokenBytes: 0 });
    expect(events[2]).toMatchObject({ code: 'ERR_IDEMPOTENCY_KEY_CONFLICT', round: 1 });
    // Another principal, another target: other ids.
    for (const other of [req({ principal: 'bob' }), req({ target: 'archive_files' })]) {
      expect((await guard.forRequest(other).claimKey('k-1')).replay).toBe(false);
    }
    expect(store.held.size).toBe(3);
  });

  it('a key is held ttlMs: past it (and the skew) the call runs again', async () => {
    const { guard, clock } = setup({ clockSkewMs: 0 });
    const first = await guard.forRequest(req()).claimKey('k-1', { ttlMs: 1_000 });
    if (!first.replay) await first.record({ r: 1 });
    clock.advance(1_000);
    expect((await guard.forRequest(req()).claimKey('k-1', { ttlMs: 1_000 })).replay).toBe(true);
    clock.advance(1);
    expect((await guard.forRequest(req()).claimKey('k-1', { ttlMs: 1_000 })).replay).toBe(false);
  });

  it('counts against the mint quota; bad keys and lifetimes are misuse', async () => {
    const { guard } = setup({ mintQuota: { max: 1 } });
    await guard.forRequest(req()).claimKey('k-1');
    expect(await code(guard.forRequest(req()).claimKey('k-2'))).toBe('ERR_QUOTA_EXCEEDED');
    const r = guard.forRequest(req({ principal: 'bob' }));
    await expect(r.claimKey('')).rejects.toThrow(TypeError);
    await expect(r.claimKey('a b')).rejects.toThrow(/^GuardRequest\.claimKey: key/);
    await expect(r.claimKey('k', { ttlMs: 999 })).rejects.toThrow(RangeError);
    await expect(r.claimKey('k', { ttlMs: guard.ttlMs + 1 })).rejects.toThrow(RangeError);
  });
});

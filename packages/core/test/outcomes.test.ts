import { describe, expect, it } from 'vitest';
import {
  type ClaimResult,
  KeyRing,
  MrtrError,
  type MrtrErrorCode,
  type ReplayStore,
  type StateGuardOptions,
  createStateGuard,
  generateKey,
} from '../src/index.js';
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
    const plain: ReplayStore = { consume: (id, exp) => full.consume(id, exp), close: async () => {} };
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

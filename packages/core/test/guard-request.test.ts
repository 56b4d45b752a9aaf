import { describe, expect, it, vi } from 'vitest';
import { createStateGuard, generateKey, KeyRing, type RequestContext } from '../src/index.js';
import { createEventSink, type GuardEvent, type MrtrEvent } from '../src/entry-events.js';
import { fakeClock, req, testCodec, testStore } from './helpers.js';

/** A request whose arguments count how often they are read for the binding digest. */
function countedRequest(over: Partial<RequestContext> = {}): { request: RequestContext; digests: () => number } {
  let reads = 0;
  const args = {};
  Object.defineProperty(args, 'path', {
    enumerable: true,
    get: () => {
      reads++;
      return '/tmp/x';
    },
  });
  return { request: req({ arguments: args, ...over }), digests: () => reads };
}

function setup(events?: (e: GuardEvent) => void) {
  const clock = fakeClock();
  const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
  const principal = vi.fn((request: RequestContext) => request.principal);
  const guard = createStateGuard({
    codec: testCodec,
    keys,
    store: testStore(clock.now),
    audience: 'aud-1',
    now: clock.now,
    principal,
    ...(events !== undefined && { onEvent: events }),
  });
  return { keys, guard, principal };
}

describe('guard.forRequest: every check once per request', () => {
  for (const observed of [false, true]) {
    it(`applies the principal policy and digests the binding once for an open and a mint (${observed ? 'with' : 'without'} onEvent)`, async () => {
      const { guard, principal } = setup(observed ? () => {} : undefined);
      // The reads of one binding digest (canonical JSON may read a value more than once).
      const probe = countedRequest();
      await guard.bind(probe.request);
      const perDigest = probe.digests();
      expect(perDigest).toBeGreaterThan(0);
      const first = countedRequest();
      const r1 = guard.forRequest(first.request);
      const { token } = await r1.mintFlow({ step: 1 });
      expect(principal).toHaveBeenCalledTimes(1);
      expect(first.digests()).toBe(perDigest);

      principal.mockClear();
      const second = countedRequest();
      const r2 = guard.forRequest(second.request);
      const state = await r2.admit(token, null);
      if (state.replay) throw new Error('not a retry');
      const next = await r2.mintFlow({ step: 2 }, { continues: state.state });
      expect(next.flow).toEqual({ ...state.state.flow, round: 2 });
      // One policy, one digest for the whole request (each open and each mint used to apply both again).
      expect(principal).toHaveBeenCalledTimes(1);
      expect(second.digests()).toBe(perDigest);
    });
  }

  it('throws ERR_PRINCIPAL_REQUIRED at once, without an event (the caller has opened nothing)', () => {
    const events: GuardEvent[] = [];
    const { guard } = setup((e) => events.push(e));
    expect(() => guard.forRequest(req({ principal: undefined }))).toThrow(expect.objectContaining({ code: 'ERR_PRINCIPAL_REQUIRED' }));
    expect(events).toEqual([]);
  });

  it("takes a principal resolved by the caller as it is: the policy does not run again, and the state is the same principal's", async () => {
    const clock = fakeClock();
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const principal = vi.fn((request: RequestContext) => request.principal);
    const options = { codec: testCodec, keys, store: testStore(clock.now), audience: 'aud-1', now: clock.now, principal };
    const guard = createStateGuard({ ...options, unauthenticated: { principal: 'local' } });
    const minted = await guard.forRequest(req({ principal: 'ignored', resolvedPrincipal: ['p', 'alice'] })).mintFlow({ step: 1 });
    expect(principal).not.toHaveBeenCalled();
    // The same principal resolved by the guard's own policy opens it; another does not.
    await expect(guard.forRequest(req({ principal: 'bob' })).open(minted.token)).rejects.toMatchObject({ code: 'ERR_STATE_PRINCIPAL' });
    const opened = await guard.forRequest(req({ principal: 'alice' })).open(minted.token);
    expect(opened.flow).toEqual(minted.flow);
    // The fixed unauthenticated one, in its own namespace: as if the policy had found no principal.
    const anonymous = await guard.forRequest(req({ resolvedPrincipal: ['u', 'local'] })).mintFlow({ step: 1 });
    await expect(guard.forRequest(req({ principal: 'local' })).open(anonymous.token)).rejects.toMatchObject({
      code: 'ERR_STATE_PRINCIPAL',
    });
    expect((await guard.forRequest(req({ principal: undefined })).open(anonymous.token)).flow).toEqual(anonymous.flow);
  });

  it('refuses a resolved principal its own policy could not give (TypeError)', () => {
    const { guard } = setup();
    const local = createStateGuard({
      codec: testCodec,
      keys: KeyRing.generate(),
      audience: 'aud-1',
      unauthenticated: { principal: 'local' },
    });
    const wrong: unknown[] = [['p', ''], ['p', 1], ['x', 'alice'], ['u', 'other'], 'alice', ['p'], null];
    for (const resolvedPrincipal of wrong) {
      expect(() => local.forRequest(req({ resolvedPrincipal: resolvedPrincipal as never }))).toThrow(TypeError);
    }
    // Under 'reject' there is no fixed principal to be.
    expect(() => guard.forRequest(req({ resolvedPrincipal: ['u', 'local'] }))).toThrow(/resolvedPrincipal/);
  });
});

describe('guard.mintFlow', () => {
  it('returns the token and the flow it started or continued; mint still returns the token alone', async () => {
    const { guard } = setup();
    const first = await guard.mintFlow({ a: 1 }, req());
    expect(first.flow.round).toBe(1);
    const opened = await guard.open(first.token, req());
    expect(opened.flow).toEqual(first.flow);
    const second = await guard.mintFlow({ a: 2 }, req(), { continues: opened });
    expect(second.flow).toEqual({ ...first.flow, round: 2 });
    expect(typeof (await guard.mint({ a: 3 }, req()))).toBe('string');
  });
});

describe('one event path: createEventSink', () => {
  it('is used by the guard as given: one emitter and one flow tagger for the guard and its adapter', async () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const seen: MrtrEvent[] = [];
    const sink = createEventSink<MrtrEvent>(keys, (e) => seen.push(e));
    const guard = createStateGuard({ codec: testCodec, keys, audience: 'aud-1', onEvent: sink });
    const { token, flow } = await guard.mintFlow(null, req());
    await guard.open(token, req());
    expect(seen.map((e) => e.type)).toEqual(['flow.started', 'state.minted', 'state.opened']);
    expect(seen.every((e) => e.flow === sink.flowTag(flow.id))).toBe(true);
  });

  it('is refused when built on another ring', () => {
    const keys = KeyRing.generate();
    const other = createEventSink(KeyRing.generate(), () => {});
    expect(() => createStateGuard({ codec: testCodec, keys, audience: 'a', onEvent: other })).toThrow(/another KeyRing/);
  });
});

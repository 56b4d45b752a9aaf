import { createHmac } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { createStateGuard, generateKey, KeyRing, MrtrError, type RequestContext, type StateGuardOptions } from '../src/index.js';
import { createFlowTagger, type GuardEvent } from '../src/entry-events.js';
import { fakeClock, testCodec, testStore } from './helpers.js';

const SECRET_ARG = 'argument-value-7f3a9c';
const req = (over: Partial<RequestContext> = {}): RequestContext => ({
  method: 'tools/call',
  target: 'delete_files',
  arguments: { paths: [SECRET_ARG] },
  principal: 'alice-principal',
  ...over,
});

function setup(over: Partial<StateGuardOptions> = {}) {
  const clock = fakeClock();
  const secret = generateKey();
  const keys = new KeyRing([{ kid: 'k1', secret }]);
  const store = testStore(clock.now);
  const events: GuardEvent[] = [];
  const guard = createStateGuard({
    codec: testCodec,
    keys,
    store,
    audience: 'aud-1',
    now: clock.now,
    onEvent: (e) => events.push(e),
    ...over,
  });
  return { clock, keys, secret, store, guard, events };
}

/** The events without their timings (checked separately: finite, ≥ 0). */
function shapes(events: GuardEvent[]): Record<string, unknown>[] {
  return events.map((event) => {
    const { durationMs, storeMs, ...rest } = event as GuardEvent & { durationMs?: number; storeMs?: number };
    for (const t of [durationMs, storeMs]) if (t !== undefined) expect(t >= 0 && Number.isFinite(t)).toBe(true);
    return rest;
  });
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
  throw new Error('expected a rejection');
}

const base = { method: 'tools/call', target: 'delete_files', codec: 'test' };

describe('guard events', () => {
  it('reports a full flow: started, minted, opened, minted, opened', async () => {
    const { guard, events, keys } = setup();
    const t1 = await guard.mint({ step: 1 }, req());
    const s1 = await guard.open(t1, req());
    const t2 = await guard.mint({ step: 2 }, req(), { continues: s1 });
    const s2 = await guard.open(t2, req());
    const flow = await createFlowTagger(keys)(s1.flow.id);
    expect(flow).toMatch(/^[0-9a-f]{16}$/);
    expect(s2.flow.id).toBe(s1.flow.id);
    expect(shapes(events)).toEqual([
      { type: 'flow.started', ...base, flow, round: 1, kid: 'k1' },
      { type: 'state.minted', ...base, flow, round: 1, kid: 'k1', tokenBytes: t1.length },
      { type: 'state.opened', ...base, flow, round: 2, kid: 'k1', tokenBytes: t1.length },
      { type: 'state.minted', ...base, flow, round: 2, kid: 'k1', tokenBytes: t2.length },
      { type: 'state.opened', ...base, flow, round: 3, kid: 'k1', tokenBytes: t2.length },
    ]);
    const opened = events.filter((e) => e.type === 'state.opened');
    expect(opened.every((e) => typeof e.storeMs === 'number')).toBe(true);
  });

  it('reports a replay with its flow and round', async () => {
    const { guard, events, keys } = setup();
    const token = await guard.mint(null, req());
    const state = await guard.open(token, req());
    events.length = 0;
    expect(await codeOf(guard.open(token, req()))).toBe('ERR_STATE_REPLAYED');
    const flow = await createFlowTagger(keys)(state.flow.id);
    expect(shapes(events)).toEqual([
      {
        type: 'state.rejected',
        ...base,
        flow,
        round: 2,
        kid: 'k1',
        code: 'ERR_STATE_REPLAYED',
        operation: 'open',
        tokenBytes: token.length,
      },
    ]);
  });

  it('reports a tampered state without flow or round (nothing in it can be trusted)', async () => {
    const { guard, events } = setup();
    const token = await guard.mint(null, req());
    events.length = 0;
    const tampered = `${token.slice(0, -2)}${token.endsWith('AA') ? 'BB' : 'AA'}`;
    expect(await codeOf(guard.open(tampered, req()))).toBe('ERR_STATE_INTEGRITY');
    expect(await codeOf(guard.open(42, req()))).toBe('ERR_STATE_MALFORMED');
    expect(shapes(events)).toEqual([
      { type: 'state.rejected', ...base, code: 'ERR_STATE_INTEGRITY', operation: 'open', tokenBytes: tampered.length },
      { type: 'state.rejected', ...base, code: 'ERR_STATE_MALFORMED', operation: 'open', tokenBytes: undefined },
    ]);
  });

  it('reports a store outage as store.error then state.rejected', async () => {
    const { guard, events, store, keys } = setup();
    const token = await guard.mint(null, req());
    const state = await guard.verify(token, req());
    events.length = 0;
    store.down = true;
    expect(await codeOf(guard.open(token, req()))).toBe('ERR_STORE_UNAVAILABLE');
    const flow = await createFlowTagger(keys)(state.flow.id);
    const got = shapes(events);
    expect(got).toEqual([
      { type: 'store.error', ...base, code: 'ERR_STORE_UNAVAILABLE', flow, round: 2, kid: 'k1' },
      {
        type: 'state.rejected',
        ...base,
        code: 'ERR_STORE_UNAVAILABLE',
        operation: 'open',
        flow,
        round: 2,
        kid: 'k1',
        tokenBytes: token.length,
      },
    ]);
    expect(typeof (events[0] as { storeMs?: unknown }).storeMs).toBe('number');
  });

  it('reports a refused mint (rounds spent) with the flow it continued', async () => {
    const { guard, events } = setup({ maxRounds: 1 });
    const state = await guard.open(await guard.mint(null, req()), req());
    events.length = 0;
    expect(await codeOf(guard.mint(null, req(), { continues: state }))).toBe('ERR_FLOW_ROUNDS');
    expect(shapes(events)).toMatchObject([{ type: 'state.rejected', code: 'ERR_FLOW_ROUNDS', operation: 'mint', round: 2 }]);
  });

  it('never lets a throwing, rejecting or slow hook change or delay the answer', async () => {
    let calls = 0;
    for (const onEvent of [
      () => {
        calls++;
        throw new Error('hook failed');
      },
      () => {
        calls++;
        return Promise.reject(new Error('async hook failed')) as unknown as undefined;
      },
      () => {
        calls++;
        return new Promise(() => {}) as unknown as undefined; // never settles: nothing waits for it
      },
    ]) {
      const { guard } = setup({ onEvent });
      const token = await guard.mint({ ok: true }, req());
      expect((await guard.open(token, req())).data).toEqual({ ok: true });
      expect(await codeOf(guard.open(token, req()))).toBe('ERR_STATE_REPLAYED');
    }
    expect(calls).toBe(3 * 4);
  });

  it('puts no token, key, jti, principal, argument or data in any event', async () => {
    const { guard, events, store, secret, keys } = setup();
    const data = { answer: 'answer-value-51be' };
    const tokens: string[] = [];
    const t1 = await guard.mint(data, req());
    tokens.push(t1);
    const s1 = await guard.open(t1, req());
    const t2 = await guard.mint(data, req(), { continues: s1 });
    tokens.push(t2);
    await codeOf(guard.open(t1, req())); // replay
    await codeOf(guard.open(`${t2}x`, req())); // tamper
    await codeOf(guard.open(t2, req({ arguments: { paths: ['other'] } }))); // binding
    store.down = true;
    await codeOf(guard.open(t2, req())); // outage
    expect(new Set(events.map((e) => e.type))).toEqual(
      new Set(['flow.started', 'state.minted', 'state.opened', 'state.rejected', 'store.error']),
    );
    const text = JSON.stringify(events);
    const subkey = Buffer.from((await keys.subkey('k1', 'test'))!).toString('base64url');
    const secrets = [secret, subkey, SECRET_ARG, 'other', 'alice-principal', data.answer, s1.claims.jti, s1.flow.id, s1.claims.sub];
    for (const token of tokens) secrets.push(token, ...token.split('.').filter((part) => part.length > 8));
    for (const s of secrets) expect(text).not.toContain(s);
  });

  it('validates onEvent and leaves the guard unwrapped without one', () => {
    const keys = KeyRing.generate();
    expect(() => createStateGuard({ codec: testCodec, keys, audience: 'a', onEvent: 1 as never })).toThrow(TypeError);
    const plain = createStateGuard({ codec: testCodec, keys, audience: 'a' });
    const observed = createStateGuard({ codec: testCodec, keys, audience: 'a', onEvent: () => {} });
    expect(plain.open).not.toBe(observed.open);
    expect(plain.open.name).toBe('open');
  });
});

describe('createFlowTagger', () => {
  it('is HMAC-SHA256 under the flow-tag subkey (8 bytes, hex); remembers the last 1024 flows, the oldest dropped first', () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const subkey = keys.subkeySync('k1', 'mrtr/flow-tag/v1')!;
    const expected = (id: string) => createHmac('sha256', subkey).update(id).digest().subarray(0, 8).toString('hex');
    const tag = createFlowTagger(keys);
    const derivations = vi.spyOn(keys, 'subkey');
    const ids = Array.from({ length: 1024 + 10 }, (_, i) => `flow-${i}-\u00e9`);
    for (const id of ids.slice(0, 1024)) expect(tag(id)).toBe(expected(id));
    expect(derivations).toHaveBeenCalledTimes(1024);
    // Remembered: the same answers, nothing derived or hashed again.
    for (const id of ids.slice(0, 1024)) expect(tag(id)).toBe(expected(id));
    expect(derivations).toHaveBeenCalledTimes(1024);
    // Ten more flows push out the ten oldest; those are computed again, with the same answer.
    for (const id of ids.slice(1024)) expect(tag(id)).toBe(expected(id));
    for (const id of ids.slice(0, 10)) expect(tag(id)).toBe(expected(id));
    expect(derivations).toHaveBeenCalledTimes(1024 + 10 + 10);
    expect(tag(ids[1023]!)).toBe(expected(ids[1023]!));
    expect(derivations).toHaveBeenCalledTimes(1024 + 10 + 10);
    // Another ring tags the same flow differently.
    expect(createFlowTagger(new KeyRing([{ kid: 'k1', secret: generateKey() }]))(ids[0]!)).not.toBe(expected(ids[0]!));
  });
});

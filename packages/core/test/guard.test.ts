import { describe, expect, it } from 'vitest';
import { KeyRing, MrtrError, type MrtrErrorCode, type StateGuardOptions, createStateGuard, generateKey } from '../src/index.js';
import { fakeClock, req, testCodec, testStore } from './helpers.js';

function setup(over: Partial<StateGuardOptions> = {}) {
  const clock = fakeClock();
  const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
  const store = testStore(clock.now);
  const guard = createStateGuard({ codec: testCodec, keys, store, audience: 'aud-1', now: clock.now, ...over });
  return { clock, keys, store, guard };
}

async function rejectCode(promise: Promise<unknown>): Promise<MrtrErrorCode> {
  try {
    await promise;
  } catch (error) {
    if (MrtrError.is(error)) return error.code;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('createStateGuard', () => {
  it('mints and opens a state bound to the request', async () => {
    const { guard } = setup();
    const token = await guard.mint({ step: 1 }, req());
    const opened = await guard.open(token, req());
    expect(opened.data).toEqual({ step: 1 });
    expect(opened.flow.round).toBe(1);
    expect(opened.kid).toBe('k1');
    expect(opened.claims.sub).not.toContain('alice');
    expect(Buffer.from(token.split('.')[1]!, 'base64url').toString()).not.toContain('alice');
  });

  it('gives each mint a fresh jti and flow id', async () => {
    const { guard } = setup();
    const a = await guard.verify(await guard.mint(null, req()), req());
    const b = await guard.verify(await guard.mint(null, req()), req());
    expect(a.claims.jti).not.toBe(b.claims.jti);
    expect(a.flow.id).not.toBe(b.flow.id);
    expect(Buffer.from(a.claims.jti, 'base64url')).toHaveLength(16);
  });

  it('treats argument key order as the same request (RFC 8785 digest)', async () => {
    const { guard } = setup();
    const token = await guard.mint(1, req({ arguments: { a: 1, b: [1, { y: 2, x: 1 }] } }));
    await expect(guard.open(token, req({ arguments: { b: [1, { x: 1, y: 2 }], a: 1 } }))).resolves.toBeDefined();
  });

  it.each([
    ['a non-string token', 42, 'ERR_STATE_MALFORMED'],
    ['an empty token', '', 'ERR_STATE_MALFORMED'],
    ['a 1 MiB token (before decoding)', 'x'.repeat(1024 * 1024), 'ERR_STATE_TOO_LARGE'],
    ['a token one byte over the cap', 'x'.repeat(16 * 1024 + 1), 'ERR_STATE_TOO_LARGE'],
    ['garbage', 'not-a-token', 'ERR_STATE_MALFORMED'],
  ])('rejects %s', async (_label, token, code) => {
    const { guard } = setup();
    expect(await rejectCode(guard.open(token, req()))).toBe(code);
  });

  it('rejects a tampered token (integrity)', async () => {
    const { guard } = setup();
    const token = await guard.mint({ ok: true }, req());
    const [kid, body, tag] = token.split('.') as [string, string, string];
    const forged = Buffer.from(Buffer.from(body, 'base64url').toString().replace('true', 'false')).toString('base64url');
    expect(await rejectCode(guard.open(`${kid}.${forged}.${tag}`, req()))).toBe('ERR_STATE_INTEGRITY');
  });

  it('rejects an unknown kid', async () => {
    const a = setup();
    const token = await a.guard.mint(1, req());
    const keys = new KeyRing([{ kid: 'k2', secret: generateKey() }]);
    const other = createStateGuard({ codec: testCodec, keys, audience: 'aud-1', now: a.clock.now });
    expect(await rejectCode(other.open(token, req()))).toBe('ERR_KEY_UNKNOWN');
  });

  it('rejects an expired state, honouring clock skew', async () => {
    const { guard, clock } = setup({ ttlMs: 10_000, clockSkewMs: 1_000 });
    const token = await guard.mint(1, req());
    clock.advance(10_999);
    await expect(guard.verify(token, req())).resolves.toBeDefined();
    clock.advance(2);
    expect(await rejectCode(guard.open(token, req()))).toBe('ERR_STATE_EXPIRED');
  });

  it('rejects a state issued in the future beyond the skew', async () => {
    const { guard, clock } = setup({ clockSkewMs: 1_000 });
    const token = await guard.mint(1, req());
    clock.advance(-1_001);
    expect(await rejectCode(guard.open(token, req()))).toBe('ERR_STATE_EXPIRED');
  });

  it('rejects another audience', async () => {
    const { keys, clock, guard } = setup();
    const token = await guard.mint(1, req());
    const other = createStateGuard({ codec: testCodec, keys, audience: 'aud-2', now: clock.now });
    expect(await rejectCode(other.open(token, req()))).toBe('ERR_STATE_AUDIENCE');
  });

  it("rejects another principal's state", async () => {
    const { guard } = setup();
    const token = await guard.mint(1, req({ principal: 'alice' }));
    expect(await rejectCode(guard.open(token, req({ principal: 'bob' })))).toBe('ERR_STATE_PRINCIPAL');
  });

  it('requires a principal unless unauthenticated requests get a fixed one', async () => {
    const { guard } = setup();
    expect(await rejectCode(guard.mint(1, req({ principal: undefined })))).toBe('ERR_PRINCIPAL_REQUIRED');
    const anon = setup({ unauthenticated: { principal: 'anon' } }).guard;
    const token = await anon.mint(1, req({ principal: undefined }));
    await expect(anon.verify(token, req({ principal: undefined }))).resolves.toBeDefined();
    expect(await rejectCode(anon.open(token, req({ principal: 'alice' })))).toBe('ERR_STATE_PRINCIPAL');
  });

  // Review finding: a custom principal() returning the text the unauthenticated identity used to be
  // namespaced as ("fixed:anon") owned the anonymous states. The two now live in separate namespaces.
  it('keeps the unauthenticated identity apart from every authenticated principal', async () => {
    const { keys, clock } = setup();
    const anon = createStateGuard({ codec: testCodec, keys, audience: 'aud-1', now: clock.now, unauthenticated: { principal: 'anon' } });
    const token = await anon.mint(1, req({ principal: undefined }));
    for (const principal of ['anon', 'fixed:anon', 'u:anon', '\u0000anonymous', '["aud-1","u","anon"]']) {
      expect(await rejectCode(anon.verify(token, req({ principal })))).toBe('ERR_STATE_PRINCIPAL');
    }
    const alice = await anon.mint(1, req({ principal: 'anon' }));
    expect(await rejectCode(anon.verify(alice, req({ principal: undefined })))).toBe('ERR_STATE_PRINCIPAL');
  });

  it('takes the key ring once: a codec built on another ring is refused at start-up', () => {
    const { keys } = setup();
    const other = KeyRing.generate();
    expect(() => createStateGuard({ codec: testCodec(other), keys, audience: 'a' })).toThrow(/another KeyRing/);
    expect(() => createStateGuard({ codec: () => testCodec(other), keys, audience: 'a' })).toThrow(/another KeyRing/);
    expect(() => createStateGuard({ codec: testCodec, keys, audience: 'a' })).not.toThrow();
    expect(() => createStateGuard({ codec: {} as never, keys, audience: 'a' })).toThrow(TypeError);
  });

  it('bounds minting per principal with mintQuota, without touching other principals', async () => {
    const { clock, keys } = setup();
    const guard = createStateGuard({
      codec: testCodec,
      keys,
      audience: 'aud-1',
      now: clock.now,
      mintQuota: { max: 3, windowMs: 60_000, maxPrincipals: 2 },
    });
    for (let i = 0; i < 3; i++) await guard.mint(i, req());
    expect(await rejectCode(guard.mint(4, req()))).toBe('ERR_QUOTA_EXCEEDED');
    await expect(guard.mint(1, req({ principal: 'bob' }))).resolves.toBeTypeOf('string');
    // A third principal while two windows are open: the tracked set is bounded, so it is refused.
    expect(await rejectCode(guard.mint(1, req({ principal: 'carol' })))).toBe('ERR_QUOTA_EXCEEDED');
    // The window is never shorter than a state's lifetime (ttl 600 s + 2 × 5 s skew): at 60 s alice's three
    // states are still alive, so she is still refused; her places free up within a tenth of the window after it.
    clock.advance(60_000);
    expect(await rejectCode(guard.mint(5, req()))).toBe('ERR_QUOTA_EXCEEDED');
    clock.advance(610_000 + 61_000 - 60_000);
    await expect(guard.mint(5, req())).resolves.toBeTypeOf('string');
    await expect(guard.mint(1, req({ principal: 'carol' }))).resolves.toBeTypeOf('string');
    expect(() => createStateGuard({ codec: testCodec, keys, audience: 'a', mintQuota: { max: 0, windowMs: 1 } })).toThrow(RangeError);
    expect(() => createStateGuard({ codec: testCodec, keys, audience: 'a', mintQuota: { windowMs: 1 } as never })).toThrow(TypeError);
  });

  it('reports a codec that cannot seal as ERR_SEAL_FAILED, not as a misuse error', async () => {
    const { keys } = setup();
    const failing = (k: KeyRing) => ({
      ...testCodec(k),
      seal: () => {
        throw new TypeError('codec says no: \ud800');
      },
    });
    const guard = createStateGuard({ codec: failing, keys, audience: 'a', principal: () => 'p' });
    expect(await rejectCode(guard.mint(1, req()))).toBe('ERR_SEAL_FAILED');
  });

  it('reads the principal through the policy function', async () => {
    const { guard } = setup({ principal: (r) => (r.arguments as { user?: string }).user });
    const token = await guard.mint(1, req({ arguments: { user: 'carol' } }));
    await expect(guard.verify(token, req({ arguments: { user: 'carol' } }))).resolves.toBeDefined();
  });

  it('a principal() answering anything but a string or undefined is a labelled TypeError, null included (fail closed)', async () => {
    for (const bad of [null, 42, {}]) {
      const { guard } = setup({ principal: () => bad as never, unauthenticated: { principal: 'anon' } });
      await expect(guard.mint(1, req())).rejects.toThrow(new TypeError('createStateGuard: principal() must return a string'));
    }
    // No name ('' or undefined) is the fixed unauthenticated principal, not an error.
    const { guard } = setup({ principal: () => '', unauthenticated: { principal: 'anon' } });
    await expect(guard.verify(await guard.mint(1, req()), req())).resolves.toBeDefined();
  });

  it.each([
    ['other arguments', req({ arguments: { paths: ['/etc'] } })],
    ['missing arguments', req({ arguments: undefined })],
    ['another tool', req({ target: 'deploy' })],
    ['another method', req({ method: 'prompts/get' })],
  ])('rejects the same state with %s (binding)', async (_label, other) => {
    const { guard } = setup();
    const token = await guard.mint(1, req());
    expect(await rejectCode(guard.open(token, other))).toBe('ERR_STATE_BINDING');
  });

  it('rejects a replayed state and never reports an outage as a replay', async () => {
    const { guard, store } = setup();
    const token = await guard.mint(1, req());
    await guard.open(token, req());
    expect(await rejectCode(guard.open(token, req()))).toBe('ERR_STATE_REPLAYED');
    const fresh = await guard.mint(2, req());
    store.down = true;
    expect(await rejectCode(guard.open(fresh, req()))).toBe('ERR_STORE_UNAVAILABLE');
    store.down = false;
    await expect(guard.open(fresh, req())).resolves.toBeDefined();
  });

  it('keeps the ledger entry until exp + 2 × skew (an instance whose clock lags by the skew still accepts until then)', async () => {
    const calls: [string, number][] = [];
    const store = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: async (id: string, at: number) => {
        calls.push([id, at]);
        return true;
      },
      close: async () => {},
    };
    const { guard } = setup({ store, clockSkewMs: 3_000 });
    const opened = await guard.open(await guard.mint(1, req()), req());
    expect(calls).toEqual([[`aud-1:${opened.claims.jti}`, opened.claims.exp + 6_000]]);
  });

  it('fails closed when the store resolves anything but true', async () => {
    const { guard } = setup({
      store: {
        capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
        consume: async () => 'yes' as unknown as boolean,
        close: async () => {},
      },
    });
    expect(await rejectCode(guard.open(await guard.mint(1, req()), req()))).toBe('ERR_STATE_REPLAYED');
  });

  it('separates verify from consume (consume on commit)', async () => {
    const { guard } = setup();
    const token = await guard.mint(1, req());
    const state = await guard.verify(token, req());
    await guard.verify(token, req());
    await guard.consume(state);
    expect(await rejectCode(guard.consume(state))).toBe('ERR_STATE_REPLAYED');
  });

  it('carries the flow across rounds and rejects an older round once the next is used', async () => {
    const { guard } = setup();
    const r1 = await guard.mint({ round: 1 }, req());
    const s1 = await guard.open(r1, req());
    const r2 = await guard.mint({ round: 2 }, req(), { continues: s1 });
    const s2 = await guard.open(r2, req());
    expect(s2.flow).toEqual({ ...s1.flow, round: 2 });
    expect(await rejectCode(guard.open(r1, req()))).toBe('ERR_STATE_REPLAYED');
  });

  it('enforces maxRounds on mint and on open', async () => {
    const { guard, keys, clock } = setup({ maxRounds: 2 });
    const s1 = await guard.open(await guard.mint(1, req()), req());
    const r2 = await guard.mint(2, req(), { continues: s1 });
    const s2 = await guard.open(r2, req());
    expect(await rejectCode(guard.mint(3, req(), { continues: s2 }))).toBe('ERR_FLOW_ROUNDS');
    // A lenient instance mints round 3; a strict instance with the same keys refuses it on open.
    const lenient = createStateGuard({ codec: testCodec, keys, audience: 'aud-1', now: clock.now, maxRounds: 5 });
    const r3 = await lenient.mint(3, req(), { continues: s2 });
    expect(await rejectCode(guard.open(r3, req()))).toBe('ERR_FLOW_ROUNDS');
  });

  it('enforces the absolute flow deadline set at round 1', async () => {
    const { guard, clock } = setup({ ttlMs: 60_000, flowTtlMs: 100_000, clockSkewMs: 0 });
    let state = await guard.open(await guard.mint(0, req()), req());
    for (let i = 1; i < 3; i++) {
      clock.advance(40_000);
      state = await guard.open(await guard.mint(i, req(), { continues: state }), req());
      expect(state.flow.deadline).toBe(state.claims.iat - 40_000 * i + 100_000);
    }
    clock.advance(20_001);
    expect(await rejectCode(guard.mint(9, req(), { continues: state }))).toBe('ERR_FLOW_EXPIRED');
  });

  it('reports a flow past its deadline as ERR_FLOW_EXPIRED while the round state is still valid', async () => {
    const { guard, clock } = setup({ ttlMs: 60_000, flowTtlMs: 100_000, clockSkewMs: 0 });
    const s1 = await guard.open(await guard.mint(1, req()), req());
    clock.advance(90_000);
    const r2 = await guard.mint(2, req(), { continues: s1 });
    clock.advance(10_001);
    expect(await rejectCode(guard.open(r2, req()))).toBe('ERR_FLOW_EXPIRED');
  });

  it('checks in order: integrity before expiry before audience before principal before binding', async () => {
    const { guard, clock, keys } = setup({ ttlMs: 1000, clockSkewMs: 0 });
    const token = await guard.mint(1, req());
    clock.advance(5000);
    const other = createStateGuard({ codec: testCodec, keys, audience: 'aud-2', now: clock.now, clockSkewMs: 0 });
    // expired AND wrong audience AND wrong principal AND wrong binding → expiry is reported first
    expect(await rejectCode(other.open(token, req({ principal: 'bob', target: 'x' })))).toBe('ERR_STATE_EXPIRED');
    clock.advance(-5000);
    expect(await rejectCode(other.open(token, req({ principal: 'bob', target: 'x' })))).toBe('ERR_STATE_AUDIENCE');
    expect(await rejectCode(guard.open(token, req({ principal: 'bob', target: 'x' })))).toBe('ERR_STATE_PRINCIPAL');
    expect(await rejectCode(guard.open(token, req({ target: 'x' })))).toBe('ERR_STATE_BINDING');
  });

  it('does not consume a state that fails a check', async () => {
    const { guard } = setup();
    const token = await guard.mint(1, req());
    await rejectCode(guard.open(token, req({ principal: 'mallory' })));
    await expect(guard.open(token, req())).resolves.toBeDefined();
  });

  it('keeps payload, principal and keys out of error messages', async () => {
    const { guard } = setup();
    const token = await guard.mint({ secret: 'hunter2' }, req({ principal: 'alice@example.com' }));
    try {
      await guard.open(token, req({ principal: 'bob@example.com' }));
    } catch (error) {
      expect(String((error as Error).message)).not.toMatch(/hunter2|alice|bob|example/);
    }
  });

  it('refuses to mint non-JSON data', async () => {
    const { guard } = setup();
    await expect(guard.mint({ n: Number.NaN } as never, req())).rejects.toThrow(TypeError);
  });

  it('validates its options with labelled TypeError/RangeError', () => {
    const keys = KeyRing.generate();
    const codec = testCodec(keys);
    expect(() => createStateGuard({ codec, keys, audience: '' })).toThrow(TypeError);
    expect(() => createStateGuard({ codec, keys, audience: 'a', ttlMs: 0 })).toThrow(RangeError);
    expect(() => createStateGuard({ codec, keys, audience: 'a', ttlMs: Number.POSITIVE_INFINITY })).toThrow(TypeError);
    expect(() => createStateGuard({ codec, keys, audience: 'a', maxRounds: 0 })).toThrow(RangeError);
    expect(() => createStateGuard({ codec, keys, audience: 'a', clockSkewMs: -1 })).toThrow(RangeError);
    expect(() => createStateGuard({ codec, keys, audience: 'a', maxTokenBytes: 10 ** 9 })).toThrow(RangeError);
    expect(() => createStateGuard({ codec: {} as never, keys, audience: 'a' })).toThrow(TypeError);
    expect(() => createStateGuard({ codec, keys, audience: 'a', store: {} as never })).toThrow(TypeError);
  });

  it('refuses an audience that ends in "#outcome": it would be the outcome audience of the guard named without it', () => {
    const keys = KeyRing.generate();
    const codec = testCodec(keys);
    expect(() => createStateGuard({ codec, keys, audience: 'https://mcp.example.com/mcp#outcome' })).toThrow(
      new TypeError('createStateGuard: audience must not end in "#outcome" (reserved for outcomes)'),
    );
    expect(() => createStateGuard({ codec, keys, audience: '#outcome' })).toThrow(TypeError);
    // Anywhere else in the audience the text is fine.
    expect(() => createStateGuard({ codec, keys, audience: 'a#outcome/b' })).not.toThrow();
  });
});

describe('principal tags (remembered per guard, bounded)', () => {
  it('are the same keyed hash before and after the guard forgets them, for short and long principals', async () => {
    const { createHmac } = await import('node:crypto');
    const { canonicalJson } = await import('../src/util/json.js');
    const { keys, guard } = setup({ store: undefined });
    const subkey = keys.subkeySync('k1', 'mrtr/principal-tag/v1')!;
    const expected = (name: string): string =>
      createHmac('sha256', subkey)
        .update(canonicalJson(['aud-1', 'p', name]))
        .digest()
        .subarray(0, 16)
        .toString('base64url');
    const long = `l${'x'.repeat(300)}`;
    const first = await guard.mint(null, req());
    const firstLong = await guard.mint(null, req({ principal: long }));
    // More principals than the guard remembers: alice's tag is forgotten and derived again.
    for (let i = 0; i < 1100; i++) {
      const name = `user-${i}`;
      const opened = await guard.verify(await guard.mint(null, req({ principal: name })), req({ principal: name }));
      if (i % 250 === 0) expect(opened.claims.sub).toBe(expected(name));
    }
    for (const [token, name] of [
      [first, 'alice'],
      [firstLong, long],
    ] as const) {
      const opened = await guard.verify(token, req({ principal: name }));
      expect(opened.claims.sub).toBe(expected(name));
      expect(await rejectCode(guard.verify(token, req({ principal: 'user-5' })))).toBe('ERR_STATE_PRINCIPAL');
      expect((await guard.verify(await guard.mint(null, req({ principal: name })), req({ principal: name }))).claims.sub).toBe(
        expected(name),
      );
    }
  });
});

describe('principal tags and namespaces', () => {
  it('keeps an authenticated principal and the unauthenticated identity of the same name apart, whichever is tagged first', async () => {
    const { guard } = setup({ store: undefined, unauthenticated: { principal: 'alice' } });
    for (let round = 0; round < 2; round++) {
      const anon = await guard.mint(null, req({ principal: undefined }));
      const alice = await guard.mint(null, req());
      expect((await guard.verify(anon, req({ principal: undefined }))).claims.sub).not.toBe((await guard.verify(alice, req())).claims.sub);
      expect(await rejectCode(guard.verify(anon, req()))).toBe('ERR_STATE_PRINCIPAL');
      expect(await rejectCode(guard.verify(alice, req({ principal: undefined })))).toBe('ERR_STATE_PRINCIPAL');
    }
  });
});

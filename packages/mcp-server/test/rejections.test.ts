import type { ProtocolError } from '@modelcontextprotocol/client';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing, type ReplayStore, type StateCodec } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import { INVALID_STATE_MESSAGE } from '../src/index.js';
import { callTool, connect, fakeClock, fixture, replayed, wireError } from './harness.js';

const yes = { confirm: { action: 'accept', content: { ok: true } } };
const ok = (key: string) => ({ [key]: { action: 'accept', content: { ok: true } } });

/** Every state rejection looks the same on the wire: no oracle. */
function expectOpaque(error: ProtocolError): void {
  expect(error.code).toBe(-32602);
  expect(error.message).toBe(INVALID_STATE_MESSAGE);
  expect(error.data).toEqual({ reason: 'invalid_request_state' });
}

describe('each rejection is opaque on the wire and reported with its own code', () => {
  it("another user's state → ERR_STATE_PRINCIPAL", async () => {
    const f = fixture();
    const alice = await connect(f, { sub: 'alice' });
    const mallory = await connect(f, { sub: 'mallory' });
    const r1 = await callTool(alice, 'delete_files', { path: '/home/alice' });
    expectOpaque(
      await wireError(
        callTool(mallory, 'delete_files', { path: '/home/alice' }, { inputResponses: yes, requestState: r1.requestState as string }),
      ),
    );
    expect(f.rejects).toEqual([{ code: 'ERR_STATE_PRINCIPAL', method: 'tools/call', target: 'delete_files' }]);
    expect(f.effects).toEqual([]);
  });

  it('a token without a subject has no principal: the shared client id never stands in for a user', async () => {
    const f = fixture();
    // Both tokens come from the same client application ("test-client"); only alice's names a user.
    const alice = await connect(f, { sub: 'alice' });
    const r1 = await callTool(alice, 'delete_files', { path: '/x' });
    const noSubject = await connect(f, { sub: '' });
    const error = await wireError(
      callTool(noSubject, 'delete_files', { path: '/x' }, { inputResponses: yes, requestState: r1.requestState as string }),
    );
    expect(error.code).toBe(-32600);
    expect(error.message).toMatch(/^Authentication required: .*authInfo\.extra\.sub/);
    // Not even a first round: without a user there is nothing to bind a state to.
    const fresh = await wireError(callTool(noSubject, 'delete_files', { path: '/y' }));
    expect(fresh.code).toBe(-32600);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_PRINCIPAL_REQUIRED', 'ERR_PRINCIPAL_REQUIRED']);
    expect(f.effects).toEqual([]);
  });

  it('the same state with other arguments → ERR_STATE_BINDING', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/tmp/cache' });
    expectOpaque(
      await wireError(callTool(client, 'delete_files', { path: '/' }, { inputResponses: yes, requestState: r1.requestState as string })),
    );
    expect(f.rejects).toEqual([{ code: 'ERR_STATE_BINDING', method: 'tools/call', target: 'delete_files' }]);
    expect(f.effects).toEqual([]);
  });

  it("another tool's state (same question, same arguments) → ERR_STATE_BINDING", async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'archive_files', { path: '/srv' });
    expectOpaque(
      await wireError(callTool(client, 'delete_files', { path: '/srv' }, { inputResponses: yes, requestState: r1.requestState as string })),
    );
    expect(f.rejects).toEqual([{ code: 'ERR_STATE_BINDING', method: 'tools/call', target: 'delete_files' }]);
    expect(f.effects).toEqual([]);
  });

  it("another method's state (a prompt's state on a tool) → ERR_STATE_BINDING", async () => {
    const f = fixture();
    const client = await connect(f);
    const prompt = (await client.request(
      { method: 'prompts/get', params: { name: 'greeting', arguments: { tone: 'x' } } },
      { allowInputRequired: true },
    )) as Record<string, unknown>;
    expectOpaque(
      await wireError(
        callTool(client, 'delete_files', { path: '/' }, { inputResponses: yes, requestState: prompt.requestState as string }),
      ),
    );
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_BINDING']);
  });

  it('an expired state (fake clock) → ERR_STATE_EXPIRED', async () => {
    const clock = fakeClock();
    const f = fixture({ now: clock.now, ttlMs: 60_000, clockSkewMs: 5_000 });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/a' });
    clock.advance(60_000 + 5_000 + 1);
    expectOpaque(
      await wireError(callTool(client, 'delete_files', { path: '/a' }, { inputResponses: yes, requestState: r1.requestState as string })),
    );
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_EXPIRED']);
    expect(f.effects).toEqual([]);
  });

  it('a state still valid at the edge of the skew window is accepted (control)', async () => {
    const clock = fakeClock();
    const f = fixture({ now: clock.now, ttlMs: 60_000, clockSkewMs: 5_000 });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/a' });
    clock.advance(60_000 + 5_000);
    const done = await callTool(client, 'delete_files', { path: '/a' }, { inputResponses: yes, requestState: r1.requestState as string });
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /a' }]);
  });

  it('a replayed state (with a store) → ERR_STATE_REPLAYED, and the action ran once; an identical retry gets the first result', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/d' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const first = await callTool(client, 'delete_files', { path: '/d' }, params);
    expect(first.content).toEqual([{ type: 'text', text: 'Deleted /d' }]);
    // The same state, principal and answers (a retry after a lost response): the same result, nothing runs again.
    expect(await callTool(client, 'delete_files', { path: '/d' }, params)).toEqual(replayed(first));
    // The same state with other answers is a replay.
    const other = { confirm: { action: 'accept', content: { ok: true } }, extra: { action: 'decline' } };
    expectOpaque(await wireError(callTool(client, 'delete_files', { path: '/d' }, { ...params, inputResponses: other })));
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_REPLAYED']);
    expect(f.effects).toEqual(['deleted /d']);
  });

  it('recordOutcomes: false → an identical retry is a replay too', async () => {
    const f = fixture({ store: createMemoryStore(), recordOutcomes: false });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/d' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    await callTool(client, 'delete_files', { path: '/d' }, params);
    expectOpaque(await wireError(callTool(client, 'delete_files', { path: '/d' }, params)));
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_REPLAYED']);
    expect(f.effects).toEqual(['deleted /d']);
  });

  it('another user retrying with the same answers gets no recorded result → ERR_STATE_PRINCIPAL', async () => {
    const f = fixture({ store: createMemoryStore() });
    const alice = await connect(f, { sub: 'alice' });
    const mallory = await connect(f, { sub: 'mallory' });
    const r1 = await callTool(alice, 'delete_files', { path: '/a' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    await callTool(alice, 'delete_files', { path: '/a' }, params);
    expectOpaque(await wireError(callTool(mallory, 'delete_files', { path: '/a' }, params)));
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_PRINCIPAL']);
    expect(f.effects).toEqual(['deleted /a']);
  });

  it('concurrent identical retries (double submit): the action runs once and every retry gets its result', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/race' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const outcomes = await Promise.all(Array.from({ length: 8 }, () => callTool(client, 'delete_files', { path: '/race' }, params)));
    // One ran; the seven others are its result, marked as replays.
    const fresh = outcomes.filter((o) => !(o._meta as Record<string, unknown>)['dev.mrtr/replayed']);
    expect(fresh).toHaveLength(1);
    for (const o of outcomes) expect(o).toEqual(o === fresh[0] ? fresh[0] : replayed(fresh[0]!));
    expect(outcomes[0]!.content).toEqual([{ type: 'text', text: 'Deleted /race' }]);
    expect(f.effects).toEqual(['deleted /race']);
    expect(f.rejects).toEqual([]);
  });

  it('concurrent retries with one state and different answers: exactly one runs, the others are replays', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/race' });
    const outcomes = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) =>
        callTool(
          client,
          'delete_files',
          { path: '/race' },
          { inputResponses: { ...yes, [`extra${i}`]: { action: 'decline' } }, requestState: r1.requestState as string },
        ),
      ),
    );
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    for (const o of outcomes) if (o.status === 'rejected') expectOpaque(o.reason as ProtocolError);
    expect(f.effects).toEqual(['deleted /race']);
    expect(f.rejects.map((r) => r.code)).toEqual(Array(7).fill('ERR_STATE_REPLAYED'));
  });

  it('without a store the same replay is accepted until expiry (documented limit, control)', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/d' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    await callTool(client, 'delete_files', { path: '/d' }, params);
    await callTool(client, 'delete_files', { path: '/d' }, params);
    expect(f.effects).toEqual(['deleted /d', 'deleted /d']);
  });

  it("an older round's state after the next round was issued → ERR_STATE_REPLAYED (an identical retry gets the same next round)", async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 3 });
    const r2 = await callTool(client, 'steps', { rounds: 3 }, { inputResponses: ok('step1'), requestState: r1.requestState as string });
    expect(Object.keys(r2.inputRequests as object)).toEqual(['step2']);
    // Retried as it was sent: the recorded answer, with the same next state (still single use).
    expect(
      await callTool(client, 'steps', { rounds: 3 }, { inputResponses: ok('step1'), requestState: r1.requestState as string }),
    ).toEqual(replayed(r2));
    // With other answers: a replay.
    const other = { ...ok('step1'), step9: { action: 'decline' } };
    expectOpaque(
      await wireError(callTool(client, 'steps', { rounds: 3 }, { inputResponses: other, requestState: r1.requestState as string })),
    );
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_REPLAYED']);
    // The current round still works.
    const r3 = await callTool(client, 'steps', { rounds: 3 }, { inputResponses: ok('step2'), requestState: r2.requestState as string });
    expect(Object.keys(r3.inputRequests as object)).toEqual(['step3']);
  });

  it('a flow past its deadline → ERR_FLOW_EXPIRED (though the round state itself is fresh)', async () => {
    const clock = fakeClock();
    const f = fixture({ now: clock.now, ttlMs: 600_000, flowTtlMs: 60_000, clockSkewMs: 5_000 });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 3 });
    clock.advance(30_000);
    const r2 = await callTool(client, 'steps', { rounds: 3 }, { inputResponses: ok('step1'), requestState: r1.requestState as string });
    clock.advance(30_000 + 5_000 + 1);
    expectOpaque(
      await wireError(callTool(client, 'steps', { rounds: 3 }, { inputResponses: ok('step2'), requestState: r2.requestState as string })),
    );
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_FLOW_EXPIRED']);
  });

  it('round maxRounds + 1 → ERR_FLOW_ROUNDS', async () => {
    const f = fixture({ maxRounds: 2 });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 5 });
    const r2 = await callTool(client, 'steps', { rounds: 5 }, { inputResponses: ok('step1'), requestState: r1.requestState as string });
    expect(r2.resultType).toBe('input_required');
    // An honest flow that runs out of rounds is told so (its state was genuine), not given the forgery error.
    const error = await wireError(
      callTool(client, 'steps', { rounds: 5 }, { inputResponses: ok('step2'), requestState: r2.requestState as string }),
    );
    expect(error.code).toBe(-32600);
    expect(error.message).toContain('This request ran out of rounds: 2 rounds');
    expect(error.data).toEqual({ reason: 'flow_rounds_exhausted' });
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_FLOW_ROUNDS']);
  });

  it('a state whose round is past this instance’s limit (minted under a higher one) stays opaque → ERR_FLOW_ROUNDS', async () => {
    const keys = KeyRing.generate();
    const generous = fixture({ keys, maxRounds: 5 });
    const strict = fixture({ keys, maxRounds: 2 });
    const client = await connect(generous);
    let r = await callTool(client, 'steps', { rounds: 5 });
    for (const step of ['step1', 'step2']) {
      r = await callTool(client, 'steps', { rounds: 5 }, { inputResponses: ok(step), requestState: r.requestState as string });
    }
    // r carries round 3: opened where the limit is 2 it is refused like any forged state.
    const other = await connect(strict);
    expectOpaque(
      await wireError(callTool(other, 'steps', { rounds: 5 }, { inputResponses: ok('step3'), requestState: r.requestState as string })),
    );
    expect(strict.rejects.map((x) => x.code)).toEqual(['ERR_FLOW_ROUNDS']);
  });

  it('need.maxRounds lets a handler end the flow itself in round maxRounds + 1, with no rejection', async () => {
    const f = fixture({ maxRounds: 2 });
    const client = await connect(f);
    const args = { rounds: 5, stopAtLimit: true };
    const r1 = await callTool(client, 'steps', args);
    const r2 = await callTool(client, 'steps', args, { inputResponses: ok('step1'), requestState: r1.requestState as string });
    expect(r2.resultType).toBe('input_required');
    const r3 = await callTool(client, 'steps', args, { inputResponses: ok('step2'), requestState: r2.requestState as string });
    expect(r3).toMatchObject({ isError: true, content: [{ type: 'text', text: 'out of rounds in round 3' }] });
    expect(f.rejects).toEqual([]);
  });

  it('a 1 MiB state is rejected before any decoding → ERR_STATE_TOO_LARGE', async () => {
    const keys = KeyRing.generate();
    const inner = createHmacCodec(keys);
    let opened = 0;
    const codec: StateCodec = {
      id: inner.id,
      confidential: inner.confidential,
      maxTokenBytes: inner.maxTokenBytes,
      keys,
      seal: (claims) => inner.seal(claims),
      unseal: (token) => {
        opened++;
        return inner.unseal(token);
      },
    };
    const f = fixture({ keys, codec });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/a' });
    const huge = `${r1.requestState as string}${'A'.repeat(1024 * 1024)}`;
    expectOpaque(await wireError(callTool(client, 'delete_files', { path: '/a' }, { inputResponses: yes, requestState: huge })));
    expect(f.rejects).toEqual([{ code: 'ERR_STATE_TOO_LARGE', method: 'tools/call', target: undefined }]);
    expect(opened).toBe(0);
  });

  it('a state sealed under an unknown key → ERR_KEY_UNKNOWN; another audience → ERR_STATE_AUDIENCE', async () => {
    const other = fixture({ keys: KeyRing.generate('k9') });
    const otherClient = await connect(other);
    const foreign = await callTool(otherClient, 'delete_files', { path: '/a' });
    const keys = KeyRing.generate();
    const f = fixture({ keys });
    const sibling = fixture({ keys, audience: 'https://other.test' });
    const client = await connect(f);
    const siblingClient = await connect(sibling);
    const siblingState = await callTool(siblingClient, 'delete_files', { path: '/a' });
    for (const state of [foreign.requestState, siblingState.requestState]) {
      expectOpaque(
        await wireError(callTool(client, 'delete_files', { path: '/a' }, { inputResponses: yes, requestState: state as string })),
      );
    }
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_KEY_UNKNOWN', 'ERR_STATE_AUDIENCE']);
  });

  it('non-token characters are rejected before dispatch → ERR_STATE_MALFORMED', async () => {
    const f = fixture();
    const client = await connect(f);
    for (const state of ['not a token', 'caf\u00e9', '\u0000']) {
      expectOpaque(await wireError(callTool(client, 'delete_files', { path: '/a' }, { inputResponses: yes, requestState: state })));
    }
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_MALFORMED', 'ERR_STATE_MALFORMED', 'ERR_STATE_MALFORMED']);
  });
});

describe('faults and policies that are not tampering', () => {
  it('a store outage answers -32603, never the state rejection, and runs nothing', async () => {
    let calls = 0;
    const down: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: async () => {
        calls++;
        throw new StoreUnavailableError();
      },
      close: async () => {},
    };
    const f = fixture({ store: down });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/o' });
    const error = await wireError(
      callTool(client, 'delete_files', { path: '/o' }, { inputResponses: yes, requestState: r1.requestState as string }),
    );
    expect(error.code).toBe(-32603);
    expect(error.message).not.toBe(INVALID_STATE_MESSAGE);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STORE_UNAVAILABLE']);
    expect(calls).toBe(1);
    expect(f.effects).toEqual([]);
  });

  it('a store that throws a foreign error is also an outage (-32603)', async () => {
    const down: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: () => Promise.reject(new Error('ECONNREFUSED')),
      close: async () => {},
    };
    const f = fixture({ store: down });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/o' });
    const error = await wireError(
      callTool(client, 'delete_files', { path: '/o' }, { inputResponses: yes, requestState: r1.requestState as string }),
    );
    expect(error.code).toBe(-32603);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STORE_UNAVAILABLE']);
  });

  it('a full memory store is a server fault too (-32603, ERR_STORE_FULL)', async () => {
    const f = fixture({ store: createMemoryStore({ maxEntries: 1 }) });
    const client = await connect(f);
    const a = await callTool(client, 'delete_files', { path: '/1' });
    const b = await callTool(client, 'delete_files', { path: '/2' });
    await callTool(client, 'delete_files', { path: '/1' }, { inputResponses: yes, requestState: a.requestState as string });
    const error = await wireError(
      callTool(client, 'delete_files', { path: '/2' }, { inputResponses: yes, requestState: b.requestState as string }),
    );
    expect(error.code).toBe(-32603);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STORE_FULL']);
    expect(f.effects).toEqual(['deleted /1']);
  });

  it('a state that would outgrow maxTokenBytes fails the call with -32603 (server fault, not the client)', async () => {
    const f = fixture({ maxTokenBytes: 2048 });
    const client = await connect(f, { capabilities: { sampling: {}, elicitation: {} } });
    const r1 = await callTool(client, 'summarise', { topic: 't' });
    expect((r1.requestState as string).length).toBeLessThanOrEqual(2048);
    // The style answer is valid and carried in the next state (the draft is still missing): too big to seal.
    const error = await wireError(
      callTool(
        client,
        'summarise',
        { topic: 't' },
        { inputResponses: { style: { action: 'accept', content: { style: 'x'.repeat(4000) } } }, requestState: r1.requestState as string },
      ),
    );
    expect(error.code).toBe(-32603);
    // A state the server itself could not seal is a server fault (the cause says why: it outgrew the cap).
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_SEAL_FAILED']);
  });

  it('unauthenticated requests are rejected by default (-32600), or use the configured principal', async () => {
    const strict = fixture();
    const anonymous = await connect(strict, { sub: null });
    const error = await wireError(callTool(anonymous, 'delete_files', { path: '/u' }));
    expect(error.code).toBe(-32600);
    expect(strict.rejects.map((r) => r.code)).toEqual(['ERR_PRINCIPAL_REQUIRED']);

    const local = fixture({ unauthenticated: { principal: 'local' } });
    const localClient = await connect(local, { sub: null });
    const r1 = await callTool(localClient, 'delete_files', { path: '/u' });
    const done = await callTool(
      localClient,
      'delete_files',
      { path: '/u' },
      { inputResponses: yes, requestState: r1.requestState as string },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /u' }]);
    // The fixed principal is not the same as an authenticated user who happens to be called "local".
    const named = await connect(local, { sub: 'local' });
    expectOpaque(
      await wireError(callTool(named, 'delete_files', { path: '/u' }, { inputResponses: yes, requestState: r1.requestState as string })),
    );
  });

  it('a custom principal function decides who the user is', async () => {
    const f = fixture({ principal: (ctx) => ctx.http?.authInfo?.token });
    const a = await connect(f, { sub: 'same' });
    const r1 = await callTool(a, 'delete_files', { path: '/c' });
    // Same token → same principal even from another connection.
    const b = await connect(f, { sub: 'same' });
    const done = await callTool(b, 'delete_files', { path: '/c' }, { inputResponses: yes, requestState: r1.requestState as string });
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /c' }]);
  });
});

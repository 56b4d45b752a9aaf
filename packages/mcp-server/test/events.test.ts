import { createMemoryStore } from '@mrtr/store-memory';
import type { ReplayStore } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { describe, expect, it } from 'vitest';
import type { MrtrEvent } from '../src/index.js';
import { callTool, connect, fixture, replayed } from './harness.js';

const ok = (key: string) => ({ [key]: { action: 'accept', content: { ok: true } } });
const base = { method: 'tools/call', target: 'steps', codec: 'hmac' };

/** Events without timings (each checked finite and ≥ 0). */
function shapes(events: MrtrEvent[]): Record<string, unknown>[] {
  return events.map((event) => {
    const { durationMs, storeMs, ...rest } = event as MrtrEvent & { durationMs?: number; storeMs?: number };
    for (const t of [durationMs, storeMs]) if (t !== undefined) expect(t >= 0 && Number.isFinite(t)).toBe(true);
    return rest;
  });
}

async function fails(promise: Promise<unknown>): Promise<void> {
  await expect(promise).rejects.toThrow();
}

describe('onEvent', () => {
  it('reports a full two-question flow, step by step', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 2 });
    const r2 = await callTool(client, 'steps', { rounds: 2 }, { requestState: r1.requestState as string, inputResponses: ok('step1') });
    const r3 = await callTool(client, 'steps', { rounds: 2 }, { requestState: r2.requestState as string, inputResponses: ok('step2') });
    expect(r3.content).toEqual([{ type: 'text', text: 'done in round 3' }]);
    const t1 = (r1.requestState as string).length;
    const t2 = (r2.requestState as string).length;
    const flow = (f.events[0] as { flow: string }).flow;
    expect(flow).toMatch(/^[0-9a-f]{16}$/);
    const at = { ...base, flow, kid: f.keys.primaryKid };
    const answer = { key: '', kind: 'elicitation.form', reason: 'answered' };
    expect(shapes(f.events)).toEqual([
      { type: 'flow.started', ...at, round: 1 },
      { type: 'state.minted', ...at, round: 1, tokenBytes: t1 },
      { type: 'state.opened', ...at, round: 2, tokenBytes: t1 },
      { type: 'answer.accepted', ...at, round: 2, ...answer, key: 'step1' },
      { type: 'state.minted', ...at, round: 2, tokenBytes: t2 },
      { type: 'state.opened', ...at, round: 3, tokenBytes: t2 },
      { type: 'answer.accepted', ...at, round: 3, ...answer, key: 'step2' },
      { type: 'flow.completed', ...at, round: 3 },
    ]);
    expect(f.rejects).toEqual([]);
  });

  it('reports ignored answers with why (not asked yet, invalid)', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 }, { inputResponses: ok('step1') });
    await callTool(
      client,
      'steps',
      { rounds: 1 },
      {
        requestState: r1.requestState as string,
        inputResponses: { step1: { action: 'accept', content: { ok: 'not a boolean' } } },
      },
    );
    const answers = f.events.filter((e) => e.type.startsWith('answer.'));
    expect(shapes(answers)).toMatchObject([
      { type: 'answer.ignored', key: 'step1', reason: 'not_asked', round: 1, flow: undefined },
      { type: 'answer.ignored', key: 'step1', reason: 'invalid', round: 2 },
    ]);
  });

  it('reports a replay once: a state.rejected with its flow, and onReject as sugar', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 });
    const again = { requestState: r1.requestState as string, inputResponses: ok('step1') };
    await callTool(client, 'steps', { rounds: 1 }, again);
    f.events.length = 0;
    // The same state with other answers (an identical retry would get the first result: see below).
    await fails(callTool(client, 'steps', { rounds: 1 }, { ...again, inputResponses: { ...ok('step1'), other: { action: 'decline' } } }));
    expect(shapes(f.events)).toEqual([
      {
        type: 'state.rejected',
        ...base,
        flow: expect.stringMatching(/^[0-9a-f]{16}$/),
        round: 2,
        kid: f.keys.primaryKid,
        code: 'ERR_STATE_REPLAYED',
        operation: 'open',
        tokenBytes: (r1.requestState as string).length,
      },
    ]);
    expect(f.rejects).toEqual([{ code: 'ERR_STATE_REPLAYED', method: 'tools/call', target: 'steps' }]);
  });

  it('reports an identical retry as state.retried (nothing runs again, no rejection)', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 });
    const again = { requestState: r1.requestState as string, inputResponses: ok('step1') };
    const first = await callTool(client, 'steps', { rounds: 1 }, again);
    f.events.length = 0;
    expect(await callTool(client, 'steps', { rounds: 1 }, again)).toEqual(replayed(first));
    expect(shapes(f.events)).toEqual([
      {
        type: 'state.retried',
        ...base,
        flow: expect.stringMatching(/^[0-9a-f]{16}$/),
        round: 2,
        kid: f.keys.primaryKid,
        tokenBytes: (r1.requestState as string).length,
      },
    ]);
    expect(f.rejects).toEqual([]);
  });

  it('reports a tampered state and an early refusal (before dispatch) once each', async () => {
    const f = fixture();
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 });
    const token = r1.requestState as string;
    f.events.length = 0;
    const flipped = `${token.slice(0, 10)}${token[10] === 'A' ? 'B' : 'A'}${token.slice(11)}`;
    await fails(callTool(client, 'steps', { rounds: 1 }, { requestState: flipped, inputResponses: ok('step1') }));
    await fails(callTool(client, 'steps', { rounds: 1 }, { requestState: 'x'.repeat(70_000) }));
    expect(shapes(f.events)).toEqual([
      { type: 'state.rejected', ...base, code: 'ERR_STATE_INTEGRITY', operation: 'open', tokenBytes: token.length },
      { type: 'state.rejected', ...base, target: undefined, code: 'ERR_STATE_TOO_LARGE', operation: 'open', tokenBytes: 70_000 },
    ]);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_INTEGRITY', 'ERR_STATE_TOO_LARGE']);
  });

  it('reports a store outage as store.error then state.rejected', async () => {
    const down: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: async () => {
        throw new StoreUnavailableError();
      },
      close: async () => {},
    };
    const f = fixture({ store: down });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 });
    f.events.length = 0;
    await fails(callTool(client, 'steps', { rounds: 1 }, { requestState: r1.requestState as string, inputResponses: ok('step1') }));
    expect(shapes(f.events).map((e) => [e.type, e.code, e.round])).toEqual([
      ['store.error', 'ERR_STORE_UNAVAILABLE', 2],
      ['state.rejected', 'ERR_STORE_UNAVAILABLE', 2],
    ]);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STORE_UNAVAILABLE']);
  });

  it('a throwing or never-settling hook changes nothing', async () => {
    for (const onEvent of [
      () => {
        throw new Error('boom');
      },
      () => new Promise<never>(() => {}) as unknown as undefined,
    ]) {
      const f = fixture({ store: createMemoryStore(), onEvent });
      const client = await connect(f);
      const r1 = await callTool(client, 'steps', { rounds: 1 });
      const r2 = await callTool(client, 'steps', { rounds: 1 }, { requestState: r1.requestState as string, inputResponses: ok('step1') });
      expect(r2.content).toEqual([{ type: 'text', text: 'done in round 2' }]);
      expect(f.events.map((e) => e.type)).toEqual(['flow.started', 'state.minted', 'state.opened', 'answer.accepted', 'flow.completed']);
    }
  });

  it('puts no token, key, principal, argument value or answer in any event', async () => {
    const f = fixture({ store: createMemoryStore() });
    const client = await connect(f, { sub: 'alice-sub-93c1' });
    const path = '/secret/path-4d2e';
    const r1 = await callTool(client, 'keep_text', { text: path });
    const answer = { note: { action: 'accept', content: { note: 'answer-text-8b0f' } } };
    const state = r1.requestState as string;
    await callTool(client, 'keep_text', { text: path }, { requestState: state, inputResponses: answer });
    await callTool(client, 'keep_text', { text: path }, { requestState: state, inputResponses: answer });
    await fails(
      callTool(client, 'keep_text', { text: path }, { requestState: state, inputResponses: { ...answer, other: { action: 'decline' } } }),
    );
    await fails(callTool(client, 'keep_text', { text: 'other-arg-77aa' }, { requestState: `${state}A`, inputResponses: answer }));
    const types = new Set(f.events.map((e) => e.type));
    expect(types).toEqual(
      new Set(['flow.started', 'state.minted', 'state.opened', 'answer.accepted', 'flow.completed', 'state.retried', 'state.rejected']),
    );
    const text = JSON.stringify(f.events);
    for (const secret of [
      path,
      'answer-text-8b0f',
      'alice-sub-93c1',
      'other-arg-77aa',
      state,
      ...state.split('.').filter((p) => p.length > 8),
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  it('without onEvent the guard is the bare one and onReject still reports', async () => {
    const f = fixture({ events: false, store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 });
    const again = { requestState: r1.requestState as string, inputResponses: ok('step1') };
    await callTool(client, 'steps', { rounds: 1 }, again);
    await fails(callTool(client, 'steps', { rounds: 1 }, { ...again, inputResponses: { ...ok('step1'), other: { action: 'decline' } } }));
    expect(f.events).toEqual([]);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_REPLAYED']);
  });
});

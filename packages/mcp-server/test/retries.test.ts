import type { ReplayStore } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it, vi } from 'vitest';
import * as z from 'zod/v4';
import { INVALID_STATE_MESSAGE, REPLAYED_META, ROUND_IN_PROGRESS_MESSAGE } from '../src/index.js';
import { callTool, connect, type Fixture, fixture, replayed, type Setup, wireError } from './harness.js';

// Issue 20: an identical retry of a round whose response was lost (the same state, principal and answers) gets
// the response the round produced the first time, and the handler does not run again.

const yes = { confirm: { action: 'accept', content: { ok: true } } };
const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } as const;

/** A deferred the test resolves: the handler's final round waits on it. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

/**
 * The harness fixture plus `slow_delete` (its final round signals `started`, then waits for the gate) and
 * `fragile` (its final round records an effect, then throws), and `big` (a result too large to keep).
 */
function withTools(setup: Setup) {
  const f: Fixture = fixture(setup);
  const first = f.buildServer;
  let started = gate();
  let release = gate();
  f.buildServer = () => {
    const server = first();
    f.mrtr.registerTool(server, 'slow_delete', { inputSchema: z.object({ path: z.string() }) }, async ({ path }, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      started.open();
      await release.opened;
      f.effects.push(`deleted ${path}`);
      return { content: [{ type: 'text', text: `Deleted ${path}` }] };
    });
    f.mrtr.registerTool(server, 'fragile', {}, async (_args, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: 'Go?', requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      f.effects.push('half done');
      throw new Error('disk full after the first half');
    });
    f.mrtr.registerTool(server, 'big', {}, async (_args, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: 'Go?', requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      f.effects.push('big');
      return { content: [{ type: 'text', text: 'x'.repeat(64 * 1024) }] };
    });
    return server;
  };
  return {
    f,
    get started() {
      return started.opened;
    },
    release: () => release.open(),
    reset() {
      started = gate();
      release = gate();
    },
  };
}

describe('identical retries get the first answer (issue 20)', () => {
  it('a retry while the first attempt runs waits for it and gets its result; the handler runs once', async () => {
    const t = withTools({ store: createMemoryStore() });
    const client = await connect(t.f);
    const r1 = await callTool(client, 'slow_delete', { path: '/a' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const attempt = callTool(client, 'slow_delete', { path: '/a' }, params);
    await t.started;
    // The first attempt holds the round: this retry waits for it (retryWaitMs, 10 s by default).
    const retry = callTool(client, 'slow_delete', { path: '/a' }, params);
    t.release();
    const [a, b] = await Promise.all([attempt, retry]);
    expect(a.content).toEqual([{ type: 'text', text: 'Deleted /a' }]);
    // The retry's answer is the first one's, marked as a replay (issue 42).
    expect(b).toEqual(replayed(a));
    expect(a._meta).not.toHaveProperty([REPLAYED_META]);
    expect(t.f.effects).toEqual(['deleted /a']);
    expect(t.f.rejects).toEqual([]);
    expect(t.f.events.filter((e) => e.type === 'state.retried')).toHaveLength(1);
  });

  it('with retryWaitMs 0 a retry while the first attempt runs gets -32600 round_in_progress, then the result', async () => {
    const t = withTools({ store: createMemoryStore(), retryWaitMs: 0 });
    const client = await connect(t.f);
    const r1 = await callTool(client, 'slow_delete', { path: '/b' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const attempt = callTool(client, 'slow_delete', { path: '/b' }, params);
    await t.started;
    const busy = await wireError(callTool(client, 'slow_delete', { path: '/b' }, params));
    expect([busy.code, busy.message, busy.data]).toEqual([
      -32600,
      ROUND_IN_PROGRESS_MESSAGE,
      { reason: 'round_in_progress', retryAfterMs: 1000 },
    ]);
    t.release();
    const first = await attempt;
    expect(await callTool(client, 'slow_delete', { path: '/b' }, params)).toEqual(replayed(first));
    expect(t.f.effects).toEqual(['deleted /b']);
    expect(t.f.rejects.map((r) => r.code)).toEqual(['ERR_ROUND_IN_PROGRESS']);
  });

  it('a handler that threw: the retry gets the same error result, and nothing runs again', async () => {
    const t = withTools({ store: createMemoryStore() });
    const client = await connect(t.f);
    const r1 = await callTool(client, 'fragile', {});
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const first = await callTool(client, 'fragile', {}, params);
    expect(first.isError).toBe(true);
    expect(JSON.stringify(first.content)).toContain('disk full after the first half');
    expect(await callTool(client, 'fragile', {}, params)).toEqual(first);
    expect(t.f.effects).toEqual(['half done']);
  });

  it('a wire error is recorded too: a round that ran out of rounds answers its retry the same way', async () => {
    const f = fixture({ store: createMemoryStore(), maxRounds: 2 });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 5 });
    const step1 = { step1: { action: 'accept', content: { ok: true } } };
    const r2 = await callTool(client, 'steps', { rounds: 5 }, { inputResponses: step1, requestState: r1.requestState as string });
    const params = { inputResponses: { step2: { action: 'accept', content: { ok: true } } }, requestState: r2.requestState as string };
    const first = await wireError(callTool(client, 'steps', { rounds: 5 }, params));
    const again = await wireError(callTool(client, 'steps', { rounds: 5 }, params));
    expect([again.code, again.message, again.data]).toEqual([first.code, first.message, first.data]);
    expect(first.data).toEqual({ reason: 'flow_rounds_exhausted' });
    // Reported once: the retry is not a second rejection.
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_FLOW_ROUNDS']);
  });

  it('a result too large for the codec is not kept: its retry is a replay, and the handler still ran once', async () => {
    const t = withTools({ store: createMemoryStore() });
    const client = await connect(t.f);
    const r1 = await callTool(client, 'big', {});
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    const first = await callTool(client, 'big', {}, params);
    expect(JSON.stringify(first.content).length).toBeGreaterThan(64 * 1024);
    const error = await wireError(callTool(client, 'big', {}, params));
    expect([error.code, error.message]).toEqual([-32602, INVALID_STATE_MESSAGE]);
    expect(t.f.effects).toEqual(['big']);
    expect(t.f.rejects.map((r) => r.code)).toEqual(['ERR_STATE_REPLAYED']);
  });

  it('a store without claim/record: every retry is a replay (single use still holds)', async () => {
    const memory = createMemoryStore();
    const plain: ReplayStore = {
      capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
      consume: (id, exp) => memory.consume(id, exp),
      close: () => memory.close(),
    };
    const f = fixture({ store: plain });
    const client = await connect(f);
    const r1 = await callTool(client, 'delete_files', { path: '/p' });
    const params = { inputResponses: yes, requestState: r1.requestState as string };
    await callTool(client, 'delete_files', { path: '/p' }, params);
    const error = await wireError(callTool(client, 'delete_files', { path: '/p' }, params));
    expect(error.code).toBe(-32602);
    expect(f.effects).toEqual(['deleted /p']);
  });

  it('warns once at start when recordOutcomes is on but the store cannot record (a store written from the guide)', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    try {
      const consumeOnly: ReplayStore = {
        capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
        consume: async () => true,
        close: async () => {},
      };
      fixture({ store: consumeOnly });
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/does not record outcomes.*recordOutcomes: false/);
      fixture({ store: consumeOnly, recordOutcomes: false });
      fixture({ store: createMemoryStore() });
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      warn.mockRestore();
    }
  });

  it('recordOutcomes must be a boolean and retryWaitMs an integer in 0..600000', async () => {
    expect(() => fixture({ recordOutcomes: 'yes' as never })).toThrow(TypeError);
    expect(() => fixture({ store: createMemoryStore(), retryWaitMs: -1 })).toThrow(RangeError);
    expect(() => fixture({ store: createMemoryStore(), retryWaitMs: 600_001 })).toThrow(RangeError);
  });
});

import { type KeyRing, KeyRing as Ring, type ReplayStore } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import * as z from 'zod/v4';
import { callTool, connect, type Fixture, fakeClock, fixture, wireError, cutOff } from './harness.js';

// A round whose instance dies between its effect and its record: the identical retry is told "outcome unknown"
// (at-most-once), unless the tool opts in to at-least-once (`reclaim: true`), which runs it again with the next fence.

const yes = { confirm: { action: 'accept', content: { ok: true } } };
const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } as const;

/** An instance on the shared store: its `send` tool (reclaim as given) logs the fence and, when `hang`, never returns. */
function instance(keys: KeyRing, store: ReplayStore, now: () => number, reclaim: boolean, runs: number[], hang: boolean): Fixture {
  const f = fixture({ keys, store, now, leaseMs: 300, allowEphemeralKeys: true });
  const base = f.buildServer;
  f.buildServer = () => {
    const server = base();
    f.mrtr.registerTool(server, 'send', { inputSchema: z.object({ to: z.string() }), reclaim }, async ({ to }, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: `Send to ${to}?`, requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      runs.push(need.fence);
      if (hang) await new Promise(() => {});
      return { content: [{ type: 'text', text: `sent to ${to} (fence ${need.fence})` }] };
    });
    return server;
  };
  return f;
}

async function strandedRound(reclaim: boolean): Promise<{ retry: Promise<Record<string, unknown>>; runs: number[] }> {
  const clock = fakeClock();
  const store = createMemoryStore({ now: clock.now });
  const keys = Ring.generate();
  const runs: number[] = [];
  const a = await connect(instance(keys, cutOff(store), clock.now, reclaim, runs, true));
  const b = await connect(instance(keys, store, clock.now, reclaim, runs, false));
  const r1 = await callTool(a, 'send', { to: 'bob' });
  const round = { inputResponses: yes, requestState: r1.requestState as string };
  // A runs the round and never answers (it died after the effect, before the record).
  void callTool(a, 'send', { to: 'bob' }, round).catch(() => {});
  for (let i = 0; i < 100 && runs.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 5));
  expect(runs).toEqual([0]);
  clock.advance(400);
  return { retry: callTool(b, 'send', { to: 'bob' }, round), runs };
}

describe('a round whose instance died between its effect and its record', () => {
  it('at-most-once (the default): the identical retry is told "outcome unknown" and nothing runs again', async () => {
    const { retry, runs } = await strandedRound(false);
    const error = await wireError(retry);
    expect([error.code, error.data]).toEqual([-32600, { reason: 'outcome_unknown' }]);
    expect(runs).toEqual([0]);
  });

  it('reclaim: true (at-least-once): the identical retry runs the round again with fence 1', async () => {
    const { retry, runs } = await strandedRound(true);
    expect(((await retry).content as { text: string }[])[0]!.text).toBe('sent to bob (fence 1)');
    expect(runs).toEqual([0, 1]);
  });

  it('reclaim must be a boolean', () => {
    const f = fixture();
    const server = f.buildServer();
    expect(() => f.mrtr.registerTool(server, 'x', { reclaim: 'yes' as never }, async () => ({ content: [] }))).toThrow(TypeError);
  });
});

import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/client';
import type { ReplayStore } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import * as z from 'zod/v4';
import {
  IDEMPOTENCY_KEY_META,
  IDEMPOTENCY_META,
  INVALID_KEY_MESSAGE,
  REPLAYED_META,
  ROUND_IN_PROGRESS_MESSAGE,
  type ToolConfig,
} from '../src/index.js';
import { createHttpHandler } from '../src/http/index.js';
import { callTool, connect, type Fixture, fakeClock, fixture, replayed, type Setup, wireError } from './harness.js';

// Issue 42: idempotency keys for first-round calls, and the replay marker.

const yes = { confirm: { action: 'accept', content: { ok: true } } };
const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } as const;
const email = { to: 'bob@example.com', subject: 'Hi' };

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

/**
 * The harness fixture plus keyed tools: `send_email` (asks nothing; its result carries a fresh message id),
 * `slow_email` (signals `started`, waits for the gate), `keyed_delete` (asks a question first), `flaky` (a tool error
 * the first time), and `plain_email` (not keyed).
 */
function withKeys(setup: Setup, idempotency: ToolConfig['idempotency'] = true) {
  const f: Fixture = fixture(setup);
  const first = f.buildServer;
  const started = gate();
  const release = gate();
  let flakyRuns = 0;
  const send = (to: string) => {
    f.effects.push(`sent ${to}`);
    return { content: [{ type: 'text' as const, text: `message ${randomUUID()} sent to ${to}` }] };
  };
  const input = z.object({ to: z.string(), subject: z.string() });
  f.buildServer = () => {
    const server = first();
    f.mrtr.registerTool(server, 'send_email', { inputSchema: input, idempotency }, async ({ to }) => send(to));
    f.mrtr.registerTool(server, 'plain_email', { inputSchema: input }, async ({ to }) => send(to));
    f.mrtr.registerTool(server, 'slow_email', { inputSchema: input, idempotency }, async ({ to }) => {
      started.open();
      await release.opened;
      return send(to);
    });
    f.mrtr.registerTool(
      server,
      'keyed_delete',
      { inputSchema: z.object({ path: z.string() }), idempotency },
      async ({ path }, _ctx, need) => {
        const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
        if (!confirm) return need.ask();
        f.effects.push(`deleted ${path}`);
        return { content: [{ type: 'text', text: `Deleted ${path}` }] };
      },
    );
    f.mrtr.registerTool(server, 'flaky', { inputSchema: input, idempotency }, async ({ to }) => {
      flakyRuns++;
      if (flakyRuns === 1) return { isError: true, content: [{ type: 'text', text: 'mail server busy' }] };
      return send(to);
    });
    return server;
  };
  return { f, started: started.opened, release: release.open };
}

const keyed = (key: string) => ({ _meta: { [IDEMPOTENCY_KEY_META]: key } }) as never;
const call = (client: Client, tool: string, args: Record<string, unknown>, key?: string, extra: Record<string, unknown> = {}) =>
  callTool(client, tool, args, { ...(key === undefined ? {} : keyed(key)), ...extra });
const isReplayed = (result: Record<string, unknown>) => (result._meta as Record<string, unknown> | undefined)?.[REPLAYED_META] === true;

describe('idempotency keys on first-round calls (issue 42)', () => {
  it('runs the first call, and answers an equivalent retry from the record, marked, without running again', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f);
    const a = await call(client, 'send_email', email, 'k-1');
    expect(isReplayed(a)).toBe(false);
    const b = await call(client, 'send_email', { subject: 'Hi', to: 'bob@example.com' }, 'k-1');
    expect(b).toEqual(replayed(a));
    expect(f.effects).toEqual(['sent bob@example.com']);
    const retried = f.events.filter((e) => e.type === 'state.retried');
    expect(retried).toHaveLength(1);
    expect(retried[0]).toMatchObject({ method: 'tools/call', target: 'send_email', round: 1, keyed: true, tokenBytes: 0 });
    // Another key, or no key, is another call.
    expect(isReplayed(await call(client, 'send_email', email, 'k-2'))).toBe(false);
    expect(isReplayed(await call(client, 'send_email', email))).toBe(false);
    expect(f.effects).toHaveLength(3);
    expect(f.rejects).toEqual([]);
  });

  it('refuses the same key with other arguments: opaque -32602 on the wire, ERR_IDEMPOTENCY_KEY_CONFLICT to onReject', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f);
    await call(client, 'send_email', email, 'k-1');
    const refused = await wireError(call(client, 'send_email', { ...email, subject: 'Other' }, 'k-1'));
    expect([refused.code, refused.message, refused.data]).toEqual([-32602, INVALID_KEY_MESSAGE, undefined]);
    expect(f.rejects).toEqual([{ code: 'ERR_IDEMPOTENCY_KEY_CONFLICT', method: 'tools/call', target: 'send_email' }]);
    expect(f.events.find((e) => e.type === 'state.rejected')).toMatchObject({ code: 'ERR_IDEMPOTENCY_KEY_CONFLICT', round: 1 });
    expect(f.effects).toEqual(['sent bob@example.com']);
  });

  it('keys are per principal and per tool: the same key elsewhere is another call', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const alice = await connect(f);
    const bob = await connect(f, { sub: 'bob' });
    const a = await call(alice, 'send_email', email, 'k-1');
    const b = await call(bob, 'send_email', email, 'k-1');
    const c = await call(alice, 'keyed_delete', { path: '/a' }, 'k-1');
    expect(isReplayed(b)).toBe(false);
    expect(b.content).not.toEqual(a.content);
    expect([c.resultType, isReplayed(c)]).toEqual(['input_required', false]);
    expect(f.effects).toHaveLength(2);
    expect(f.rejects).toEqual([]);
  });

  it('a retry while the first call runs gets -32600 round_in_progress with a retry-after, then the recorded result', async () => {
    const t = withKeys({ store: createMemoryStore(), retryWaitMs: 0 });
    const client = await connect(t.f);
    const attempt = call(client, 'slow_email', email, 'k-1');
    await t.started;
    const busy = await wireError(call(client, 'slow_email', email, 'k-1'));
    expect([busy.code, busy.message, busy.data]).toEqual([
      -32600,
      ROUND_IN_PROGRESS_MESSAGE,
      { reason: 'round_in_progress', retryAfterMs: 1000 },
    ]);
    t.release();
    const first = await attempt;
    expect(await call(client, 'slow_email', email, 'k-1')).toEqual(replayed(first));
    expect(t.f.effects).toEqual(['sent bob@example.com']);
    expect(t.f.rejects.map((r) => r.code)).toEqual(['ERR_ROUND_IN_PROGRESS']);
  });

  it('over createHttpHandler, the round_in_progress answer also carries HTTP Retry-After (seconds), status 200', async () => {
    const t = withKeys({ store: createMemoryStore(), retryWaitMs: 0 });
    const answers: Response[] = [];
    const handler = createHttpHandler(() => t.f.buildServer(), { legacy: 'reject' });
    const client = await connect(t.f, { handler, onResponse: (response) => answers.push(response) });
    const attempt = call(client, 'slow_email', email, 'k-1');
    await t.started;
    const busy = await wireError(call(client, 'slow_email', email, 'k-1'));
    expect(busy.data).toEqual({ reason: 'round_in_progress', retryAfterMs: 1000 });
    const busyAnswer = answers.at(-1)!;
    expect([busyAnswer.status, busyAnswer.headers.get('content-type'), busyAnswer.headers.get('retry-after')]).toEqual([
      200,
      'application/json',
      '1',
    ]);
    t.release();
    const first = await attempt;
    expect(await call(client, 'slow_email', email, 'k-1')).toEqual(replayed(first));
    // Results (the first, and its replay) carry no Retry-After.
    expect(answers.at(-1)!.headers.get('retry-after')).toBeNull();
    expect(answers.filter((a) => a.headers.has('retry-after'))).toEqual([busyAnswer]);
    expect(t.f.effects).toEqual(['sent bob@example.com']);
    await handler.close();
  });

  it('concurrent duplicate calls run the effect exactly once; the others get its result, marked', async () => {
    const t = withKeys({ store: createMemoryStore() });
    const client = await connect(t.f);
    const calls = Array.from({ length: 8 }, () => call(client, 'slow_email', email, 'k-1'));
    await t.started;
    t.release();
    const results = await Promise.all(calls);
    expect(t.f.effects).toEqual(['sent bob@example.com']);
    expect(new Set(results.map((r) => JSON.stringify(r.content))).size).toBe(1);
    expect(results.filter(isReplayed)).toHaveLength(7);
  });

  it('a key past its ttlMs is free again: the call runs anew (injected clock)', async () => {
    const clock = fakeClock();
    const store = createMemoryStore({ now: clock.now });
    const { f } = withKeys({ store, now: clock.now, clockSkewMs: 0 }, { ttlMs: 60_000 });
    const client = await connect(f);
    const a = await call(client, 'send_email', email, 'k-1');
    clock.advance(60_000);
    expect(await call(client, 'send_email', email, 'k-1')).toEqual(replayed(a));
    clock.advance(1);
    const b = await call(client, 'send_email', email, 'k-1');
    expect(isReplayed(b)).toBe(false);
    expect(b.content).not.toEqual(a.content);
    expect(f.effects).toHaveLength(2);
  });

  it('keys count against the principal mint quota: one principal cannot fill the store with keys', async () => {
    const { f } = withKeys({ store: createMemoryStore(), mintQuota: { max: 2 } });
    const alice = await connect(f);
    await call(alice, 'send_email', email, 'k-1');
    await call(alice, 'send_email', email, 'k-2');
    const refused = await wireError(call(alice, 'send_email', email, 'k-3'));
    expect(refused.code).toBe(-32600);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_QUOTA_EXCEEDED']);
    // Another principal is not affected.
    const bob = await connect(f, { sub: 'bob' });
    expect(isReplayed(await call(bob, 'send_email', email, 'k-3'))).toBe(false);
    expect(f.effects).toHaveLength(3);
  });

  it('bounds the key: 1-255 printable ASCII characters, else -32602 before anything runs', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f);
    for (const bad of ['', 'x'.repeat(256), 'with space', 'é', 42]) {
      const refused = await wireError(call(client, 'send_email', email, bad as string));
      expect([refused.code, refused.message]).toEqual([-32602, INVALID_KEY_MESSAGE]);
    }
    expect(isReplayed(await call(client, 'send_email', email, 'x'.repeat(255)))).toBe(false);
    expect(f.effects).toHaveLength(1);
  });

  it('reads the Idempotency-Key header when _meta has none; both present and different is refused', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f, { headers: { 'Idempotency-Key': 'h-1' } });
    const a = await call(client, 'send_email', email);
    expect(await call(client, 'send_email', email)).toEqual(replayed(a));
    expect(await call(client, 'send_email', email, 'h-1')).toEqual(replayed(a));
    const refused = await wireError(call(client, 'send_email', email, 'other'));
    expect([refused.code, refused.message]).toEqual([-32602, INVALID_KEY_MESSAGE]);
    expect(f.effects).toHaveLength(1);
  });

  it('ignores a key sent to a tool that does not declare idempotency', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f);
    const a = await call(client, 'plain_email', email, 'k-1');
    const b = await call(client, 'plain_email', email, 'k-1');
    expect(isReplayed(a) || isReplayed(b)).toBe(false);
    expect(f.effects).toHaveLength(2);
  });

  it('a keyed tool that asks: a retried first call replays the question and its state, and the flow runs once', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await call(client, 'keyed_delete', { path: '/a' }, 'k-1');
    expect(r1.resultType).toBe('input_required');
    const again = await call(client, 'keyed_delete', { path: '/a' }, 'k-1');
    expect(again).toEqual(replayed(r1));
    expect(f.events.filter((e) => e.type === 'flow.started')).toHaveLength(1);
    // Round 2 is bound to its state (the key is not read there): single use and identical-retry replay as usual.
    const params = { inputResponses: yes, requestState: again.requestState as string };
    const done = await call(client, 'keyed_delete', { path: '/a' }, 'k-1', params);
    expect(done.content).toEqual([{ type: 'text', text: 'Deleted /a' }]);
    expect(await call(client, 'keyed_delete', { path: '/a' }, 'k-1', params)).toEqual(replayed(done));
    expect(f.effects).toEqual(['deleted /a']);
  });

  it('replayErrors false (default): a tool error gives the key back, and a retry runs again', async () => {
    const { f } = withKeys({ store: createMemoryStore() });
    const client = await connect(f);
    const failed = await call(client, 'flaky', email, 'k-1');
    expect(failed.isError).toBe(true);
    const retried = await call(client, 'flaky', email, 'k-1');
    expect(retried.isError).toBeUndefined();
    expect(isReplayed(retried)).toBe(false);
    expect(await call(client, 'flaky', email, 'k-1')).toEqual(replayed(retried));
    expect(f.effects).toEqual(['sent bob@example.com']);
  });

  it('replayErrors true: a tool error is recorded and replayed', async () => {
    const { f } = withKeys({ store: createMemoryStore() }, { replayErrors: true });
    const client = await connect(f);
    const failed = await call(client, 'flaky', email, 'k-1');
    expect(failed.isError).toBe(true);
    expect(await call(client, 'flaky', email, 'k-1')).toEqual(replayed(failed));
    expect(f.effects).toEqual([]);
  });

  it('declares the tool in tools/list (_meta["dev.mrtr/idempotency"]) with its ttlMs', async () => {
    const { f } = withKeys({ store: createMemoryStore(), ttlMs: 120_000 });
    const client = await connect(f);
    const { tools } = await client.listTools();
    expect(tools.find((t) => t.name === 'send_email')?._meta).toEqual({ [IDEMPOTENCY_META]: { ttlMs: 120_000 } });
    expect(tools.find((t) => t.name === 'plain_email')?._meta?.[IDEMPOTENCY_META]).toBeUndefined();
  });

  it('fails closed at registration: no store that records outcomes, or a ttlMs out of range', () => {
    const noRecords: ReplayStore = { capabilities: { shared: false, keyExchange: false }, consume: async () => true } as never;
    const cases: [Setup, ToolConfig['idempotency'], string][] = [
      [{}, true, 'TypeError'],
      [{ store: createMemoryStore(), recordOutcomes: false }, true, 'TypeError'],
      [{ store: noRecords }, true, 'TypeError'],
      [{ store: createMemoryStore() }, { ttlMs: 999 }, 'RangeError'],
      [{ store: createMemoryStore() }, { ttlMs: 600_001 }, 'RangeError'],
      [{ store: createMemoryStore() }, { replayErrors: 'yes' as never }, 'TypeError'],
      [{ store: createMemoryStore() }, 'on' as never, 'TypeError'],
    ];
    for (const [setup, idempotency, name] of cases) {
      const { f } = withKeys({ ...setup, events: false }, idempotency);
      let thrown: unknown;
      try {
        f.buildServer();
      } catch (error) {
        thrown = error;
      }
      expect((thrown as Error)?.name, JSON.stringify(idempotency)).toBe(name);
      expect((thrown as Error).message).toMatch(/^mrtr\.registerTool: idempotency/);
    }
  });
});

import { readFileSync, writeFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/client';
import { KeyRing } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it } from 'vitest';
import * as z from 'zod/v4';
import { IDEMPOTENCY_KEY_META } from '../src/index.js';
import { callTool, connect, type Fixture, fakeClock, fixture, type Setup, wireLog, cutOff } from './harness.js';

// docs/operating.md "On the wire, from a real run" shows what a client receives in each case a host must handle. Each
// block there is the JSON-RPC message this test captures from a real server (the official SDK's handler in process,
// through @mrtr/mcp-server), with only the opaque requestState and the JSON-RPC id normalised, so the doc cannot drift
// from what the server sends. `MRTR_WRITE_WIRE_DOC=1` rewrites the blocks from this run (review the diff).

const DOC = new URL('../../../docs/operating.md', import.meta.url);
const yes = { confirm: { action: 'accept', content: { ok: true } } };
const no = { confirm: { action: 'accept', content: { ok: false } } };
const confirmSchema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } as const;
const email = { to: 'bob@example.com', subject: 'Hi' };

type Json = Record<string, unknown>;

/** The server's last JSON-RPC message to `client`, with the opaque parts normalised for the doc. */
function lastMessage(client: Client): Json {
  const log = wireLog.get(client)!;
  const text = JSON.stringify(log[log.length - 1], (key, value) => {
    if (key === 'requestState' && typeof value === 'string') return '<opaque, echoed as is>';
    return value;
  });
  const { jsonrpc, id: _id, ...rest } = JSON.parse(text) as Json;
  return { jsonrpc, id: 1, ...rest };
}

/** `call`, whether it resolves or rejects: the wire message is what counts here. */
async function settle(call: Promise<unknown>): Promise<void> {
  await call.then(
    () => {},
    () => {},
  );
}

/** The fixture with the doc's tools: `deploy` (asks to confirm; `slow` waits for `release`) and keyed `send_email`. */
function docServer(setup: Setup) {
  const f: Fixture = fixture(setup);
  const base = f.buildServer;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  let messages = 0;
  const hold = { slow: false, hang: false };
  f.buildServer = () => {
    const server = base();
    f.mrtr.registerTool(server, 'deploy', { inputSchema: z.object({ service: z.string() }) }, async ({ service }, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: `Deploy ${service} to production?`, requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      if (confirm.action !== 'accept' || !confirm.content.ok) return { content: [{ type: 'text', text: `Kept ${service}` }] };
      started();
      if (hold.hang) await new Promise(() => {});
      if (hold.slow) await released;
      f.effects.push(`deployed ${service}`);
      return { content: [{ type: 'text', text: `Deployed ${service}` }] };
    });
    f.mrtr.registerTool(
      server,
      'send_email',
      { inputSchema: z.object({ to: z.string(), subject: z.string() }), idempotency: true },
      async ({ to }) => {
        f.effects.push(`sent ${to}`);
        return { content: [{ type: 'text', text: `message msg-${++messages} sent to ${to}` }] };
      },
    );
    return server;
  };
  return { f, hold, release, running };
}

const round = (r: Json, inputResponses: Json) => ({ requestState: r.requestState as string, inputResponses });
const keyed = (key: string) => ({ _meta: { [IDEMPOTENCY_KEY_META]: key } }) as never;

/** Every case the doc shows, captured in order from real servers. */
async function capture(): Promise<Record<string, Json>> {
  const out: Record<string, Json> = {};

  // A round, its answer, an identical retry, and the same state with other answers.
  {
    const { f } = docServer({ store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'deploy', { service: 'api' });
    out.asks = lastMessage(client);
    await callTool(client, 'deploy', { service: 'api' }, round(r1, yes));
    out.answer = lastMessage(client);
    await callTool(client, 'deploy', { service: 'api' }, round(r1, yes));
    out['identical-retry'] = lastMessage(client);
    await settle(callTool(client, 'deploy', { service: 'api' }, round(r1, no)));
    out['other-answers'] = lastMessage(client);
    expect(f.effects).toEqual(['deployed api']);
  }

  // An identical retry while the first attempt still runs.
  {
    const { f, hold, release, running } = docServer({ store: createMemoryStore(), retryWaitMs: 0 });
    hold.slow = true;
    const client = await connect(f);
    const r1 = await callTool(client, 'deploy', { service: 'api' });
    const first = callTool(client, 'deploy', { service: 'api' }, round(r1, yes));
    await running;
    await settle(callTool(client, 'deploy', { service: 'api' }, round(r1, yes)));
    out['in-progress'] = lastMessage(client);
    release();
    await first;
    expect(f.effects).toEqual(['deployed api']);
  }

  // The first attempt's instance stopped between the effect and its record (its lease lapsed).
  {
    const clock = fakeClock(Date.UTC(2026, 11, 1));
    const store = createMemoryStore({ now: clock.now });
    const keys = KeyRing.generate();
    const setup = { keys, now: clock.now, leaseMs: 300, allowEphemeralKeys: true };
    const a = docServer({ ...setup, store: cutOff(store) });
    a.hold.hang = true;
    const b = docServer({ ...setup, store });
    const [onA, onB] = [await connect(a.f), await connect(b.f)];
    const r1 = await callTool(onA, 'deploy', { service: 'api' });
    void settle(callTool(onA, 'deploy', { service: 'api' }, round(r1, yes)));
    await a.running;
    clock.advance(400);
    await settle(callTool(onB, 'deploy', { service: 'api' }, round(r1, yes)));
    out['outcome-unknown'] = lastMessage(onB);
  }

  // An idempotency key on a first-round call: its retry, and the same key with other arguments.
  {
    const { f } = docServer({ store: createMemoryStore() });
    const client = await connect(f);
    await callTool(client, 'send_email', email, keyed('7f3c9a2e-order-4411'));
    out.keyed = lastMessage(client);
    await callTool(client, 'send_email', email, keyed('7f3c9a2e-order-4411'));
    out['keyed-retry'] = lastMessage(client);
    await settle(callTool(client, 'send_email', { ...email, subject: 'Other' }, keyed('7f3c9a2e-order-4411')));
    out['key-conflict'] = lastMessage(client);
    expect(f.effects).toEqual(['sent bob@example.com']);
  }
  return out;
}

const block = (name: string) => new RegExp(`(<!-- wire:${name} -->\\n\`\`\`json\\n)([\\s\\S]*?)(\`\`\`)`);

describe('docs/operating.md: the wire JSON a client sees', () => {
  it('every block is what a real server sends in that case', async () => {
    const captured = await capture();
    let doc = readFileSync(DOC, 'utf8');
    if (process.env.MRTR_WRITE_WIRE_DOC === '1') {
      for (const [name, message] of Object.entries(captured)) {
        doc = doc.replace(
          block(name),
          (_m, open: string, _old: string, close: string) => `${open}${JSON.stringify(message, null, 2)}\n${close}`,
        );
      }
      writeFileSync(DOC, doc);
    }
    for (const [name, message] of Object.entries(captured)) {
      const found = block(name).exec(doc);
      expect(found, `docs/operating.md has no <!-- wire:${name} --> json block`).not.toBeNull();
      expect(JSON.parse(found![2]!), name).toEqual(message);
    }
  });
});

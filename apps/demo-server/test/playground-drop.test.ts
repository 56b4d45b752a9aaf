// The playground's "drop the next response" control, without a browser: the dropping fetch (fake server), then the
// official client through it against a spawned mrtr-demo — the answer really reaches this process and is thrown away,
// the same request is really sent again, and the retry is answered from the record with one effect.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requestOf, sendRound } from '../src/flows.js';
import {
  createDropper,
  DroppedResponseError,
  effectCount,
  freshKey,
  IDEMPOTENCY_KEY_META,
  isReplayed,
  type LostAnswer,
  sendDroppingFirst,
} from '../src/playground/drop.js';
import { effects, freshKeys, PROTOCOL_VERSION, type RunningDemo, startDemo } from './helpers.js';

const TOKEN = 'alice-token-0123456789abcdef';

/** A fake server: answers every request with its method; counts the requests and the answers read to their end. */
function fakeServer() {
  const seen: string[] = [];
  let finished = 0;
  const inner = async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const method = new Headers(init?.headers).get('mcp-method') ?? '';
    seen.push(method);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(`{"jsonrpc":"2.0","id":1,"result":{"method":"${method}"}}`));
        controller.close();
        finished++;
      },
    });
    return new Response(body, { headers: { 'content-type': 'application/json' } });
  };
  return { inner, seen, finished: () => finished };
}

const post = (method: string, body = `{"method":"${method}"}`): RequestInit => ({
  method: 'POST',
  headers: { 'mcp-method': method },
  body,
});

describe('createDropper', () => {
  it('passes everything through until armed, then drops one round answer (read to its end) and passes again', async () => {
    const server = fakeServer();
    const dropper = createDropper(server.inner);
    expect(await (await dropper.fetch('/mcp', post('tools/call'))).json()).toMatchObject({ result: { method: 'tools/call' } });
    dropper.arm();
    // Not a round: passes, and the drop stays armed for the round that comes.
    expect((await dropper.fetch('/mcp', post('tools/list'))).status).toBe(200);
    expect(dropper.armed).toBe(true);
    await expect(dropper.fetch('/mcp', post('tools/call', '{"params":{"name":"send_email"}}'))).rejects.toBeInstanceOf(
      DroppedResponseError,
    );
    expect(dropper.armed).toBe(false);
    const lost = dropper.take();
    expect(lost).toMatchObject({ method: 'tools/call', status: 200, requestBody: '{"params":{"name":"send_email"}}' });
    expect(JSON.parse(lost!.body)).toEqual({ jsonrpc: '2.0', id: 1, result: { method: 'tools/call' } });
    expect(lost!.chars).toBe(lost!.body.length);
    expect(dropper.take()).toBeUndefined();
    // Once: the next round gets its answer.
    expect((await dropper.fetch('/mcp', post('prompts/get'))).status).toBe(200);
    // The server got every request, the dropped one included.
    expect(server.seen).toEqual(['tools/call', 'tools/list', 'tools/call', 'prompts/get']);
  });

  it('sendDroppingFirst sends twice with nothing changed; a failure that was no drop is not retried', async () => {
    const server = fakeServer();
    const dropper = createDropper(server.inner);
    const sent: string[] = [];
    const losses: LostAnswer[] = [];
    const send = async () => {
      sent.push('tools/call');
      return (await dropper.fetch('/mcp', post('tools/call'))).json();
    };
    expect(await sendDroppingFirst(dropper, send, (lost) => void losses.push(lost))).toMatchObject({ result: { method: 'tools/call' } });
    expect([sent.length, losses.length, server.seen.length]).toEqual([2, 1, 2]);
    let tries = 0;
    const failing = async () => {
      tries++;
      throw new Error('offline');
    };
    await expect(sendDroppingFirst(dropper, failing, () => {})).rejects.toThrow('offline');
    expect([tries, dropper.armed]).toEqual([1, false]);
  });

  it('reads an effect counter from a scrape, and makes distinct keys', () => {
    const scrape = [
      '# HELP mrtr_demo_effects_total Side effects',
      'mrtr_demo_effects_total{tool="deploy",otel_scope_name="mrtr-demo"} 3',
      'mrtr_demo_effects_total{tool="send_email",otel_scope_name="mrtr-demo"} 1',
    ].join('\n');
    expect([effectCount(scrape, 'send_email'), effectCount(scrape, 'deploy'), effectCount(scrape, 'rollout')]).toEqual([1, 3, undefined]);
    const keys = new Set(Array.from({ length: 50 }, freshKey));
    expect(keys.size).toBe(50);
    for (const key of keys) expect(key).toMatch(/^pg-[0-9a-f]{32}$/);
  });
});

describe('the drop against a real mrtr-demo, through the official client', () => {
  let demo: RunningDemo;
  beforeAll(async () => {
    demo = await startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${TOKEN}` } });
  });
  afterAll(async () => {
    if (demo !== undefined) expect(await demo.stop()).toBe(0);
  });

  async function client(): Promise<{ client: Client; dropper: ReturnType<typeof createDropper> }> {
    const dropper = createDropper((input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', `Bearer ${TOKEN}`);
      return fetch(input, { ...init, headers });
    });
    const transport = new StreamableHTTPClientTransport(new URL(demo.url), { fetch: dropper.fetch });
    const c = new Client(
      { name: 'drop-test', version: '1' },
      {
        versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
        capabilities: { elicitation: { form: {} } },
        inputRequired: { autoFulfill: false },
      },
    );
    await c.connect(transport);
    return { client: c, dropper };
  }

  it('send_email with a key: the lost answer and the retry carry one message id, the retry is marked, one effect', async () => {
    const { client: c, dropper } = await client();
    const target = { kind: 'tool' as const, name: 'send_email', summary: '', args: { to: 'bob@example.com', subject: 'Hi' } };
    const extra = { meta: { [IDEMPOTENCY_KEY_META]: freshKey() } };
    const before = await effects(demo, 'send_email', TOKEN);
    const lost: LostAnswer[] = [];
    const afterLost: number[] = [];
    const result = await sendDroppingFirst(
      dropper,
      () => sendRound(c, target, target.args, extra),
      async (l) => {
        lost.push(l);
        afterLost.push(await effects(demo, 'send_email', TOKEN));
      },
    );
    // The effect happened in the dropped attempt, and not again in the retry.
    expect(afterLost).toEqual([before + 1]);
    expect(await effects(demo, 'send_email', TOKEN)).toBe(before + 1);
    expect(isReplayed(result)).toBe(true);
    const first = JSON.parse(lost[0]!.body) as { result: { structuredContent: { messageId: string }; _meta?: unknown } };
    expect((result.structuredContent as { messageId: string }).messageId).toBe(first.result.structuredContent.messageId);
    expect(isReplayed(first.result as never)).toBe(false);
    // The request that was lost carried the same params the page sends again.
    expect(JSON.parse(lost[0]!.requestBody).params).toMatchObject(requestOf(target, target.args, extra).params);
    await c.close();
  });

  it('a deploy round (state and answers) dropped and sent again: replayed, one deployment', async () => {
    const { client: c, dropper } = await client();
    const target = { kind: 'tool' as const, name: 'deploy', summary: '', args: { service: 'web' } };
    const r1 = await sendRound(c, target, target.args);
    const r2 = await sendRound(c, target, target.args, {
      requestState: r1.requestState as string,
      inputResponses: { environment: { action: 'accept', content: { environment: 'staging' } } },
    });
    const before = await effects(demo, 'deploy', TOKEN);
    const last = { requestState: r2.requestState as string, inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } };
    let lost: LostAnswer | undefined;
    const result = await sendDroppingFirst(
      dropper,
      () => sendRound(c, target, target.args, last),
      (l) => {
        lost = l;
      },
    );
    expect(isReplayed(result)).toBe(true);
    expect(JSON.stringify(result.content)).toContain('Deployed web to staging');
    expect((JSON.parse(lost!.body) as { result: { content: unknown } }).result.content).toEqual(result.content);
    expect(await effects(demo, 'deploy', TOKEN)).toBe(before + 1);
    await c.close();
  });
});

import { withMrtr } from '@mrtr/client';
import { describe, expect, it } from 'vitest';
import { connect, fakeServer, type Json, text } from './fake.js';
import { noTimers } from './helpers.js';

const KEY = 'dev.mrtr/idempotency-key';
const schema = { type: 'object' };
const TOOLS = [
  { name: 'send_email', inputSchema: schema, _meta: { 'dev.mrtr/idempotency': true } },
  { name: 'deploy', inputSchema: schema, _meta: { 'dev.mrtr/idempotency': { ttlMs: 86_400_000 } } },
  { name: 'plain', inputSchema: schema },
  { name: 'lookup', inputSchema: schema, annotations: { readOnlyHint: true } },
];
const QUESTION = { method: 'elicitation/create', params: { message: 'Deploy?', requestedSchema: { type: 'object', properties: {} } } };

/** Records every first-round effect by key: a keyed retry is answered from the record, with the replay marker. */
function keyedServer() {
  const effects = new Map<string, number>();
  const fake = fakeServer((method, params) => {
    if (method === 'tools/list') return { resultType: 'complete', tools: TOOLS, ttlMs: 0, cacheScope: 'private' };
    const key = (params._meta as Json)[KEY] as string | undefined;
    if (params.name === 'deploy' && params.requestState === undefined) {
      return { resultType: 'input_required', inputRequests: { confirm: QUESTION }, requestState: 'S1' };
    }
    if (key !== undefined && effects.has(key)) return text(`sent ${effects.get(key)}`, { 'dev.mrtr/replayed': true });
    const id = effects.size + 1;
    if (key !== undefined) effects.set(key, id);
    return text(`sent ${id}`);
  });
  return { fake, effects };
}

const keysOf = (seen: { method: string; params: Json }[]) =>
  seen.filter((s) => s.method === 'tools/call').map((s) => (s.params._meta as Json)[KEY] as string | undefined);

describe('idempotency keys', () => {
  it('gives each logical call of a tool that declares keys its own key, the same on every retry of it', async () => {
    const { fake, effects } = keyedServer();
    let n = 0;
    const mrtr = withMrtr(await connect(fake), noTimers({ newKey: () => `key-${++n}` }));
    fake.drop((method) => method === 'tools/call');
    const first = await mrtr.callTool({ name: 'send_email', arguments: { to: 'a@example.com' } });
    const second = await mrtr.callTool({ name: 'send_email', arguments: { to: 'a@example.com' } });
    expect(keysOf(fake.seen)).toEqual(['key-1', 'key-1', 'key-2']);
    expect(first).toMatchObject({ content: [{ type: 'text', text: 'sent 1' }], replayed: true });
    expect(second).toMatchObject({ content: [{ type: 'text', text: 'sent 2' }], replayed: false });
    expect(effects.size).toBe(2);
    expect(fake.seen.filter((s) => s.method === 'tools/list')).toHaveLength(1);
  });

  it('sends no key to a tool that does not declare keys, and does not re-send its lost first call', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ newKey: () => 'never' }));
    await mrtr.callTool({ name: 'plain', arguments: {} });
    fake.drop((method) => method === 'tools/call');
    await expect(mrtr.callTool({ name: 'plain', arguments: {} })).rejects.toMatchObject({ code: 'ERR_RESPONSE_LOST' });
    expect(keysOf(fake.seen)).toEqual([undefined, undefined]);
  });

  it('re-sends the lost first call of a read-only tool, without a key', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers());
    fake.drop((method) => method === 'tools/call');
    await mrtr.callTool({ name: 'lookup', arguments: {} });
    expect(keysOf(fake.seen)).toEqual([undefined, undefined]);
  });

  it('keys the first round of a tool that asks a question, and leaves the later rounds to their requestState', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ newKey: () => 'key-d' }));
    await mrtr.callTool({ name: 'deploy', arguments: { env: 'prod' } });
    expect(keysOf(fake.seen)).toEqual(['key-d', undefined]);
  });

  it('uses the key a call passes, and sends none under idempotency "off" (without listing tools)', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ idempotency: 'off', newKey: () => 'never' }));
    await mrtr.callTool({ name: 'send_email', arguments: {} });
    await mrtr.callTool({ name: 'plain', arguments: {} }, { idempotencyKey: 'host-kept-key' });
    expect(keysOf(fake.seen)).toEqual([undefined, 'host-kept-key']);
    expect(fake.seen.some((s) => s.method === 'tools/list')).toBe(false);
  });

  it('takes a key the caller put in _meta as the call’s key, and re-sends its lost first call with it', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ newKey: () => 'never' }));
    fake.drop((method) => method === 'tools/call');
    await mrtr.callTool({ name: 'send_email', arguments: {}, _meta: { [KEY]: 'from-meta' } } as never);
    expect(keysOf(fake.seen)).toEqual(['from-meta', 'from-meta']);
    await mrtr.callTool({ name: 'deploy', arguments: {}, _meta: { [KEY]: 'deploy-key' } } as never);
    expect(keysOf(fake.seen).slice(2)).toEqual(['deploy-key', undefined]); // not on its later round
  });

  it('lists the tools again for an unknown name only once the list is 30 s old (an injected clock)', async () => {
    const { fake } = keyedServer();
    let now = 0;
    const mrtr = withMrtr(await connect(fake), noTimers({ now: () => now }));
    const lists = () => fake.seen.filter((s) => s.method === 'tools/list').length;
    await mrtr.callTool({ name: 'new_tool', arguments: {} });
    await mrtr.callTool({ name: 'new_tool', arguments: {} });
    now = 29_999;
    await mrtr.callTool({ name: 'new_tool', arguments: {} });
    expect(lists()).toBe(1);
    now = 30_000;
    await mrtr.callTool({ name: 'new_tool', arguments: {} });
    await mrtr.callTool({ name: 'send_email', arguments: {} }); // known: never lists
    expect(lists()).toBe(2);
  });

  it('keeps the caller’s own _meta beside the key', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers({ newKey: () => 'k' }));
    await mrtr.callTool({ name: 'send_email', arguments: {}, _meta: { 'example.com/trace': 't1' } } as never);
    expect(fake.seen.at(-1)?.params._meta).toMatchObject({ 'example.com/trace': 't1', [KEY]: 'k' });
  });

  it('refuses a malformed idempotencyKey with a labelled TypeError', async () => {
    const { fake } = keyedServer();
    const mrtr = withMrtr(await connect(fake), noTimers());
    await expect(mrtr.callTool({ name: 'plain' }, { idempotencyKey: '' })).rejects.toThrow(/^callTool: idempotencyKey/);
    await expect(mrtr.callTool({ name: 'plain' }, { idempotencyKey: 'x'.repeat(256) })).rejects.toThrow(TypeError);
    await expect(mrtr.callTool({ name: 'plain' }, { idempotencyKey: 'has space' })).rejects.toThrow(TypeError);
    await expect(mrtr.callTool({ name: 'plain' }, { idempotencyKey: 'clé' })).rejects.toThrow(TypeError);
    expect(fake.seen).toHaveLength(0);
  });
});

import { describe, expect, it } from 'vitest';
import { callTool, connect, fixture, wireLog, wireError } from './harness.js';

const sampled = { role: 'assistant', content: { type: 'text', text: 'Summary' }, model: 'test-model', stopReason: 'endTurn' };

/** Every embedded request the server ever sent to this client. */
function embeddedMethods(client: Parameters<typeof wireLog.get>[0]): string[] {
  return wireLog
    .get(client)!
    .flatMap((m) => Object.values((m.result as { inputRequests?: Record<string, { method: string }> } | undefined)?.inputRequests ?? {}))
    .map((r) => r.method);
}

describe('capabilities come from this request’s _meta only', () => {
  it('a client declaring only sampling never receives an elicitation request (degrade)', async () => {
    const f = fixture();
    const client = await connect(f, { capabilities: { sampling: {} } });
    const r1 = await callTool(client, 'summarise', { topic: 'MRTR' });
    expect(r1.resultType).toBe('input_required');
    expect(Object.keys(r1.inputRequests as object)).toEqual(['draft']);
    const done = await callTool(
      client,
      'summarise',
      { topic: 'MRTR' },
      { inputResponses: { draft: sampled }, requestState: r1.requestState as string },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'Summary (plain)' }]);
    expect(embeddedMethods(client)).toEqual(['sampling/createMessage']);
  });

  it('the same handler asks both when both are declared', async () => {
    const f = fixture();
    const client = await connect(f, { capabilities: { sampling: {}, elicitation: {} } });
    const r1 = await callTool(client, 'summarise', { topic: 'MRTR' });
    expect(Object.keys(r1.inputRequests as object).sort()).toEqual(['draft', 'style']);
    const done = await callTool(
      client,
      'summarise',
      { topic: 'MRTR' },
      {
        inputResponses: { draft: sampled, style: { action: 'accept', content: { style: 'terse' } } },
        requestState: r1.requestState as string,
      },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'Summary (terse)' }]);
  });

  it('auto-fulfil with a sampling-only client completes through its sampling handler', async () => {
    const f = fixture();
    const client = await connect(f, { capabilities: { sampling: {} }, autoFulfill: true, onSample: () => sampled });
    const result = await client.callTool({ name: 'summarise', arguments: { topic: 'x' } });
    expect(result.content).toEqual([{ type: 'text', text: 'Summary (plain)' }]);
    expect(embeddedMethods(client)).toEqual(['sampling/createMessage']);
  });

  it('a handler that needs an undeclared kind fails with -32021 and data.requiredCapabilities', async () => {
    const f = fixture();
    const client = await connect(f, { capabilities: { sampling: {} } });
    const error = await wireError(callTool(client, 'strict_confirm', {}));
    expect(error.code).toBe(-32021);
    expect(error.data).toEqual({ requiredCapabilities: { elicitation: { form: {} } } });
    expect(embeddedMethods(client)).toEqual([]);
    expect(f.rejects).toEqual([]);
  });

  it('URL elicitation needs elicitation.url (bare elicitation means form only)', async () => {
    const f = fixture();
    const formOnly = await connect(f, { capabilities: { elicitation: {} } });
    const error = await wireError(callTool(formOnly, 'connect_account', {}));
    expect(error.code).toBe(-32021);
    expect(error.data).toEqual({ requiredCapabilities: { elicitation: { url: {} } } });
    const withUrl = await connect(f, { capabilities: { elicitation: { url: {} } } });
    const r1 = await callTool(withUrl, 'connect_account', {});
    expect(r1.inputRequests).toEqual({
      link: { method: 'elicitation/create', params: { mode: 'url', message: 'Link your account', url: 'https://files.test/link' } },
    });
    const done = await callTool(
      withUrl,
      'connect_account',
      {},
      { inputResponses: { link: { action: 'accept' } }, requestState: r1.requestState as string },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'link: accept' }]);
  });

  it('sampling with tools needs sampling.tools; roots need roots', async () => {
    const f = fixture();
    const plain = await connect(f, { capabilities: { sampling: {} } });
    const error = await wireError(callTool(plain, 'agent_step', {}));
    expect(error.data).toEqual({ requiredCapabilities: { sampling: { tools: {} } } });
    const rootsError = await wireError(callTool(plain, 'workspace', {}));
    expect(rootsError.data).toEqual({ requiredCapabilities: { roots: {} } });

    const full = await connect(f, { capabilities: { sampling: { tools: {} }, roots: {} } });
    const r1 = await callTool(full, 'workspace', {});
    const bad = await callTool(
      full,
      'workspace',
      {},
      { inputResponses: { client_roots: { roots: [{ uri: 'https://x' }] } }, requestState: r1.requestState as string },
    );
    expect(bad.resultType).toBe('input_required');
    const done = await callTool(
      full,
      'workspace',
      {},
      { inputResponses: { client_roots: { roots: [{ uri: 'file:///w', name: 'w' }] } }, requestState: bad.requestState as string },
    );
    expect(done.content).toEqual([{ type: 'text', text: 'file:///w' }]);
  });
});

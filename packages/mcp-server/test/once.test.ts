import { createHmacCodec } from '@mrtr/codec-hmac';
import type { KeyRing, StateCodec } from '@mrtr/core';
import { createMemoryStore } from '@mrtr/store-memory';
import { describe, expect, it, vi } from 'vitest';
import { callTool, connect, fixture } from './harness.js';

const ok = (key: string) => ({ [key]: { action: 'accept', content: { ok: true } } });

/** The HMAC codec, counting `unseal`. */
function countingCodec(): { codec: (keys: KeyRing) => StateCodec; opens: () => number } {
  let opens = 0;
  const codec = (keys: KeyRing): StateCodec => {
    const inner = createHmacCodec(keys);
    return {
      id: inner.id,
      confidential: inner.confidential,
      maxTokenBytes: inner.maxTokenBytes,
      keys: inner.keys,
      seal: (claims) => inner.seal(claims),
      unseal: (token) => {
        opens++;
        return inner.unseal(token);
      },
    };
  };
  return { codec, opens: () => opens };
}

describe('one request, each step once', () => {
  for (const recordOutcomes of [true, false]) {
    it(`reads the principal, applies the guard's policy and opens the state once per call (recordOutcomes: ${recordOutcomes})`, async () => {
      const counting = countingCodec();
      const principal = vi.fn(() => 'sub:alice');
      const f = fixture({ store: createMemoryStore(), codec: counting.codec, principal, recordOutcomes });
      const { guard } = f.mrtr;
      const scoped = vi.spyOn(guard, 'forRequest');
      // The request-less entry points would apply the principal policy and digest the binding again.
      const unscoped = (['open', 'verify', 'admit', 'mint', 'mintFlow'] as const).map((m) => vi.spyOn(guard, m));
      const client = await connect(f);
      const r1 = await callTool(client, 'steps', { rounds: 2 });
      expect([principal.mock.calls.length, scoped.mock.calls.length, counting.opens()]).toEqual([1, 1, 0]);
      const r2 = await callTool(client, 'steps', { rounds: 2 }, { requestState: r1.requestState as string, inputResponses: ok('step1') });
      expect([principal.mock.calls.length, scoped.mock.calls.length, counting.opens()]).toEqual([2, 2, 1]);
      await callTool(client, 'steps', { rounds: 2 }, { requestState: r2.requestState as string, inputResponses: ok('step2') });
      expect([principal.mock.calls.length, scoped.mock.calls.length, counting.opens()]).toEqual([3, 3, 2]);
      for (const spy of unscoped) expect(spy).not.toHaveBeenCalled();
      expect(f.rejects).toEqual([]);
    });
  }

  it('reports a missing principal once (one state.rejected, one onReject), before any state is opened', async () => {
    const counting = countingCodec();
    const f = fixture({ codec: counting.codec, principal: () => undefined });
    const client = await connect(f);
    await expect(callTool(client, 'steps', { rounds: 1 }, { requestState: 'abc', inputResponses: ok('step1') })).rejects.toThrow();
    expect(f.events.map((e) => [e.type, (e as { code?: string }).code])).toEqual([['state.rejected', 'ERR_PRINCIPAL_REQUIRED']]);
    expect(f.rejects.map((r) => r.code)).toEqual(['ERR_PRINCIPAL_REQUIRED']);
    expect(counting.opens()).toBe(0);
  });

  it('reports a refusal by the guard once, with onReject alone as well (a filter on the same event path)', async () => {
    const f = fixture({ events: false, store: createMemoryStore() });
    const client = await connect(f);
    const r1 = await callTool(client, 'steps', { rounds: 1 });
    const again = { requestState: r1.requestState as string, inputResponses: ok('step1') };
    await callTool(client, 'steps', { rounds: 1 }, again);
    await expect(
      callTool(client, 'steps', { rounds: 1 }, { ...again, inputResponses: { other: { action: 'decline' } } }),
    ).rejects.toThrow();
    expect(f.rejects).toEqual([{ code: 'ERR_STATE_REPLAYED', method: 'tools/call', target: 'steps' }]);
  });
});

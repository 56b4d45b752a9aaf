import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultMintQuota, parseCli } from '../src/config.js';
import { type Connected, callTool, connectClient, freshKeys, type RunningDemo, rejection, startDemo } from './helpers.js';

const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdefgh';

// Review finding: one account consumed 100,000 states in ~6 minutes, filled the memory replay store and left
// every other user with -32603 for ten minutes. Minting is now bounded per principal, on by default.
describe('per-principal mint quota', () => {
  let demo: RunningDemo;
  let alice: Connected;
  let bob: Connected;

  beforeAll(async () => {
    demo = await startDemo(['--mint-quota', '3'], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: `alice:${ALICE},bob:${BOB}` } });
    alice = await connectClient(demo.url, { token: ALICE });
    bob = await connectClient(demo.url, { token: BOB });
  });
  afterAll(async () => {
    await alice?.close();
    await bob?.close();
    expect(await demo?.stop()).toBe(0);
  });

  it('refuses a principal past its quota with -32600 while another principal is served', async () => {
    for (let i = 0; i < 3; i++) expect((await callTool(alice.client, 'delete_files', { paths: [`a${i}`] })).resultType).toBe('input_required');
    const refused = await rejection(callTool(alice.client, 'delete_files', { paths: ['a4'] }));
    expect([refused.code, refused.message]).toEqual([-32600, 'Too many requests in flight; try again later']);
    expect((await callTool(bob.client, 'delete_files', { paths: ['b'] })).resultType).toBe('input_required');
    expect(demo.stderr()).toContain('ERR_QUOTA_EXCEEDED');
  });

  // Review finding: a client completed delete_files (and the production deploy) in one request by
  // pre-answering the confirmation it never showed, and replayed that request without limit.
  it('ignores a pre-answered confirmation: the question is asked every time and nothing is deleted', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await callTool(bob.client, 'delete_files', { paths: ['notes/a.txt'] }, { inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } });
      expect(r.resultType).toBe('input_required');
      expect(Object.keys(r.inputRequests as object)).toEqual(['confirm']);
      expect(r.structuredContent).toBeUndefined();
    }
  });

  it('is on by default, sized so one principal holds at most a quarter of the memory store', () => {
    expect(parseCli([]).mintQuota).toBe(defaultMintQuota(600_000));
    expect(defaultMintQuota(600_000)).toBe(2459);
    // ttl + 2 × 5 s skew, per minute: 2459 × 610 / 60 ≤ 25,000 entries.
    expect((defaultMintQuota(600_000) * 610_000) / 60_000).toBeLessThanOrEqual(25_000);
    expect(parseCli(['--mint-quota', 'off']).mintQuota).toBeUndefined();
    expect(() => parseCli(['--mint-quota', '0'])).toThrow(/--mint-quota/);
  });
});

import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, KeyRing, MrtrError, type RequestContext } from '@mrtr/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CLOCK_SKEW_MS,
  DEFAULT_MINT_QUOTA,
  DEFAULT_TTL_MS,
  MAX_TTL_MS,
  MEMORY_STORE_ENTRIES,
  MIN_TTL_MS,
  mintQuotaFor,
  parseCli,
  USAGE,
} from '../src/config.js';
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
    for (let i = 0; i < 3; i++)
      expect((await callTool(alice.client, 'delete_files', { paths: [`a${i}`] })).resultType).toBe('input_required');
    const refused = await rejection(callTool(alice.client, 'delete_files', { paths: ['a4'] }));
    expect([refused.code, refused.message]).toEqual([-32600, 'Too many requests in flight; try again later']);
    expect((await callTool(bob.client, 'delete_files', { paths: ['b'] })).resultType).toBe('input_required');
    expect(demo.stderr()).toContain('ERR_QUOTA_EXCEEDED');
  });

  // Review finding: a client completed delete_files (and the production deploy) in one request by
  // pre-answering the confirmation it never showed, and replayed that request without limit.
  it('ignores a pre-answered confirmation: the question is asked every time and nothing is deleted', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await callTool(
        bob.client,
        'delete_files',
        { paths: ['notes/a.txt'] },
        { inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } },
      );
      expect(r.resultType).toBe('input_required');
      expect(Object.keys(r.inputRequests as object)).toEqual(['confirm']);
      expect(r.structuredContent).toBeUndefined();
    }
  });
});

// Issue 19: core's mintQuota is now a sliding window never shorter than a state's lifetime (ttl + 2 × skew), so
// --mint-quota N means N states one principal may hold at once; it used to mean N per minute, with a default
// derived from --ttl-ms (2459 at the default TTL) and a 60 s window passed to the guard.
describe('--mint-quota N: states one principal may hold at once', () => {
  it('defaults to a quarter of the memory store, whatever --ttl-ms', () => {
    expect(DEFAULT_MINT_QUOTA).toBe(25_000);
    expect(DEFAULT_MINT_QUOTA).toBe(MEMORY_STORE_ENTRIES / 4);
    expect(parseCli([]).mintQuota).toBe(DEFAULT_MINT_QUOTA);
    for (const ttl of [MIN_TTL_MS, DEFAULT_TTL_MS, MAX_TTL_MS])
      expect(parseCli(['--ttl-ms', String(ttl)]).mintQuota).toBe(DEFAULT_MINT_QUOTA);
    expect(parseCli(['--mint-quota', '7', '--ttl-ms', '2000']).mintQuota).toBe(7);
    expect(parseCli(['--mint-quota', 'off']).mintQuota).toBeUndefined();
    expect(() => parseCli(['--mint-quota', '0'])).toThrow(/--mint-quota/);
  });

  it('the help says states held at once in a state lifetime, not a rate per minute', () => {
    const help = USAGE.slice(USAGE.indexOf('  --mint-quota'), USAGE.indexOf('  --fixtures'));
    expect(help).toContain('request states one principal may hold at once');
    expect(help).toContain('in any state lifetime');
    expect(help).toContain(`default ${DEFAULT_MINT_QUOTA}`);
    expect(help).not.toMatch(/per minute|at --ttl-ms|2459/);
  });

  it('the guard option main.ts builds: N per principal, shared out between codecs, no window of its own', () => {
    expect(mintQuotaFor(3, 1)).toEqual({ max: 3 });
    expect(mintQuotaFor(DEFAULT_MINT_QUOTA, 3)).toEqual({ max: 8333 });
    expect(mintQuotaFor(2, 3)).toEqual({ max: 1 });
    expect(mintQuotaFor(undefined, 3)).toBeUndefined();
  });

  it('on an injected clock: N states within a state lifetime, the next one once a lifetime has passed (not a minute)', async () => {
    const ttlMs = MIN_TTL_MS;
    const lifetime = ttlMs + 2 * CLOCK_SKEW_MS; // 11 s: the guard's window
    let now = 1_000_000;
    const guard = createStateGuard({
      keys: KeyRing.generate('k1'),
      codec: createHmacCodec,
      audience: 'mrtr-demo',
      ttlMs,
      clockSkewMs: CLOCK_SKEW_MS,
      mintQuota: mintQuotaFor(3, 1)!,
      now: () => now,
    });
    const alice: RequestContext = { method: 'tools/call', target: 'delete_files', arguments: { paths: ['a'] }, principal: 'alice' };
    const bob: RequestContext = { ...alice, principal: 'bob' };
    const mint = async (request: RequestContext): Promise<string> => {
      try {
        await guard.mint(null, request);
        return 'ok';
      } catch (error) {
        if (MrtrError.is(error)) return error.code;
        throw error;
      }
    };
    const start = now;
    for (let i = 0; i < 3; i++) expect(await mint(alice)).toBe('ok');
    expect(await mint(alice)).toBe('ERR_QUOTA_EXCEEDED');
    expect(await mint(bob)).toBe('ok');
    // Still within one lifetime of the first three: all three may be alive, so no fourth.
    now = start + lifetime - 1;
    expect(await mint(alice)).toBe('ERR_QUOTA_EXCEEDED');
    // Past one lifetime (+ the guard's sub-window of lifetime / 10), long before a minute: the three have expired.
    now = start + Math.ceil(lifetime * 1.1) + 1;
    expect(now - start).toBeLessThan(60_000);
    for (let i = 0; i < 3; i++) expect(await mint(alice)).toBe('ok');
    expect(await mint(alice)).toBe('ERR_QUOTA_EXCEEDED');
  });
});

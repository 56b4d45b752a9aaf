import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEDGER_ERROR_MESSAGE } from '../src/ledger.js';
import {
  callTool,
  type Connected,
  connectClient,
  freshKeys,
  type Json,
  type RunningDemo,
  serviceUrl,
  startDemo,
  textOf,
} from './helpers.js';

/**
 * Finding 1 over real HTTP, on every store: a principal flooding connect_account is capped (its pending
 * link for a provider is reused; a new provider beyond the cap gets a generic error), the real reason is
 * logged, and another principal is not affected.
 */

const tempDirs: string[] = [];
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

const stores = [
  { store: 'memory', env: undefined },
  { store: 'sqlite', env: undefined },
  { store: 'redis', env: 'REDIS_URL' },
  { store: 'postgres', env: 'DATABASE_URL' },
] as const;

const urlOf = (result: Json) => String(((result.inputRequests as Record<string, Json>).connect!.params as Json).url);

for (const { store, env } of stores) {
  const service: { url?: string | undefined; error?: string | undefined; skip?: string | undefined } =
    env === undefined ? { url: '' } : serviceUrl(env);
  if (service.error !== undefined) {
    it(`connect_account quotas on ${store}`, () => {
      throw new Error(service.error);
    });
    continue;
  }

  describe.skipIf(service.url === undefined)(`connect_account quotas on ${store}`, () => {
    // Unique principals: Redis and PostgreSQL outlive this run and are shared with other test files.
    const suffix = randomBytes(4).toString('hex');
    const mallory = `mallory-${suffix}`;
    const alice = `alice-${suffix}`;
    const MALLORY = `mallory-token-${suffix}-0123456789`;
    const ALICE = `alice-token-${suffix}-0123456789`;
    let demo: RunningDemo;
    let onMallory: Connected;
    let onAlice: Connected;

    beforeAll(async () => {
      const args = ['--store', store];
      if (store === 'sqlite') {
        const dir = mkdtempSync(join(tmpdir(), 'mrtr-demo-ledger-'));
        tempDirs.push(dir);
        args.push('--sqlite-file', join(dir, 'demo.sqlite'));
      }
      demo = await startDemo(args, {
        env: {
          MRTR_KEYS: freshKeys(),
          MRTR_DEMO_TOKENS: `${mallory}:${MALLORY},${alice}:${ALICE}`,
          MRTR_DEMO_CONNECT_MAX_PENDING: '2',
          MRTR_DEMO_CONNECT_WAIT_MS: '0',
          ...(env === undefined ? {} : { [env]: service.url }),
        },
      });
      onMallory = await connectClient(demo.url, { token: MALLORY });
      onAlice = await connectClient(demo.url, { token: ALICE });
    });

    afterAll(async () => {
      await onMallory?.close();
      await onAlice?.close();
      expect(await demo?.stop()).toBe(0);
    });

    it('reuses a pending link, caps new ones with a generic error (reason logged), and leaves other principals alone', async () => {
      const github = urlOf(await callTool(onMallory.client, 'connect_account', { provider: 'github' }));
      // Starting the same connection again (a flood of first rounds) reuses the pending link.
      for (let i = 0; i < 20; i++) {
        expect(urlOf(await callTool(onMallory.client, 'connect_account', { provider: 'github' }))).toBe(github);
      }
      const gitlab = urlOf(await callTool(onMallory.client, 'connect_account', { provider: 'gitlab' }));
      expect(gitlab).not.toBe(github);

      const refused = await callTool(onMallory.client, 'connect_account', { provider: 'slack' });
      expect(refused.isError).toBe(true);
      expect(textOf(refused)).toBe(LEDGER_ERROR_MESSAGE);
      expect(textOf(refused)).not.toMatch(/full|ledger|pending|cap/i);
      expect(demo.stderr()).toContain(`principal "${mallory}" already has 2 pending connect links`);

      // Alice still connects.
      const hers = await callTool(onAlice.client, 'connect_account', { provider: 'slack' });
      expect(hers.resultType).toBe('input_required');
      expect(urlOf(hers)).not.toBe(github);
      expect((await fetch(urlOf(hers))).status).toBe(200);
    });
  });
}

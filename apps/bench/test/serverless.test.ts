// The serverless rows' report: targets computed from a made-up run (nothing is timed here), a skipped backend
// reported as SKIP with its reason; and the Worker's consumes checked under workerd when it starts.
import { describe, expect, it } from 'vitest';
import type { JobResult } from '../src/harness.js';
import { type BenchResult, evaluateTargets } from '../src/report.js';
import { checkServerless, serverlessBlock, serverlessJobs, setupServerless } from '../src/serverless.js';

const job = (key: string, opsPerSec: number): JobResult => ({
  key,
  concurrency: 1,
  rounds: [{ opsPerSec, samples: 1, opsPerBatch: 1 }],
  opsPerSec,
  spread: 0,
});

describe('serverless report', () => {
  it('each target is the store ÷ its raw row at c32; a backend not measured is SKIP; the table multiplies by ops per call', () => {
    const result = {
      schema: 1,
      jobs: {
        'serverless|upstash|c32': job('serverless|upstash|c32', 80),
        'serverless|upstash-raw|c32': job('serverless|upstash-raw|c32', 100),
        'serverless|durable-object|c32': job('serverless|durable-object|c32', 9),
        'serverless|durable-object-raw|c32': job('serverless|durable-object-raw|c32', 10),
      },
      serverless: {
        rows: [
          {
            key: 'serverless|upstash|c32',
            id: 'upstash',
            backend: 'upstash',
            kind: 'mrtr',
            label: 'u',
            op: 'consume',
            concurrency: 32,
            opsPerCall: 128,
          },
          {
            key: 'serverless|durable-object|c32',
            id: 'durable-object',
            backend: 'durable-object',
            kind: 'mrtr',
            label: 'd',
            op: 'consume',
            concurrency: 32,
            opsPerCall: 256,
          },
        ],
        skipped: [{ id: 'dynamodb', label: 'DynamoDB (dynalite)', reason: 'dynalite did not start' }],
        checks: [],
      },
      targets: [],
    } as unknown as BenchResult;
    const targets = evaluateTargets(result).filter((t) => t.id.startsWith('serverless.'));
    expect(targets.map((t) => [t.id, t.pkg, t.value, t.pass])).toEqual([
      ['serverless.upstash.c32', 'store-upstash', 0.8, true],
      ['serverless.dynamodb.c32', 'store-dynamodb', null, null],
      ['serverless.durable-object.c32', 'store-cloudflare', 0.9, true],
    ]);
    expect(targets[0]?.detail).toBe('10240 vs 12800 ops/s');
    const block = serverlessBlock(result);
    expect(block).toContain('| upstash: u | consume | 32 | 10240 | 0.80× |');
    expect(block).toContain('note: dynamodb skipped: dynalite did not start');
  });

  it('without REDIS_URL the Upstash rows are skipped with the reason; the rows that start pass their checks', async () => {
    const setup = await setupServerless({ redisUrl: undefined });
    try {
      expect(setup.skipped.find((s) => s.id === 'upstash')?.reason).toMatch(/REDIS_URL is not set/);
      for (const s of setup.skipped) console.warn(`serverless ${s.id} skipped: ${s.reason}`);
      const checks = await checkServerless(setup);
      expect(checks).toHaveLength(new Set(setup.rows.map((r) => r.id)).size);
      expect(serverlessJobs(setup).length).toBe(
        setup.rows.filter((r) => r.inner === undefined).length * 2 + setup.rows.filter((r) => r.inner !== undefined).length,
      );
    } finally {
      await setup.close();
    }
  }, 120_000);
});

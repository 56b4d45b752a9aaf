// Smoke test of the harness's correctness checks. Nothing here is timed and no assertion is about speed:
// performance figures come only from running the bench (`pnpm bench`).
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CheckFailure, type CodecRow, checkCodecs, largeToken, MIB, makePayloads, setupCodecs } from '../src/codecs.js';
import { makeClaims } from '../src/payload.js';
import { END_MARKER, replaceBenchBlock, START_MARKER } from '../src/readme.js';
import { type BenchResult, evaluateTargets } from '../src/report.js';
import { checkStores, setupStores } from '../src/stores.js';

describe('payloads', () => {
  it('small is 400 B and 4k is 4096 B of JSON', () => {
    expect(Buffer.byteLength(JSON.stringify(makeClaims('small')))).toBe(400);
    expect(Buffer.byteLength(JSON.stringify(makeClaims('4k')))).toBe(4096);
  });
});

describe('codec checks', () => {
  it('every row (bare, libraries, loadable @mrtr codecs) passes round trip, tamper, expiry and size checks', async () => {
    const setup = await setupCodecs();
    const report = await checkCodecs(setup, makePayloads());
    expect(report.checks).toHaveLength(setup.rows.length);
    for (const row of setup.rows) expect(report.tokenBytes[row.id]?.small).toBeGreaterThan(0);
  });

  it('aborts on a row that accepts a tampered token', async () => {
    const setup = await setupCodecs();
    const b = setup.rows.find((r) => r.id === 'B')!;
    // Same format as B, but open skips the MAC.
    const broken: CodecRow = {
      ...b,
      id: 'broken',
      open: (token: string) => JSON.parse(Buffer.from(token.slice(0, token.lastIndexOf('.')), 'base64url').toString('utf8')),
    };
    await expect(checkCodecs({ ...setup, rows: [broken] }, makePayloads())).rejects.toBeInstanceOf(CheckFailure);
  });

  it('aborts on a confidential row whose token shows the payload', async () => {
    const setup = await setupCodecs();
    const b = setup.rows.find((r) => r.id === 'B')!;
    // Randomized (two seals differ) but not encrypted.
    const leaky: CodecRow = {
      ...b,
      id: 'leaky',
      confidential: true,
      seal: (claims) => b.seal({ ...claims, nonce: randomBytes(16).toString('base64url') } as typeof claims),
      open: (token: string) => {
        const { nonce: _nonce, ...claims } = b.open(token) as Record<string, unknown>;
        return claims;
      },
    };
    await expect(checkCodecs({ ...setup, rows: [leaky] }, makePayloads())).rejects.toThrow(/payload text visible/);
  });

  it('builds a 1 MiB look-alike token', () => {
    const big = largeToken('abc.def.ghi');
    expect(big).toHaveLength(MIB);
    expect(big.startsWith('abc.d')).toBe(true);
    expect(big.endsWith('ef.ghi')).toBe(true);
  });
});

describe('store checks', () => {
  it('memory and SQLite rows (and Redis/PostgreSQL when configured) consume once', async () => {
    const setup = await setupStores({ redisUrl: process.env['REDIS_URL'], databaseUrl: process.env['DATABASE_URL'] });
    try {
      const checks = await checkStores(setup);
      expect(checks).toHaveLength(setup.rows.length);
      expect(setup.rows.map((r) => r.id)).toContain('memory-bare');
    } finally {
      await setup.close();
    }
  });
});

describe('README block', () => {
  const doc = `# pkg\n\nintro\n\n${START_MARKER}\nold figures\n${END_MARKER}\n\n## License\n`;

  it('replaces only the text between the markers', () => {
    const out = replaceBenchBlock(doc, 'new figures');
    expect(out).toEqual({ ok: true, changed: true, text: `# pkg\n\nintro\n\n${START_MARKER}\nnew figures\n${END_MARKER}\n\n## License\n` });
  });

  it('refuses files without markers, with duplicates, or with the markers reversed', () => {
    expect(replaceBenchBlock('# pkg\n', 'x').ok).toBe(false);
    expect(replaceBenchBlock(doc + doc, 'x').ok).toBe(false);
    expect(replaceBenchBlock(`${END_MARKER}\n${START_MARKER}`, 'x').ok).toBe(false);
  });
});

describe('targets', () => {
  const job = (key: string, opsPerSec: number) => ({ key, concurrency: 1, rounds: [{ opsPerSec, samples: 12, opsPerBatch: 1 }], opsPerSec, spread: 0 });
  const result = (jobs: [string, number][]): BenchResult => ({
    schema: 1,
    startedAt: '',
    finishedAt: '',
    durationMs: 0,
    quick: true,
    env: { node: '', v8: '', openssl: '', platform: '', arch: '', cpu: '', cpus: 1 },
    harness: { rounds: 1, warmupMs: 0, minTimeMs: 0, minSamples: 1, maxSamples: 1, batchMs: 1, maxOpsPerBatch: 1 },
    payloads: { small: { jsonBytes: 400 }, '4k': { jsonBytes: 4096 } },
    codecs: { rows: [], skipped: [], checks: [] },
    jobs: Object.fromEntries(jobs.map(([k, v]) => [k, job(k, v)])),
    targets: [],
  });

  it('PASS and MISS follow the thresholds; missing rows are SKIP', () => {
    const targets = evaluateTargets(
      result([
        ['codec|hmac|seal|small', 90],
        ['codec|B|seal|small', 100],
        ['codec|hmac|open|small', 70],
        ['codec|B|open|small', 100],
        ['reject|hmac|open|1MiB', 1000],
      ]),
    );
    const by = (id: string) => targets.find((t) => t.id === id)!;
    expect(by('hmac.seal.vs-B').pass).toBe(true);
    expect(by('hmac.open.vs-B').pass).toBe(false);
    expect(by('hmac.seal.vs-SDK').pass).toBeNull();
    expect(by('hmac.reject-1MiB').value).toBeCloseTo(0.07);
    expect(by('hmac.reject-1MiB').pass).toBe(true);
  });
});

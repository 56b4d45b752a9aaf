// Smoke test of the harness's correctness checks. Nothing here is timed and no assertion is about speed:
// performance figures come only from running the bench (`pnpm bench`).
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CheckFailure, type CodecRow, checkCodecs, largeToken, MIB, makePayloads, setupCodecs } from '../src/codecs.js';
import { makeClaims } from '../src/payload.js';
import { END_MARKER, OUTCOMES_MARKERS, replaceBenchBlock, START_MARKER } from '../src/readme.js';
import { type BenchResult, evaluateTargets, outcomeE2eTable, outcomeStepTable, outcomesBlock } from '../src/report.js';
import { checkEvents, setupEvents } from '../src/events.js';
import { bareBatcher, checkStores, setupStores } from '../src/stores.js';
import { checkE2e, e2eJobs, setupE2e } from '../src/e2e.js';
import { checkGuards, GUARD_ARGS, GUARD_DATA, guardJobs, makeGuardArgs, makeGuardData, setupGuards } from '../src/guard.js';
import { checkOutcomes, makeOutcome, OUTCOME_JSON_BYTES, outcomeJobs, setupOutcomes } from '../src/outcomes.js';
import { checkKeys, keyJobs, setupKeys } from '../src/keys.js';

describe('payloads', () => {
  it('small is 400 B and 4k is 4096 B of JSON', () => {
    expect(Buffer.byteLength(JSON.stringify(makeClaims('small')))).toBe(400);
    expect(Buffer.byteLength(JSON.stringify(makeClaims('4k')))).toBe(4096);
  });
});

describe('codec checks', () => {
  it('every row (bare, libraries, the three @mrtr codecs) passes round trip, tamper, expiry and size checks', async () => {
    const setup = await setupCodecs();
    // The packages are built before this test (turbo): a skipped @mrtr codec means the bench calls it wrongly
    // (the codec rows were skipped unnoticed after createXCodec(keys) replaced createXCodec({ keys })).
    expect(setup.skipped).toEqual([]);
    expect(setup.rows.filter((r) => r.kind === 'mrtr').map((r) => r.id)).toEqual(['hmac', 'jwe', 'aead']);
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
  const job = (key: string, opsPerSec: number) => ({
    key,
    concurrency: 1,
    rounds: [{ opsPerSec, samples: 12, opsPerBatch: 1 }],
    opsPerSec,
    spread: 0,
  });
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

  it('issue 15 store targets: group commit against the single-statement and the bare batched twin', () => {
    const targets = evaluateTargets({
      ...result([
        ['store|postgres|c1', 95],
        ['store|postgres-bare|c1', 100],
        ['store|postgres|c32', 290],
        ['store|postgres-bare|c32', 100],
        ['store|postgres-bare-batch|c32', 300],
        ['store|postgres|c128', 600],
        ['store|postgres-bare|c128', 100],
        ['store|postgres-bare-batch|c128', 900],
        ['store|redis|c128', 160],
        ['store|redis-bare|c128', 100],
      ]),
      stores: { rows: [], skipped: [], notes: [], checks: [] },
    });
    const by = (id: string) => targets.find((t) => t.id === id)!;
    expect(by('postgres.c1.vs-bare')).toMatchObject({ pass: true, threshold: 0.9 });
    expect(by('postgres.c32.vs-bare')).toMatchObject({ pass: false, threshold: 3 });
    expect(by('postgres.c128.vs-bare')).toMatchObject({ pass: true, threshold: 5 });
    expect(by('postgres.c32.vs-bare-batch').pass).toBe(true);
    expect(by('postgres.c128.vs-bare-batch').pass).toBe(false);
    expect(by('redis.c128.vs-bare')).toMatchObject({ pass: true, threshold: 1.5 });
    expect(by('sqlite.c32.vs-bare').pass).toBeNull();
    expect(targets.some((t) => t.id === 'sqlite.c128.vs-bare')).toBe(false);
  });
});

describe('bare batcher', () => {
  it('coalesces the consumes of one tick into one batch, at most max per batch, each with its own answer', async () => {
    const batches: string[][] = [];
    const consume = bareBatcher(
      (ids) => {
        batches.push(ids);
        return ids.map((id) => id.startsWith('t'));
      },
      'microtask',
      3,
    );
    const results = await Promise.all(['t1', 'f1', 't2', 't3', 'f2'].map((id) => consume(id, 0)));
    expect(results).toEqual([true, false, true, true, false]);
    expect(batches).toEqual([
      ['t1', 'f1', 't2'],
      ['t3', 'f2'],
    ]);
  });
});

describe('event rows', () => {
  it('every guard row opens and mints, and each hooked row sees its three events', async () => {
    const setup = await setupEvents();
    try {
      expect(setup.rows.map((r) => r.id)).toEqual(['none', 'empty', 'otel-noop', 'otel-sdk']);
      const checks = await checkEvents(setup.rows);
      expect(checks).toHaveLength(4);
      expect(setup.rows.map((r) => r.seen.count)).toEqual([0, 5, 5, 5]);
    } finally {
      await setup.close();
    }
  });
});

describe('guard and end-to-end checks', () => {
  it('data and arguments have their exact sizes; every guard passes its checks before anything is timed', async () => {
    expect(GUARD_DATA.map((d) => Buffer.byteLength(JSON.stringify(makeGuardData(d))))).toEqual([400, 4096, 16384]);
    expect(GUARD_ARGS.map((a) => Buffer.byteLength(JSON.stringify(makeGuardArgs(a))))).toEqual([100, 10240]);
    const setup = await setupGuards();
    expect(setup.rows.map((r) => r.id)).toEqual(['hmac', 'jwe', 'aead']);
    const report = await checkGuards(setup);
    expect(report.checks).toHaveLength(4);
    const keys = guardJobs(setup, report).map((j) => j.key);
    expect(keys).toContain('guard|hmac|open|400|100');
    expect(keys).toContain('guard|B|seal|16k');
    expect(keys).toContain('canon|canonical|10k');
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('every server completes the two-round flow, in process and over loopback HTTP (memory rows without services)', async () => {
    const setup = await setupE2e({});
    try {
      expect(setup.rows.map((r) => r.letter)).toEqual(['a', 'b', 'c', 'd', 'e', 'h', 'i']);
      expect(setup.rows.map((r) => r.baseline)).toEqual([...Array(5).fill('sdk-plain'), 'sdk-plain-http', 'sdk-plain-http']);
      expect(await checkE2e(setup)).toHaveLength(7);
      // Each round starts with a fresh store (prepare): a flow after it completes as before.
      for (const row of setup.rows) await row.prepare?.();
      expect(await checkE2e(setup)).toHaveLength(7);
      expect(e2eJobs(setup).map((j) => j.key)).toContain('e2e|mrtr-aead|c16');
      expect(e2eJobs(setup).map((j) => j.key)).toContain('e2e|mrtr-hmac-http|c16');
    } finally {
      await setup.close();
    }
  });

  it('guard and e2e targets are ratios of rows of the same run', () => {
    // CPU-time figures at half the wall-clock ones for the hmac rows: the CPU ratio is reported next to the judged one.
    const job = (key: string, opsPerSec: number) => ({
      key,
      concurrency: 1,
      rounds: [{ opsPerSec, samples: 12, opsPerBatch: 1 }],
      opsPerSec,
      spread: 0,
      opsPerCpuSec: key.includes('hmac') ? opsPerSec / 2 : opsPerSec,
    });
    const jobs: [string, number][] = [
      ['guard|hmac|open|400|100', 70],
      ['guard|B|open|400', 100],
      ['guard|hmac|mint|400|100', 50],
      ['guard|B|seal|400', 100],
      ['e2e|mrtr-hmac|c1', 96],
      ['e2e|sdk-plain|c1', 100],
      // Over HTTP: i is divided by h, not by a.
      ['e2e|mrtr-hmac-http|c16', 45],
      ['e2e|sdk-plain-http|c16', 50],
      ['e2e|sdk-plain|c16', 450],
    ];
    const targets = evaluateTargets({
      schema: 1,
      startedAt: '',
      finishedAt: '',
      durationMs: 0,
      quick: true,
      env: { node: '', v8: '', openssl: '', platform: '', arch: '', cpu: '', cpus: 1 },
      harness: { rounds: 1, warmupMs: 0, minTimeMs: 0, minSamples: 1, maxSamples: 1, batchMs: 1, maxOpsPerBatch: 1 },
      payloads: { small: { jsonBytes: 400 }, '4k': { jsonBytes: 4096 } },
      guard: { codecs: ['hmac'], skipped: [], sizes: { data: {}, args: {}, claims: {} }, checks: [] },
      e2e: {
        rows: [
          { letter: 'c', id: 'mrtr-hmac', label: '', kind: 'mrtr', store: 'memory' },
          { letter: 'i', id: 'mrtr-hmac-http', label: '', kind: 'mrtr', store: 'memory', baseline: 'sdk-plain-http' },
        ],
        skipped: [],
        notes: [],
        checks: [],
      },
      jobs: Object.fromEntries(jobs.map(([k, v]) => [k, job(k, v)])),
      targets: [],
    });
    const by = (id: string) => targets.find((t) => t.id === id)!;
    expect(by('guard.hmac.open.vs-B').pass).toBe(true);
    expect(by('guard.hmac.open.vs-B').cpuValue).toBeCloseTo(0.35);
    expect(by('guard.hmac.mint.vs-B').pass).toBe(false);
    expect(by('guard.jwe.open.vs-codec').pass).toBeNull();
    expect(by('e2e.mrtr-hmac.c1.vs-a').value).toBeCloseTo(0.96);
    expect(by('e2e.mrtr-hmac.c1.vs-a').pass).toBe(true);
    expect(by('e2e.mrtr-hmac.c16.vs-a').pass).toBeNull();
    expect(by('e2e.mrtr-hmac-http.c16.vs-h').value).toBeCloseTo(0.9);
    expect(by('e2e.mrtr-hmac-http.c16.vs-h').pass).toBe(false);
    expect(targets.some((t) => t.id === 'e2e.mrtr-hmac-http.c16.vs-a')).toBe(false);
  });
});

describe('outcome recording rows (issue 20)', () => {
  it('the recorded outcome is 300 B of JSON shaped like what @mrtr/mcp-server records', () => {
    const outcome = makeOutcome() as { r: { content: { type: string; text: string }[] } };
    expect(Buffer.byteLength(JSON.stringify(outcome))).toBe(OUTCOME_JSON_BYTES);
    expect(outcome.r.content[0]?.type).toBe('text');
  });

  it('every store (memory and SQLite, Redis/PostgreSQL when configured) and every e2e row passes its checks before timing', async () => {
    const setup = await setupOutcomes({ redisUrl: process.env['REDIS_URL'], databaseUrl: process.env['DATABASE_URL'] });
    try {
      expect(setup.skipped).toEqual([]);
      expect(setup.stores.map((r) => r.backend)).toEqual(expect.arrayContaining(['memory', 'sqlite']));
      expect(setup.e2e.filter((r) => r.store === 'memory').map((r) => r.recordOutcomes)).toEqual([false, true]);
      const report = await checkOutcomes(setup);
      expect(report.checks).toHaveLength(setup.stores.length + setup.e2e.length);
      expect(report.sealedOutcome.length).toBeGreaterThan(OUTCOME_JSON_BYTES);
      const keys = outcomeJobs(setup, report).map((j) => j.key);
      expect(new Set(keys).size).toBe(keys.length);
      for (const key of [
        'outcome|guard|memory|open|c1',
        'outcome|guard|memory|admit-record|c32',
        'outcome|store|sqlite|claim-record|c128',
        'outcome|e2e|memory|on|c16',
      ]) {
        expect(keys).toContain(key);
      }
      // Not drawn by the chart, which counts every store| and e2e| job.
      expect(keys.every((k) => k.startsWith('outcome|'))).toBe(true);
    } finally {
      await setup.close();
    }
  });

  it('a timed recording that is not a first use aborts instead of being measured', async () => {
    const setup = await setupOutcomes({ e2e: false, sqlite: false });
    try {
      const report = await checkOutcomes(setup);
      const job = outcomeJobs(setup, report).find((j) => j.key === 'outcome|store|memory|claim-record|c1')!;
      await job.prepare?.();
      await job.op();
      // The same store, the ids counted again from the first: the claim finds the id held, with its outcome.
      const again = outcomeJobs(setup, report).find((j) => j.key === 'outcome|store|memory|claim-record|c1')!;
      await expect(again.op()).rejects.toThrow(/claim of a fresh id → recorded/);
    } finally {
      await setup.close();
    }
  });

  it('tables put without and with side by side with their ratio; the section has its own markers', () => {
    const job = (key: string, opsPerSec: number, rounds: number[] = [opsPerSec]) => ({
      key,
      concurrency: 1,
      rounds: rounds.map((r) => ({ opsPerSec: r, samples: 12, opsPerBatch: 1, opsPerCpuSec: r })),
      opsPerSec,
      spread: 0,
      opsPerCpuSec: opsPerSec,
    });
    const jobs = [
      job('outcome|guard|postgres|open|c32', 40_000, [40_000, 40_000]),
      job('outcome|guard|postgres|admit-record|c32', 10_000, [8_000, 12_000]),
      job('outcome|store|postgres|consume|c32', 50_000),
      job('outcome|store|postgres|claim-record|c32', 5_000),
      job('outcome|e2e|memory|off|c1', 500),
      job('outcome|e2e|memory|on|c1', 450),
    ];
    const result: BenchResult = {
      schema: 1,
      startedAt: '',
      finishedAt: '2026-12-04T00:00:00.000Z',
      durationMs: 0,
      quick: true,
      env: { node: '', v8: '', openssl: '', platform: '', arch: '', cpu: 'cpu', cpus: 2, loadavg: [1, 2] },
      harness: { rounds: 2, warmupMs: 0, minTimeMs: 0, minSamples: 1, maxSamples: 1, batchMs: 1, maxOpsPerBatch: 1 },
      payloads: { small: { jsonBytes: 400 }, '4k': { jsonBytes: 4096 } },
      outcomes: {
        stores: [{ backend: 'postgres', label: 'pg', concurrency: [1, 32] }],
        e2e: [
          { id: 'memory-off', store: 'memory', recordOutcomes: false, label: 'c: memory, recordOutcomes: false' },
          { id: 'memory-on', store: 'memory', recordOutcomes: true, label: 'c: memory, recordOutcomes: true' },
        ],
        skipped: [],
        notes: [],
        checks: [],
        sizes: { outcomeJson: 300, sealedOutcome: 700, data: 400, args: 100 },
        loadavg: { start: [1, 2, 3], end: [4, 5, 6] },
      },
      jobs: Object.fromEntries(jobs.map((j) => [j.key, j])),
      targets: [],
    };
    expect(outcomeStepTable(result, 'guard')).toContain('| PostgreSQL | 32 | 40k ±0% | 10k ±0% | 0.25× | 0.20×–0.30× | 0.25× |');
    expect(outcomeStepTable(result, 'guard')).not.toContain('| PostgreSQL | 1 |');
    expect(outcomeStepTable(result, 'store')).toContain('| PostgreSQL | 32 | 50k ±0% | 5.0k ±0% | 0.10× |');
    expect(outcomeE2eTable(result)).toContain('| c: memory | 1 | 500 ±0% | 450 ±0% | 0.90× |');
    const block = outcomesBlock(result);
    expect(block).toContain('Load average (1, 5, 15 min): 1.00, 2.00, 3.00 at the start, 4.00, 5.00, 6.00 at the end.');
    // Rewriting the outcome section leaves the main bench block alone, and the other way round.
    const doc = `${START_MARKER}\nmain\n${END_MARKER}\n\n${OUTCOMES_MARKERS.start}\nold\n${OUTCOMES_MARKERS.end}\n`;
    const out = replaceBenchBlock(doc, 'new', OUTCOMES_MARKERS);
    expect(out).toEqual({
      ok: true,
      changed: true,
      text: `${START_MARKER}\nmain\n${END_MARKER}\n\n${OUTCOMES_MARKERS.start}\nnew\n${OUTCOMES_MARKERS.end}\n`,
    });
    expect(replaceBenchBlock(doc, 'x')).toMatchObject({ ok: true, text: doc.replace('main', 'x') });
  });
});

describe('idempotency key rows (issue 42)', () => {
  it('a keyed call runs once and its retry is replayed, an unkeyed call runs every time; both jobs run once untimed', async () => {
    const setup = await setupKeys();
    if ('skipped' in setup) throw new Error(setup.skipped);
    try {
      expect(await checkKeys(setup)).toHaveLength(1);
      const jobs = keyJobs(setup);
      expect(jobs.map((j) => j.key)).toEqual(['keys|keyed|c16', 'keys|unkeyed|c16']);
      const before = setup.runs.count;
      for (const job of jobs) {
        await job.prepare?.();
        await job.op();
      }
      expect(setup.runs.count).toBe(before + 2);
    } finally {
      await setup.close();
    }
  });

  it('the keys target is keyed ÷ unkeyed at c16, required ≥ 0.9×', () => {
    const job = (key: string, opsPerSec: number) => ({
      key,
      concurrency: 16,
      rounds: [{ opsPerSec, samples: 12, opsPerBatch: 1 }],
      opsPerSec,
      spread: 0,
    });
    const jobs = { 'keys|keyed|c16': job('keys|keyed|c16', 900), 'keys|unkeyed|c16': job('keys|unkeyed|c16', 1000) };
    const result = { keys: { checks: [] }, jobs, targets: [] } as unknown as BenchResult;
    const target = evaluateTargets(result).find((t) => t.id === 'keys.c16.vs-unkeyed');
    expect(target).toMatchObject({ pkg: 'mcp-server', op: '>=', threshold: 0.9, pass: true });
    expect(target!.value).toBeCloseTo(0.9);
  });
});

describe('throughput rows (issue 43)', () => {
  it('without REDIS_URL / DATABASE_URL: only the SQLite task rows, each op a whole checked task life, and ratios from the results', async () => {
    const { setupThroughput, throughputRatios } = await import('../src/throughput.js');
    const setup = await setupThroughput({});
    try {
      expect(setup.notes).toHaveLength(2);
      expect(setup.jobs.map((job) => job.key)).toEqual(['throughput|task|sqlite|life|c32', 'throughput|task|sqlite|bare-life|c32']);
      // Each op creates, completes and reads back a task of its own (it throws when the store does not).
      for (const job of setup.jobs) for (let i = 0; i < 3; i++) await job.op();
      expect(throughputRatios((key) => (key.endsWith('bare-life|c32') ? 200 : 100))).toContain(
        'sqlite task life ÷ bare, c32: 100 / 200 ops/s = 0.50×',
      );
    } finally {
      await setup.close();
    }
  });
});

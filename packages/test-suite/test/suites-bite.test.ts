import type { KeyRing } from '@mrtr/core';
import { describe, expect, it } from 'vitest';
import { codecCompliance, storeCompliance } from '../src/index.js';
import {
  type ReferenceCodecFlaws,
  collect,
  lossyReferenceBackend,
  misansweringBatchStore,
  type RecordingFlaws,
  referenceCodec,
  referenceRecordingStore,
  referenceStore,
  runCollected,
} from './fixtures.js';

const quiet = { report: () => {} };

/**
 * Runs the codec suite on the reference codec with `flaws`: only the tests whose name has one of `only`,
 * if given; with `factoryWithCap` when `withCap` (then the linearity tests measure at 64 KiB).
 */
async function runCodecSuite(flaws: ReferenceCodecFlaws, { only, withCap = false }: { only?: readonly string[]; withCap?: boolean } = {}) {
  const factoryWithCap = withCap ? { factoryWithCap: (keys: KeyRing, cap: number) => referenceCodec(keys, flaws, cap) } : {};
  const tests = collect((t) => codecCompliance(t, (keys) => referenceCodec(keys, flaws), { ...quiet, ...factoryWithCap }));
  return runCollected(only === undefined ? tests : tests.filter((test) => only.some((name) => test.name.includes(name))));
}

describe('the codec suite', () => {
  it('passes a correct reference codec', async () => {
    const { failed, passed } = await runCodecSuite({}, { withCap: true });
    expect(failed).toEqual([]);
    expect(passed.length).toBeGreaterThanOrEqual(22);
  }, 300_000);

  it.each([
    ['a codec without a MAC', { noMac: true }, ['bit flip', 'another secret']],
    ['a codec that ignores trailing segments', { ignoresTrailing: true }, ['extension', 'structured mutations']],
    ['a codec that accepts non-canonical base64url', { lenientBase64: true }, ['non-canonical base64url']],
    ['a codec without a size cap', { noSizeCap: true }, ['maxTokenBytes']],
    ['a codec that throws plain Errors', { throwsPlainErrors: true }, ['arbitrary strings']],
  ] as const)(
    'fails %s',
    async (_label, flaws, mustFail) => {
      const { failed } = await runCodecSuite(flaws);
      for (const fragment of mustFail) expect(failed.some((name) => name.includes(fragment))).toBe(true);
    },
    300_000,
  );

  // The error-hygiene tests only (the rest of the suite is shown to bite above).
  const hygiene = ['concrete MrtrError class', 'fresh error object', 'puts no token'];
  it.each([
    ['a codec whose rejections carry a stack trace', { stackTraces: true }, ['no stack trace']],
    ['a codec that puts the token into error messages', { tokenInMessage: true }, ['its fixed message', 'puts no token']],
    ['a codec that keeps the token in an error cause', { tokenInCause: true }, ['puts no token']],
    ['a codec that throws one shared error per class', { sharedErrors: true }, ['fresh error object']],
    ['a codec that leaves Error.stackTraceLimit changed', { leaksStackTraceLimit: true }, hygiene],
    ['a codec that throws the base MrtrError', { untypedErrors: true }, ['concrete MrtrError class']],
  ] as const)(
    'fails %s',
    async (_label, flaws, mustFail) => {
      const limit = Error.stackTraceLimit;
      try {
        const { failed, passed } = await runCodecSuite(flaws, { only: hygiene });
        expect(failed.length + passed.length).toBe(3);
        for (const fragment of mustFail)
          expect(
            failed.filter((name) => name.includes(fragment)),
            fragment,
          ).not.toEqual([]);
      } finally {
        Error.stackTraceLimit = limit;
      }
    },
    300_000,
  );

  it('fails a codec with a check that is quadratic in the token length, on invalid input and on genuine tokens', async () => {
    // Only the linearity tests, measured at the codec's own cap (8 KiB; at 64 KiB one open of the slow
    // check takes seconds), which also shows they bite without factoryWithCap.
    const { failed, passed } = await runCodecSuite({ quadraticScan: true }, { only: ['per-character cost'] });
    expect(failed.some((name) => name.includes('rejects invalid input near the cap'))).toBe(true);
    expect(failed.some((name) => name.includes('opens genuine tokens near the cap'))).toBe(true);
    expect(passed).toEqual([]);
  }, 300_000);

  it('fails a codec whose factoryWithCap ignores the cap', async () => {
    const tests = collect((t) =>
      codecCompliance(t, (keys) => referenceCodec(keys), { ...quiet, factoryWithCap: (keys) => referenceCodec(keys) }),
    );
    const { failed } = await runCollected(tests.filter((test) => test.name.includes('per-character cost')));
    expect(failed).toHaveLength(2);
  });
});

describe('the store suite', () => {
  it('passes a correct reference store', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed } = await runCollected(
      collect((it) => storeCompliance(it, (o) => referenceStore({ ...o, now: clock.now }), { clock, sharedBackend: false })),
    );
    expect(failed).toEqual([]);
  });

  describe('outcomes: a store that records outcomes is held to their bounds', () => {
    const run = async (flaws: RecordingFlaws) => {
      let t = 1_000_000;
      const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
      return runCollected(
        collect((it) =>
          storeCompliance(it, (o) => referenceRecordingStore(flaws, { ...o, now: clock.now }), {
            clock,
            sharedBackend: false,
            outcomes: true,
          }),
        ),
      );
    };
    it('passes a correct recording store', async () => {
      const { failed, passed } = await run({});
      expect(failed).toEqual([]);
      expect(passed.filter((name) => /claim|record|outcome|oracle/.test(name)).length).toBeGreaterThanOrEqual(8);
    });
    it.each([
      ['keeps outcomes of any length', { noMaxOutcome: true }, ['no outcome longer than maxOutcomeBytes']],
      ['has no store-wide budget', { noBudget: true }, ['never pass outcomeBudgetBytes']],
      ['checks the budget apart from taking it', { racyBudget: true }, ['never pass outcomeBudgetBytes']],
      ['never drops an outcome for misses', { noMisses: true }, ['no oracle', 'other fingerprints']],
    ] as const)('fails a store that %s', async (_label, flaws, mustFail) => {
      const { failed } = await run(flaws);
      for (const name of mustFail)
        expect(
          failed.some((f) => f.includes(name)),
          `${name} in ${JSON.stringify(failed)}`,
        ).toBe(true);
    });
  });

  it('holds a store to what it declares: outcomes: true without claim/record fails, outcomes: false with them fails', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const lacking = await runCollected(
      collect((it) =>
        storeCompliance(it, (o) => referenceStore({ ...o, now: clock.now }), { clock, sharedBackend: false, outcomes: true }),
      ),
    );
    expect(lacking.failed.some((name) => name.includes('declares its capabilities'))).toBe(true);
    expect(lacking.failed.some((name) => name.includes('claim: first'))).toBe(true);
    const hiding = await runCollected(
      collect((it) =>
        storeCompliance(it, (o) => referenceRecordingStore({}, { ...o, now: clock.now }), { clock, sharedBackend: false, outcomes: false }),
      ),
    );
    expect(hiding.failed.some((name) => name.includes('declares its capabilities'))).toBe(true);
    expect([...hiding.passed, ...hiding.failed].some((name) => name.includes('claim: first'))).toBe(false);
  });

  it('fails a get-then-set store on the parallel test', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed } = await runCollected(
      collect((it) =>
        storeCompliance(it, (o) => referenceStore({ ...o, getThenSet: true, now: clock.now }), { clock, sharedBackend: false }),
      ),
    );
    expect(failed.some((name) => name.includes('parallel consumes'))).toBe(true);
  });

  it('fails a store whose factory ignores an unknown option (a misspelt bound left at its default)', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed } = await runCollected(
      collect((it) => storeCompliance(it, () => referenceStore({ now: clock.now }), { clock, sharedBackend: false })),
    );
    expect(failed).toEqual(['store compliance: refuses an unknown option with a TypeError naming it']);
  });

  it("fails a batching store that hands a waiter another id's answer on the burst test (and only there)", async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed } = await runCollected(
      collect((it) => storeCompliance(it, (o) => misansweringBatchStore({ ...o, now: clock.now }), { clock, sharedBackend: false })),
    );
    expect(failed).toHaveLength(1);
    expect(failed[0]).toContain('burst of distinct and repeated ids');
  });

  describe('lostReply: "a consume whose reply is lost is resolved correctly"', () => {
    const run = async (resolve: 'owner' | 'fail' | 'exists') => {
      let t = 1_000_000;
      const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
      const backend = lossyReferenceBackend(resolve, clock.now);
      return runCollected(collect((it) => storeCompliance(it, backend.factory, { clock, lostReply: backend.lostReply })));
    };
    const lostTest = (names: string[]) => names.filter((name) => name.includes('reply is lost'));

    it('passes a store that asks whether the stored owner value is its own', async () => {
      const { passed, failed } = await run('owner');
      expect(failed).toEqual([]);
      expect(lostTest(passed)).toHaveLength(1);
    });

    it('fails a store that rejects every lost reply (burns a valid state)', async () => {
      expect(lostTest((await run('fail')).failed)).toHaveLength(1);
    });

    it("fails a store that takes any stored value as its own (someone else's write)", async () => {
      expect(lostTest((await run('exists')).failed)).toHaveLength(1);
    });

    it('refuses lostReply without a shared backend', () => {
      const backend = lossyReferenceBackend('owner', Date.now);
      expect(() => collect((it) => storeCompliance(it, backend.factory, { sharedBackend: false, lostReply: backend.lostReply }))).toThrow(
        TypeError,
      );
    });
  });
});

import { describe, expect, it } from 'vitest';
import { codecCompliance, storeCompliance } from '../src/index.js';
import { collect, referenceCodec, referenceStore, runCollected } from './fixtures.js';

const quiet = { report: () => {} };

describe('the codec suite', () => {
  it('passes a correct reference codec', async () => {
    const { failed, passed } = await runCollected(collect((t) => codecCompliance(t, (keys) => referenceCodec(keys), quiet)));
    expect(failed).toEqual([]);
    expect(passed.length).toBeGreaterThanOrEqual(14);
  }, 300_000);

  it.each([
    ['a codec without a MAC', { noMac: true }, ['bit flip', 'another secret']],
    ['a codec that ignores trailing segments', { ignoresTrailing: true }, ['extension', 'structured mutations']],
    ['a codec that accepts non-canonical base64url', { lenientBase64: true }, ['non-canonical base64url']],
    ['a codec without a size cap', { noSizeCap: true }, ['maxTokenBytes']],
    ['a codec that throws plain Errors', { throwsPlainErrors: true }, ['arbitrary strings']],
  ] as const)('fails %s', async (_label, flaws, mustFail) => {
    const { failed } = await runCollected(collect((t) => codecCompliance(t, (keys) => referenceCodec(keys, flaws), quiet)));
    for (const fragment of mustFail) expect(failed.some((name) => name.includes(fragment))).toBe(true);
  }, 300_000);
});

describe('the store suite', () => {
  it('passes a correct reference store', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed } = await runCollected(
      collect((it) => storeCompliance(it, () => referenceStore({ now: clock.now }), { clock, sharedBackend: false })),
    );
    expect(failed).toEqual([]);
  });

  it('fails a get-then-set store on the parallel test', async () => {
    let t = 1_000_000;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    const { failed } = await runCollected(
      collect((it) =>
        storeCompliance(it, () => referenceStore({ getThenSet: true, now: clock.now }), { clock, sharedBackend: false }),
      ),
    );
    expect(failed.some((name) => name.includes('parallel consumes'))).toBe(true);
  });
});

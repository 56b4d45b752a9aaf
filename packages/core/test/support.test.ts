import { describe, expect, it } from 'vitest';
import { codecFormat } from '../src/entry-codec.js';
import { fullStoreCapabilities, storeCapabilities } from '../src/entry-store.js';
import { generateKey, KeyRing } from '../src/index.js';

describe('codecFormat', () => {
  const format = codecFormat('createTestCodec', 't1');
  const code = (run: () => unknown): unknown => {
    try {
      run();
    } catch (error) {
      return (error as { code?: unknown }).code;
    }
    return undefined;
  };

  it('holds the default limits, frozen, and the prefix of a key id', () => {
    expect(format.limits).toEqual({ defaultMaxTokenBytes: 16_384, minMaxTokenBytes: 256, maxMaxTokenBytes: 524_288 });
    expect(Object.isFrozen(format.limits)).toBe(true);
    expect(format.prefixFor('k1')).toBe('t1.k1.');
    expect(codecFormat('f', 'v', { defaultMaxTokenBytes: 300, minMaxTokenBytes: 1, maxMaxTokenBytes: 400 }).limits.maxMaxTokenBytes).toBe(
      400,
    );
  });

  it('parses options labelled with the factory', () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    expect(format.parseOptions(keys, undefined).maxTokenBytes).toBe(16_384);
    expect(format.parseOptions(keys, { maxTokenBytes: 1000 }).maxTokenBytes).toBe(1000);
    expect(() => format.parseOptions(keys, { maxTokenBytes: 1 })).toThrow(RangeError);
    expect(() => format.parseOptions({}, undefined)).toThrow('createTestCodec: the first argument must be a KeyRing');
  });

  it('reads the prefix after the type, the cap and the least length, in that order', () => {
    expect(format.readPrefix('t1.k1.abcd', 100, 4)).toEqual({ kid: 'k1', end: 6 });
    expect(code(() => format.readPrefix(42, 100, 4))).toBe('ERR_STATE_MALFORMED');
    expect(code(() => format.readPrefix('t1.k1.abcd', 9, 4))).toBe('ERR_STATE_TOO_LARGE');
    expect(code(() => format.readPrefix('t1.k1.abc', 100, 5))).toBe('ERR_STATE_MALFORMED');
    expect(code(() => format.readPrefix('t2.k1.abcd', 100, 4))).toBe('ERR_STATE_MALFORMED');
    expect(code(() => format.readPrefix('t1.k!.abcd', 100, 4))).toBe('ERR_STATE_MALFORMED');
  });
});

describe('fullStoreCapabilities', () => {
  it('declares every capability, with the outcome bounds and an optional capacity', () => {
    const limits = { maxOutcomeBytes: 10, outcomeBudgetBytes: 100, other: 1 };
    expect(fullStoreCapabilities(limits)).toEqual({
      shared: true,
      outcomes: { maxOutcomeBytes: 10, outcomeBudgetBytes: 100 },
      keyExchange: true,
      clock: true,
      leases: true,
      epoch: true,
    });
    expect(fullStoreCapabilities(limits, 5).capacity).toBe(5);
    expect('capacity' in fullStoreCapabilities(limits)).toBe(false);
  });

  it('passes storeCapabilities on a store with every method', () => {
    const method = async () => true;
    const store = {
      capabilities: fullStoreCapabilities({ maxOutcomeBytes: 1, outcomeBudgetBytes: 2 }),
      ...Object.fromEntries(
        ['consume', 'claim', 'record', 'keyFingerprints', 'time', 'renew', 'release', 'ledgerEpoch'].map((m) => [m, method]),
      ),
    };
    expect(storeCapabilities(store as never).leases).toBe(true);
  });
});

import { type CodecFactory, generateKey, KeyRing, type MrtrError, type MrtrErrorCode, type StateCodec } from '@mrtr/core';
import type { StateClaims } from '@mrtr/core/codec';
import { canonicalJson } from '@mrtr/core/encoding';
import { rejectsMrtr } from '../assert.js';
import { sampleClaims } from '../claims.js';

/** Builds a codec on a key ring with a given `maxTokenBytes` (the codec's own option). */
export type CappedCodecFactory = (keys: KeyRing, maxTokenBytes: number) => StateCodec | Promise<StateCodec>;

/** The codes a rejected token may carry. */
export const REJECTION_CODES: readonly MrtrErrorCode[] = [
  'ERR_STATE_MALFORMED',
  'ERR_STATE_INTEGRITY',
  'ERR_KEY_UNKNOWN',
  'ERR_STATE_TOO_LARGE',
];

/** A ring of fresh random secrets, the first kid primary. */
export const ring = (...kids: string[]): KeyRing => new KeyRing(kids.map((kid) => ({ kid, secret: generateKey() })));

export function deepClaimsEqual(actual: StateClaims, expected: StateClaims): boolean {
  return canonicalJson(actual) === canonicalJson(expected);
}

/** {@link CappedCodecFactory} as the properties call it (a codec with `unseal`). */
type CappedStateCodecFactory = (keys: KeyRing, maxTokenBytes: number) => StateCodec | Promise<StateCodec>;

/** What every group of codec properties gets from `codecCompliance`. */
export interface CodecSuite {
  factory: CodecFactory;
  factoryWithCap: CappedStateCodecFactory | undefined;
  fuzzRuns: number;
  label: string;
  report: (line: string) => void;
  /** Registers one property under the suite's label and timeout. */
  test: (name: string, fn: () => Promise<void>) => void;
  /** A ring `k1`, a codec on it and three genuine tokens of different payloads. */
  setup: () => Promise<{ keys: KeyRing; codec: StateCodec; tokens: string[] }>;
  /** Opens `input` and returns the MrtrError it was rejected with (one of `codes`); fails otherwise. */
  expectRejected: (codec: StateCodec, input: unknown, context: string, codes?: readonly MrtrErrorCode[]) => Promise<MrtrError>;
}

export function codecSuite(
  it: (name: string, fn: () => Promise<void>, timeout?: number) => void,
  factory: CodecFactory,
  options: {
    fuzzRuns: number;
    timeoutMs: number;
    label: string;
    report: (line: string) => void;
    factoryWithCap?: CappedStateCodecFactory | undefined;
  },
): CodecSuite {
  return {
    factory,
    factoryWithCap: options.factoryWithCap,
    fuzzRuns: options.fuzzRuns,
    label: options.label,
    report: options.report,
    test: (name, fn) => it(`${options.label} compliance: ${name}`, fn, options.timeoutMs),
    setup: async () => {
      const keys = ring('k1');
      const codec = await factory(keys);
      const tokens = [
        await codec.seal(sampleClaims({ step: 1, answers: { confirm: true } })),
        await codec.seal(sampleClaims({ text: 'ünïcødé ✓ 😀', list: [1, 2, 3], nested: { a: { b: null } } })),
        await codec.seal(sampleClaims('x')),
      ];
      return { keys, codec, tokens };
    },
    expectRejected: (codec, input, context, codes = REJECTION_CODES) => rejectsMrtr(() => codec.unseal(input as string), context, codes),
  };
}

import type { CodecFactory } from '@mrtr/core';
import { type CappedCodecFactory, codecSuite } from './codec/context.js';
import { errorHygieneProperties } from './codec/error-hygiene.js';
import { eventProperties } from './codec/events.js';
import { hostileInputProperties } from './codec/hostile-input.js';
import { keyProperties } from './codec/keys.js';
import { linearityProperties } from './codec/linearity.js';
import { roundTripProperties, sealJsonProperties } from './codec/round-trip.js';
import { tamperingProperties } from './codec/tampering.js';
import type { TestFn } from './types.js';

export type { CappedCodecFactory } from './codec/context.js';

export interface CodecComplianceOptions {
  /** Label used in test names. @default the codec's `id` once created, else "codec" */
  name?: string;
  /** fast-check runs per property; values below 10,000 are raised to 10,000. @default 10_000 */
  fuzzRuns?: number;
  /** Per-test timeout in ms. @default 120_000 */
  timeoutMs?: number;
  /** Receives a line per test with the number of hostile inputs it ran (for reports). @default console.info */
  report?: (line: string) => void;
  /**
   * The codec with a chosen `maxTokenBytes`, e.g. `(keys, maxTokenBytes) => createMyCodec(keys, { maxTokenBytes })`.
   * The linearity properties then measure at 64 KiB (it is called with 65 536, which the codec must
   * accept); without it they measure at the default codec's own cap, which sees less of a slow check.
   */
  factoryWithCap?: CappedCodecFactory;
}

const MIN_FUZZ_RUNS = 10_000;

/**
 * The security contract of a `StateCodec`. Every property is always on: no option switches one off.
 * Call it from a test file: `codecCompliance(it, (keys) => createMyCodec(keys))`.
 */
export function codecCompliance(it: TestFn, factory: CodecFactory, options: CodecComplianceOptions = {}): void {
  const suite = codecSuite(it, factory, {
    fuzzRuns: Math.max(MIN_FUZZ_RUNS, options.fuzzRuns ?? MIN_FUZZ_RUNS),
    timeoutMs: options.timeoutMs ?? 120_000,
    label: options.name ?? 'codec',
    report: options.report ?? ((line: string) => console.info(line)),
    factoryWithCap: options.factoryWithCap,
  });
  roundTripProperties(suite);
  sealJsonProperties(suite);
  keyProperties(suite);
  tamperingProperties(suite);
  hostileInputProperties(suite);
  errorHygieneProperties(suite);
  eventProperties(suite);
  linearityProperties(suite);
}

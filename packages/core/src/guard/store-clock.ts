import { ClockSkewError, MrtrError, StateExpiredError } from '../errors.js';
import type { ReplayStore } from '../interfaces.js';

/** What one measurement of the store's clock found (see {@link StoreClock}). */
export interface ClockSample {
  /** The store's clock minus this instance's, ms (positive: this instance is behind). */
  offsetMs: number;
  /** How uncertain the offset is: half the round trip of the measurement, ms. */
  uncertaintyMs: number;
  /** Whether the offset is past the tolerance even at its most favourable reading. */
  skewed: boolean;
}

/**
 * This instance's view of the store's clock, for a store that declares `clock`: measured in the background (never on a
 * request's path) at most every `checkMs`, the first time on the first spend or mint. While the last measurement says
 * the offset is past `toleranceMs` (`clockSkewMs`), every spend and mint is refused with `ERR_CLOCK_SKEW` — fail closed
 * and loudly: `onSample` reports every measurement (the guard's `store.clock` event, the `mrtr_clock_skew`
 * gauge).
 */
export interface StoreClock {
  /** Throws `ERR_CLOCK_SKEW` while the last measurement is skewed; starts a measurement when none is recent. */
  assertWithin(): void;
  /** Measures now and resolves the sample (a store failure rejects, and the last sample stays). */
  measure(): Promise<ClockSample>;
  /**
   * What a refusal from the store becomes: `ERR_STATE_EXPIRED` from a store with a clock for a state this instance
   * held live is clock skew (a measurement is started); anything else is returned as it is.
   */
  refusal(error: unknown): unknown;
}

export interface StoreClockOptions {
  now: () => number;
  toleranceMs: number;
  /** How often to measure again; 0: only when the store refuses a state as expired. */
  checkMs: number;
  onSample: (sample: ClockSample) => void;
}

/** A {@link StoreClock} over `store.time()`; without a store clock, one that never refuses. */
export function createStoreClock(store: ReplayStore | undefined, hasClock: boolean, options: StoreClockOptions): StoreClock {
  if (store === undefined || !hasClock) return { assertWithin: () => {}, measure: async () => NO_SKEW, refusal: (error) => error };
  const { now, toleranceMs, checkMs, onSample } = options;
  let last: ClockSample | undefined;
  let measuredAt = Number.NEGATIVE_INFINITY;
  let running: Promise<ClockSample> | undefined;

  const sample = async (): Promise<ClockSample> => {
    const start = performance.now();
    const local = now();
    const storeTime = await store.time!();
    const roundTrip = performance.now() - start;
    if (typeof storeTime !== 'number' || !Number.isFinite(storeTime)) throw new TypeError('store.time must resolve a finite number');
    const uncertaintyMs = roundTrip / 2;
    const offsetMs = storeTime - (local + uncertaintyMs);
    const measured: ClockSample = { offsetMs, uncertaintyMs, skewed: Math.abs(offsetMs) - uncertaintyMs > toleranceMs };
    last = measured;
    measuredAt = performance.now();
    onSample(measured);
    return measured;
  };
  const measure = (): Promise<ClockSample> => {
    running ??= sample().finally(() => {
      running = undefined;
    });
    return running;
  };
  const measureLater = (): void => {
    measure().catch(() => {});
  };
  return {
    assertWithin() {
      if (running === undefined && (last === undefined || (checkMs > 0 && performance.now() - measuredAt >= checkMs))) measureLater();
      if (last?.skewed === true) throw new ClockSkewError();
    },
    measure,
    refusal(error) {
      if (!(error instanceof StateExpiredError) || !MrtrError.is(error)) return error;
      measureLater();
      return new ClockSkewError({ cause: error });
    },
  };
}

const NO_SKEW: ClockSample = Object.freeze({ offsetMs: 0, uncertaintyMs: 0, skewed: false });

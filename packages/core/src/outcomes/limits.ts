import { intOption, type OptionNames } from '../util/validate.js';

/**
 * Claims of an id with another fingerprint that a store takes before it drops the id's outcome: the
 * {@link MAX_FINGERPRINT_MISSES}-th marks the id "done, not kept" (`''`), recorded or not yet, so that a copy of a spent
 * state is no oracle for its answers (wrong guesses cost the guesser the outcome, for everyone).
 */
export const MAX_FINGERPRINT_MISSES: number = 3;

/**
 * The outcome bounds every store that records outcomes takes (each store documents its own defaults; these are the
 * usual ones). Past either, `record` keeps `''` ("done, not kept": retries become replays) and resolves `false`.
 */
export interface OutcomeStoreLimits {
  /**
   * Largest outcome kept, in bytes (a sealed outcome is an ASCII token). A sealed tool result of a few hundred bytes
   * of text is about 1 KiB; a re-ask that quotes long arguments about 15 KiB.
   * @default 16_384
   */
  maxOutcomeBytes?: number | undefined;
  /**
   * Most bytes of outcomes held at once by the store (its namespace), whoever recorded them: a bound on what safe
   * retry costs the backend that holds for any lifetime. A store may count an outcome until a little after its id
   * expires (a coarse clock), never less.
   * @default 67_108_864 (64 MiB)
   */
  outcomeBudgetBytes?: number | undefined;
}

/** The names of {@link OutcomeStoreLimits}, for a store's list of known options (spread into it). */
export const OUTCOME_STORE_LIMIT_OPTIONS: OptionNames<OutcomeStoreLimits> = { maxOutcomeBytes: true, outcomeBudgetBytes: true };

/** Default of {@link OutcomeStoreLimits.maxOutcomeBytes}. */
export const DEFAULT_MAX_OUTCOME_BYTES: number = 16_384;
/** Default of {@link OutcomeStoreLimits.outcomeBudgetBytes}. */
export const DEFAULT_OUTCOME_BUDGET_BYTES: number = 64 * 1024 * 1024;

/** The parsed {@link OutcomeStoreLimits}. */
export interface ParsedOutcomeStoreLimits {
  maxOutcomeBytes: number;
  outcomeBudgetBytes: number;
}

/** Parses {@link OutcomeStoreLimits} (labelled `TypeError`/`RangeError` on misuse). */
export function parseOutcomeStoreLimits(label: string, options: OutcomeStoreLimits): ParsedOutcomeStoreLimits {
  const maxOutcomeBytes = intOption(`${label}: maxOutcomeBytes`, options.maxOutcomeBytes, DEFAULT_MAX_OUTCOME_BYTES, 0, 512 * 1024 * 1024);
  const outcomeBudgetBytes = intOption(
    `${label}: outcomeBudgetBytes`,
    options.outcomeBudgetBytes,
    DEFAULT_OUTCOME_BUDGET_BYTES,
    0,
    Number.MAX_SAFE_INTEGER,
  );
  return { maxOutcomeBytes, outcomeBudgetBytes };
}

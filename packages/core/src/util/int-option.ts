import { intOption as labelled } from './validate.js';

/** Integer options of `createStateGuard`, validated alike. */
export const YEAR_MS: number = 365 * 86_400_000;

/** An integer option of `createStateGuard` (labelled `TypeError`/`RangeError`). */
export function intOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  return labelled(`createStateGuard: ${name}`, value, fallback, min, max);
}

/** Integer options of `createStateGuard`, validated alike. */
export const YEAR_MS: number = 365 * 86_400_000;

/** An integer option of `createStateGuard` (labelled `TypeError`/`RangeError`). */
export function intOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new TypeError(`createStateGuard: ${name} must be an integer`);
  if (value < min || value > max) throw new RangeError(`createStateGuard: ${name} must be between ${min} and ${max}`);
  return value;
}

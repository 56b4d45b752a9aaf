/**
 * The option validators every package uses (through `@mrtr/core/authoring`): misuse throws a `TypeError` or
 * `RangeError` whose message starts with the caller's label, e.g. `createRedisStore: maxBatchSize`.
 */

/** A plain object: not `null`, not an array. */
export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * An optional integer option: `fallback` when `undefined`, else a safe integer in `[min, max]`
 * (`TypeError` when not a safe integer, `RangeError` out of bounds). `label` names the option in full.
 */
export function intOption(label: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new TypeError(`${label} must be an integer`);
  if (value < min || value > max) throw new RangeError(`${label} must be between ${min} and ${max}`);
  return value;
}

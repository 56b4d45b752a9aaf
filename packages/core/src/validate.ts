/**
 * The option validators every package uses (through `@mrtr/core/authoring`): misuse throws a `TypeError` (wrong
 * type, including a number that is not a safe integer where an integer is asked for) or a `RangeError` (a value of
 * the right type out of bounds) whose message starts with the caller's label, e.g. `createRedisStore: maxBatchSize`.
 * Also the one shape of the `onError` hook of every store: {@link BackgroundError}.
 */

/** A plain object: not `null`, not an array. */
export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The options argument of a factory: `{}` when `undefined`, else a plain object (`TypeError`
 * `<label>: options must be an object` otherwise, arrays and `null` included).
 */
export function optionsObject<O extends object>(label: string, options: O | undefined): O {
  if (options === undefined) return {} as O;
  if (!isObject(options)) throw new TypeError(`${label}: options must be an object`);
  return options;
}

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

/** An optional boolean option: `fallback` when `undefined`, else a boolean (`TypeError` otherwise). */
export function boolOption(label: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new TypeError(`${label} must be a boolean`);
  return value;
}

/** An optional string option: `fallback` when `undefined`, else a string (`TypeError` otherwise). */
export function stringOption(label: string, value: unknown, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string') throw new TypeError(`${label} must be a string`);
  return value;
}

/** An optional function option (a clock, a hook): `fallback` when `undefined`, else a function (`TypeError` otherwise). */
export function fnOption<F extends (...args: never[]) => unknown>(label: string, value: unknown, fallback: F): F {
  if (value === undefined) return fallback;
  if (typeof value !== 'function') throw new TypeError(`${label} must be a function`);
  return value as F;
}

/**
 * An optional option that takes one of a few strings: `fallback` when `undefined`, else one of `choices`
 * (`TypeError` `<label> must be "a", "b" or "c"` otherwise).
 */
export function oneOfOption<const C extends readonly string[]>(label: string, value: unknown, fallback: C[number], choices: C): C[number] {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !choices.includes(value)) {
    const quoted = choices.map((c) => `"${c}"`);
    const list = quoted.length > 1 ? `${quoted.slice(0, -1).join(', ')} or ${quoted[quoted.length - 1]}` : quoted.join('');
    throw new TypeError(`${label} must be ${list}`);
  }
  return value;
}

/**
 * What a store's `onError` hook receives: a problem the store met in the background and survived (a failed
 * background purge, a server it cannot reach at start-up, an unsafe server setting). Never thrown to a caller;
 * operations report their own failures by rejecting. `code` is stable (wire it to a metric or an alert), `message`
 * is for people, `cause` is the underlying error when there is one.
 */
export class BackgroundError extends Error {
  /**
   * Stable code, e.g. `STORE_PURGE_FAILED`, `STORE_UNREACHABLE`, `STORE_REACHABLE`, `STORE_EVICTION_POLICY`,
   * `STORE_EVICTION_POLICY_UNKNOWN` (each store's README lists its own).
   */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BackgroundError';
    this.code = code;
  }
}

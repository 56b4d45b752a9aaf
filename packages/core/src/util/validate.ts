/**
 * The option validators every package uses (through `@mrtr/core/options`): misuse throws a `TypeError` (wrong
 * type, including a number that is not a safe integer where an integer is asked for) or a `RangeError` (a value of
 * the right type out of bounds) whose message starts with the caller's label, e.g. `createRedisStore: maxBatchSize`.
 * Also the one shape of the `onError` hook of every store: {@link BackgroundError}.
 */

/** A plain object: not `null`, not an array. */
export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Every option name of `O` (of each member, when `O` is a union) mapped to `true`: the type of a factory's list of
 * known options. An object literal of this type names every option and nothing else, so an option added to `O`
 * without being listed (or a listed name `O` does not have) fails type-check.
 */
export type OptionNames<O> = { readonly [K in O extends unknown ? keyof O & string : never]-?: true };

/** Longest part of a name compared for a suggestion: option names are short, and the comparison stays bounded. */
const MAX_COMPARED = 64;

/**
 * The restricted (optimal string alignment) edit distance of `a` and `b`, case-insensitive, each cut to
 * {@link MAX_COMPARED} characters: insertions, deletions, substitutions and swaps of two neighbours count 1.
 */
function editDistance(a: string, b: string): number {
  const x = a.slice(0, MAX_COMPARED).toLowerCase();
  const y = b.slice(0, MAX_COMPARED).toLowerCase();
  let before: number[] = [];
  let previous = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const current = [i];
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      let d = Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, (previous[j - 1] as number) + cost);
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1]) d = Math.min(d, (before[j - 2] as number) + 1);
      current.push(d);
    }
    before = previous;
    previous = current;
  }
  return previous[y.length] as number;
}

/** The known name closest to `name` (the first of equals), when one is within a third of the longer length (at least 1). */
function closest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const distance = editDistance(name, candidate);
    const limit = Math.max(1, Math.floor(Math.min(Math.max(name.length, candidate.length), MAX_COMPARED) / 3));
    if (distance <= limit && distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/**
 * Refuses an option a factory does not know: a misspelt or renamed option would otherwise be ignored without a word
 * (and a protection it was meant to set left at its default). Checks the own enumerable string keys of `options`
 * (one set to `undefined` included) against `known`; the first unknown one throws a `TypeError`
 * `<label>: unknown option "groupCommt"; did you mean "groupCommit"?` (no suggestion when no known name is close).
 */
export function rejectUnknownOptions(label: string, options: object, known: Readonly<Record<string, true>>): void {
  for (const name of Object.keys(options)) {
    if (Object.hasOwn(known, name)) continue;
    const suggestion = closest(name, Object.keys(known));
    const hint = suggestion === undefined ? '' : `; did you mean "${suggestion}"?`;
    throw new TypeError(`${label}: unknown option "${name}"${hint}`);
  }
}

/**
 * The options argument of a factory: `{}` when `undefined`, else a plain object (`TypeError`
 * `<label>: options must be an object` otherwise, arrays and `null` included) with no option outside `known`
 * (see {@link rejectUnknownOptions}).
 */
export function optionsObject<O extends object>(label: string, options: O | undefined, known: OptionNames<O>): O {
  if (options === undefined) return {} as O;
  if (!isObject(options)) throw new TypeError(`${label}: options must be an object`);
  rejectUnknownOptions(label, options, known);
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

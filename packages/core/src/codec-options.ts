import type { KeyRing } from './keys.js';

export interface CodecOptionLimits {
  /** `maxTokenBytes` when the option is absent. */
  defaultMaxTokenBytes: number;
  /** Smallest accepted `maxTokenBytes`. */
  minMaxTokenBytes: number;
  /** Largest accepted `maxTokenBytes`. */
  maxMaxTokenBytes: number;
}

export interface ParsedCodecOptions {
  keys: KeyRing;
  maxTokenBytes: number;
}

const OPTION_NAMES = new Set(['keys', 'maxTokenBytes']);

function isKeyRing(value: unknown): value is KeyRing {
  if (value === null || typeof value !== 'object') return false;
  const ring = value as Partial<KeyRing>;
  return (
    typeof ring.primaryKid === 'string' &&
    Array.isArray(ring.kids) &&
    typeof ring.has === 'function' &&
    typeof ring.subkey === 'function' &&
    typeof ring.subkeySync === 'function'
  );
}

/**
 * Validates the `{ keys, maxTokenBytes }` options every codec takes, for codec authors: unknown options
 * and wrong types throw a `TypeError` labelled with `factory`, an out-of-range cap a `RangeError`.
 */
export function parseCodecOptions(factory: string, options: unknown, limits: CodecOptionLimits): ParsedCodecOptions {
  if (options === null || typeof options !== 'object') throw new TypeError(`${factory}: options must be an object`);
  for (const name of Object.keys(options)) {
    if (!OPTION_NAMES.has(name)) throw new TypeError(`${factory}: unknown option "${name}"`);
  }
  const { keys, maxTokenBytes = limits.defaultMaxTokenBytes } = options as { keys?: unknown; maxTokenBytes?: unknown };
  if (!isKeyRing(keys)) throw new TypeError(`${factory}: keys must be a KeyRing`);
  if (typeof maxTokenBytes !== 'number' || !Number.isSafeInteger(maxTokenBytes)) {
    throw new TypeError(`${factory}: maxTokenBytes must be an integer`);
  }
  if (maxTokenBytes < limits.minMaxTokenBytes || maxTokenBytes > limits.maxMaxTokenBytes) {
    throw new RangeError(`${factory}: maxTokenBytes must be between ${limits.minMaxTokenBytes} and ${limits.maxMaxTokenBytes}`);
  }
  return { keys, maxTokenBytes };
}

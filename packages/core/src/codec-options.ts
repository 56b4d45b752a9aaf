import { KeyRing } from './keys/keys.js';
import { intOption, type OptionNames, optionsObject } from './util/validate.js';

/** The `maxTokenBytes` bounds a codec accepts, for {@link parseCodecOptions}. */
export interface CodecOptionLimits {
  /** `maxTokenBytes` when the option is absent. */
  defaultMaxTokenBytes: number;
  /** Smallest accepted `maxTokenBytes`. */
  minMaxTokenBytes: number;
  /** Largest accepted `maxTokenBytes`. */
  maxMaxTokenBytes: number;
}

/** The options every codec factory takes after the key ring. */
export interface CodecOptions {
  /**
   * Largest token (in characters) that `open` accepts and `seal` produces. Longer input is refused with
   * `ERR_STATE_TOO_LARGE` before any decoding.
   */
  maxTokenBytes?: number;
}

/** What {@link parseCodecOptions} returns. */
export interface ParsedCodecOptions {
  keys: KeyRing;
  maxTokenBytes: number;
}

const OPTION_NAMES: OptionNames<CodecOptions> = { maxTokenBytes: true };

/**
 * Validates the `(keys, { maxTokenBytes })` arguments every codec factory takes, for codec authors: a
 * missing ring, unknown options and wrong types throw a `TypeError` labelled with `factory`, an
 * out-of-range cap a `RangeError`.
 */
export function parseCodecOptions(factory: string, keys: unknown, options: unknown, limits: CodecOptionLimits): ParsedCodecOptions {
  if (!(keys instanceof KeyRing)) throw new TypeError(`${factory}: the first argument must be a KeyRing`);
  if (keys.refreshing) {
    throw new TypeError(
      `${factory}: a codec is built on a fixed ring; with a refreshing ring (KeyProvider) give the factory to the guard (codec: ${factory}), which builds it on each keys.current()`,
    );
  }
  const { maxTokenBytes: cap } = optionsObject<CodecOptions>(factory, options as CodecOptions | undefined, OPTION_NAMES);
  const maxTokenBytes = intOption(
    `${factory}: maxTokenBytes`,
    cap,
    limits.defaultMaxTokenBytes,
    limits.minMaxTokenBytes,
    limits.maxMaxTokenBytes,
  );
  return { keys, maxTokenBytes };
}

import { type CodecOptionLimits, type ParsedCodecOptions, parseCodecOptions } from './codec-options.js';
import { StateMalformedError, StateTooLargeError } from './error-classes.js';
import { readTokenPrefix, type TokenPrefix } from './util/token.js';

/** The shared pieces of a codec whose tokens read `<version>.<kid>.<rest>`: what {@link codecFormat} returns. */
export interface CodecFormat {
  /** The format version tag, the first segment of every token. */
  readonly version: string;
  /** The `maxTokenBytes` the codec accepts. */
  readonly limits: Readonly<CodecOptionLimits>;
  /** `<version>.<kid>.`: what every token sealed with `kid` starts with. */
  prefixFor(kid: string): string;
  /** {@link parseCodecOptions} with the codec's factory name and limits. */
  parseOptions(keys: unknown, options: unknown): ParsedCodecOptions;
  /**
   * The first steps of `open`, before anything looks at the content: `ERR_STATE_MALFORMED` for a non-string,
   * `ERR_STATE_TOO_LARGE` past `maxTokenBytes`, `ERR_STATE_MALFORMED` when shorter than the prefix of a one-character
   * key id and `minRestChars` more, or without a well-formed `<version>.<kid>.` prefix. Returns the prefix.
   */
  readPrefix(token: unknown, maxTokenBytes: number, minRestChars: number): TokenPrefix;
}

/**
 * The token bounds of most codecs: 16,384 characters by default (the guard's default cap), at least 256, at most
 * 524,288.
 */
const TOKEN_LIMITS: CodecOptionLimits = { defaultMaxTokenBytes: 16_384, minMaxTokenBytes: 256, maxMaxTokenBytes: 524_288 };

/**
 * The shared pieces of a codec whose tokens read `<version>.<kid>.<rest>`, for codec authors: option parsing labelled
 * with `factory`, the token prefix of a key id, and the checks every `open` makes first (see {@link CodecFormat}).
 * `limits` defaults to 16,384 characters, within 256 – 524,288.
 */
export function codecFormat(factory: string, version: string, limits: CodecOptionLimits = TOKEN_LIMITS): CodecFormat {
  const frozen = Object.freeze({ ...limits });
  // `<version>.` and the shortest key id and its dot.
  const minPrefix = version.length + 3;
  return Object.freeze({
    version,
    limits: frozen,
    prefixFor: (kid: string): string => `${version}.${kid}.`,
    parseOptions: (keys: unknown, options: unknown): ParsedCodecOptions => parseCodecOptions(factory, keys, options, frozen),
    readPrefix(token: unknown, maxTokenBytes: number, minRestChars: number): TokenPrefix {
      if (typeof token !== 'string') throw new StateMalformedError();
      if (token.length > maxTokenBytes) throw new StateTooLargeError();
      if (token.length < minPrefix + minRestChars) throw new StateMalformedError();
      const prefix = readTokenPrefix(token, version);
      if (prefix === undefined) throw new StateMalformedError();
      return prefix;
    },
  });
}

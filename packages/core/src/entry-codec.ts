/**
 * `@mrtr/core/codec`: for codec authors (a `StateCodec` turns claims into a token and back) — the claims and their
 * shape check, what `open` returns, the shared codec options, the `<version>.<kid>.` prefix scanner, and the two
 * helpers that keep a codec sync on Node and async on WebCrypto (`andThen`, `isPromiseLike`).
 */
export {
  assertStateClaims,
  CLAIMS_VERSION,
  type FlowClaims,
  isStateClaims,
  type RequestBinding,
  type StateClaims,
} from './claims.js';
export {
  type CodecOptionLimits,
  type CodecOptions,
  type ParsedCodecOptions,
  parseCodecOptions,
} from './codec-options.js';
export { andThen, isPromiseLike } from './crypto/awaitable.js';
export type { CodecInput, OpenedToken } from './interfaces.js';
export { readTokenPrefix, type TokenPrefix } from './util/token.js';
export { type CodecFormat, codecFormat } from './codec-format.js';

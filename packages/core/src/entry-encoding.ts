/**
 * `@mrtr/core/encoding`: bytes and text, the same on every runtime — strict base64url, UTF-8, canonical JSON
 * (RFC 8785), `randomBytes` (pooled on Node, refilled on a process change, never captured in a startup snapshot) and
 * `readWithin` (a byte stream read to a bound).
 */
export { isCanonicalBase64url } from './crypto/base64url.js';
export { canonicalJson, utf8Decode, utf8Encode } from './util/json.js';
export { base64urlDecode, base64urlEncode, randomBytes } from './util/random.js';
export { type ByteStreamLike, readWithin } from './util/stream.js';

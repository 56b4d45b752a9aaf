/**
 * `@mrtr/core/encoding`: bytes and text, the same on every runtime — strict base64url, UTF-8, canonical JSON
 * (RFC 8785) and `randomBytes` (pooled on Node, refilled on a process change, never captured in a startup snapshot).
 */
export { isCanonicalBase64url } from './crypto/base64url.js';
export { canonicalJson, utf8Decode, utf8Encode } from './util/json.js';
export { base64urlDecode, base64urlEncode, randomBytes } from './util/random.js';

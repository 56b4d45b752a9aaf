/** Most characters of a key id (the `KeyRing` limit). */
const MAX_KID_CHARS = 32;
const DOT = 0x2e;

/** `A-Z a-z 0-9 - _`, the key-id alphabet of `KeyRing`. */
function isKidChar(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x5f;
}

/** What {@link readTokenPrefix} found. */
export interface TokenPrefix {
  /** The key id between the two dots. */
  kid: string;
  /** Index of the first character after `<version>.<kid>.`. */
  end: number;
}

/**
 * Reads the `<version>.<kid>.` prefix of a token: `version` exactly, a dot, 1–32 key-id characters
 * (`[A-Za-z0-9_-]`) and a dot. Returns `undefined` for anything else. Looks at no more than
 * `version.length + 34` characters, so it is constant-time in the token's length.
 */
export function readTokenPrefix(token: string, version: string): TokenPrefix | undefined {
  const start = version.length + 1;
  if (!token.startsWith(version) || token.charCodeAt(version.length) !== DOT) return undefined;
  const limit = Math.min(token.length, start + MAX_KID_CHARS + 1);
  let i = start;
  for (; i < limit; i++) {
    const c = token.charCodeAt(i);
    if (c === DOT) break;
    if (!isKidChar(c)) return undefined;
  }
  if (i === start || i === limit) return undefined;
  return { kid: token.slice(start, i), end: i + 1 };
}

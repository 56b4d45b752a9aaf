const MAX_DEPTH = 128;

/**
 * RFC 8785 (JCS) canonical JSON: object keys sorted by UTF-16 code units, ECMAScript number
 * formatting, minimal string escaping, no white space. `undefined` object members are skipped (as
 * JSON does); anything JSON cannot represent (non-finite numbers, bigint, functions, symbols, cycles,
 * nesting deeper than 128) throws a labelled `TypeError`/`RangeError`.
 */
export function canonicalJson(value: unknown): string {
  return serialize(value, 0);
}

function serialize(value: unknown, depth: number): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonicalJson: non-finite number');
      return JSON.stringify(value);
    case 'object':
      break;
    default:
      throw new TypeError(`canonicalJson: cannot serialize a ${typeof value}`);
  }
  if (depth >= MAX_DEPTH) throw new RangeError('canonicalJson: nesting is too deep');
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      const item: unknown = value[i];
      out += item === undefined ? 'null' : serialize(item, depth + 1);
    }
    return `${out}]`;
  }
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return serialize((toJSON as () => unknown).call(value), depth + 1);
  const keys = Object.keys(value).sort();
  let out = '{';
  let first = true;
  for (const key of keys) {
    const member: unknown = (value as Record<string, unknown>)[key];
    if (member === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += `${JSON.stringify(key)}:${serialize(member, depth + 1)}`;
  }
  return `${out}}`;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export const utf8Encode = (text: string): Uint8Array => encoder.encode(text);
/** Strict UTF-8 decode; throws on invalid sequences. */
export const utf8Decode = (bytes: Uint8Array): string => decoder.decode(bytes);

/** Constant-time comparison of two byte strings (length is not secret). */
export function timingSafeEqualBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

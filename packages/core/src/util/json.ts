const MAX_DEPTH = 128;

/**
 * RFC 8785 (JCS) canonical JSON: object keys sorted by UTF-16 code units, ECMAScript number
 * formatting, minimal string escaping, no white space. `undefined` object members are skipped (as
 * JSON does); anything JSON cannot represent (non-finite numbers, bigint, functions, symbols, cycles,
 * nesting deeper than 128) throws a labelled `TypeError`/`RangeError`.
 *
 * Linear in the size of the value: one scan finds the subtrees whose `JSON.stringify` text already is
 * canonical (plain objects whose keys are in sorted order, plain arrays, JSON primitives); those are
 * written by the native `JSON.stringify`, and only the rest (unsorted keys, `toJSON`, anything that
 * throws) by hand.
 */
export function canonicalJson(value: unknown): string {
  const scan: Scan = { slow: undefined, unchecked: false, record: true };
  if (scanValue(value, 0, scan)) return JSON.stringify(value);
  if (!scan.unchecked && scan.slow !== undefined) {
    // Only keys out of order (or unusual prototypes): a copy of the slow objects with their keys inserted
    // in sorted order is written by JSON.stringify in one native call.
    const copy = sortedCopy(value, scan.slow);
    if (copy !== NOT_COPIED) return JSON.stringify(copy);
  }
  return serialize(value, 0, scan.slow ?? EMPTY);
}

/**
 * Throws exactly what `canonicalJson(value)` throws, without building its text when the value is
 * already in canonical order (internal to core: the guard checks state data before sealing it).
 */
export function assertJson(value: unknown): void {
  // Keys out of order only make a subtree slow (not recorded here); anything else that is not fast may make
  // the text throw (or hides behind a toJSON): then canonicalJson reports it exactly.
  const scan: Scan = { slow: undefined, unchecked: false, record: false };
  if (!scanValue(value, 0, scan) && scan.unchecked) canonicalJson(value);
}

/** Objects and arrays whose `JSON.stringify` text is not their canonical text (set on the first one). */
interface Scan {
  slow: Set<object> | undefined;
  /** Something serialize() may throw on: a non-JSON value, nesting past the limit, or a `toJSON` (not entered). */
  unchecked: boolean;
  /** False: only `unchecked` is wanted, `slow` stays empty. */
  record: boolean;
}

const EMPTY: ReadonlySet<object> = new Set();
const OBJECT_PROTOTYPE = Object.prototype;
const ARRAY_PROTOTYPE = Array.prototype;

const markSlow = (scan: Scan, value: object): false => {
  if (scan.record) (scan.slow ??= new Set()).add(value);
  return false;
};

/**
 * True when `JSON.stringify(value)` is the canonical text of `value`. Visits every member (no early
 * exit), so every object or array below `maxDepth` whose text is not canonical ends up in `scan.slow`;
 * objects with `toJSON` are marked without being entered (their replacement is serialized by hand).
 */
function scanValue(value: unknown, depth: number, scan: Scan): boolean {
  if (value === null) return true;
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      if (Number.isFinite(value)) return true;
      scan.unchecked = true;
      return false;
    case 'object':
      break;
    default:
      scan.unchecked = true;
      return false;
  }
  if (depth >= MAX_DEPTH) {
    // serialize() throws here before it reads the slow set.
    scan.unchecked = true;
    return false;
  }
  // JSON.stringify calls toJSON, serialize() ignores it on arrays and calls it without arguments on objects.
  let fast = typeof (value as { toJSON?: unknown }).toJSON !== 'function';
  if (Array.isArray(value)) {
    if (Object.getPrototypeOf(value) !== ARRAY_PROTOTYPE) fast = false;
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      // Strings, booleans and null inline: most of a large value, no call each.
      if (item === undefined || item === null || typeof item === 'string' || typeof item === 'boolean') continue;
      if (!scanValue(item, depth + 1, scan)) fast = false;
    }
    return fast || markSlow(scan, value);
  }
  if (!fast) {
    scan.unchecked = true;
    return markSlow(scan, value);
  }
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== OBJECT_PROTOTYPE && prototype !== null) fast = false;
  const keys = Object.keys(value);
  let previous = '';
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    // Object.keys order is JSON.stringify's order: canonical when strictly ascending by code units.
    if (i > 0 && !(previous < key)) fast = false;
    previous = key;
    const member: unknown = (value as Record<string, unknown>)[key];
    if (member === undefined || member === null || typeof member === 'string' || typeof member === 'boolean') continue;
    if (!scanValue(member, depth + 1, scan)) fast = false;
  }
  return fast || markSlow(scan, value);
}

const NOT_COPIED: unique symbol = Symbol('not copied');

/**
 * `value` with every object or array in `slow` replaced by a plain copy whose keys are inserted in sorted
 * order (other subtrees shared), so that `JSON.stringify` writes the canonical text; `NOT_COPIED` when a
 * key would not keep its insertion order (an array index such as "1") or would not become an own
 * property (`__proto__`). Called only when the scan found nothing that throws and no `toJSON`.
 */
function sortedCopy(value: unknown, slow: ReadonlySet<object>): unknown {
  if (value === null || typeof value !== 'object' || !slow.has(value)) return value;
  if (Array.isArray(value)) {
    const out: unknown[] = new Array(value.length);
    for (let i = 0; i < value.length; i++) {
      const item = sortedCopy(value[i], slow);
      if (item === NOT_COPIED) return NOT_COPIED;
      out[i] = item;
    }
    return out;
  }
  const keys = sortedKeys(value);
  const out: Record<string, unknown> = {};
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const first = key.charCodeAt(0);
    if ((first >= 48 && first <= 57) || key === '__proto__') return NOT_COPIED;
    const member: unknown = (value as Record<string, unknown>)[key];
    if (member === undefined) continue;
    const copied = sortedCopy(member, slow);
    if (copied === NOT_COPIED) return NOT_COPIED;
    out[key] = copied;
  }
  return out;
}

function sortedKeys(value: object): string[] {
  const keys = Object.keys(value);
  for (let i = 1; i < keys.length; i++) {
    if (!(keys[i - 1]! < keys[i]!)) return keys.sort();
  }
  return keys;
}

/**
 * The canonical text, by hand. `slow` holds the objects and arrays that must be written by hand;
 * any other object or array was scanned and is written by `JSON.stringify`. `null` means nothing
 * below was scanned (the value returned by a `toJSON`): everything is written by hand.
 */
function serialize(value: unknown, depth: number, slow: ReadonlySet<object> | null): string {
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
  if (slow !== null && !slow.has(value)) return JSON.stringify(value);
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      const item: unknown = value[i];
      out += item === undefined ? 'null' : serialize(item, depth + 1, slow);
    }
    return `${out}]`;
  }
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return serialize((toJSON as () => unknown).call(value), depth + 1, null);
  const keys = sortedKeys(value);
  let out = '{';
  let first = true;
  for (const key of keys) {
    const member: unknown = (value as Record<string, unknown>)[key];
    if (member === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += `${JSON.stringify(key)}:${serialize(member, depth + 1, slow)}`;
  }
  return `${out}}`;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** UTF-8 bytes of `text` (lone surrogates become U+FFFD, as `TextEncoder` does). */
export const utf8Encode = (text: string): Uint8Array => encoder.encode(text);
/** Strict UTF-8 decode; throws a `TypeError` on invalid sequences. */
export const utf8Decode = (bytes: Uint8Array): string => decoder.decode(bytes);

/** Constant-time comparison of two strings of code units (length is not secret). Internal to core. */
export function timingSafeEqualText(a: string, b: string): boolean {
  if (typeof a !== 'string' || a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Constant-time comparison of two byte strings (length is not secret). Internal to core. */
export function timingSafeEqualBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

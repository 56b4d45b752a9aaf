import { StateMalformedError } from '@mrtr/core/errors';

/**
 * A bounded, validating MessagePack decoder for exactly the subset this codec emits (the JSON data
 * model): nil, false/true, positive/negative fixint, uint8/16/32, int8/16/32, float64, fixstr/str8/
 * str16/str32, fixarray/array16/array32 and fixmap/map16/map32 with string keys.
 *
 * Everything else (bin, ext — so also msgpackr records, structured clone, timestamps —, float32,
 * (u)int64, the reserved byte 0xc1, non-string map keys) is refused. Bounds:
 * - every declared length is checked against the bytes that remain before anything is allocated
 *   (a string needs its length in bytes, an array element ≥ 1 byte, a map entry ≥ 2 bytes), so the
 *   work and memory are linear in the input, which the codec caps at `maxTokenBytes`;
 * - containers nest at most {@link MAX_NESTING} deep (recursion is bounded);
 * - the root must be a map and must span the whole input (no trailing bytes);
 * - strings are strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF, and a
 *   leading U+FEFF is kept as data).
 * Objects are created with `Object.prototype` and every key is an own data property: `__proto__` is
 * defined, never assigned, so input cannot choose a prototype; `constructor` and the rest are plain data.
 */

/** Deepest container nesting the codec seals or opens (claims are level 1, their `data` level 2). */
export const MAX_NESTING = 160;

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
/** Strings up to this many bytes are decoded in JS (no native call); longer ones natively. */
const SHORT_STRING = 16;

const EMPTY = new Uint8Array(0);
let src: Uint8Array = EMPTY;
let pos = 0;
let end = 0;
let view: DataView | undefined;
let buffer: Slicer | undefined;
let slicerOf: (bytes: Uint8Array) => Slicer = bufferSlicer;
/**
 * The whole input as latin1, made on the first string longer than SHORT_STRING. ASCII strings are
 * slices of it (V8 may keep it alive as their parent while they live: at most the plaintext size).
 */
let whole: string | undefined;

const malformed = (): never => {
  throw new StateMalformedError();
};

/**
 * Decodes one MessagePack map spanning all of `bytes`. Throws `StateMalformedError` on anything else.
 * `makeSlicer` reads long strings natively: Buffer's on the Node build (the default), {@link webSlicer}
 * on the web build.
 */
export function decodeClaims(bytes: Uint8Array, makeSlicer: (bytes: Uint8Array) => Slicer = bufferSlicer): unknown {
  src = bytes;
  slicerOf = makeSlicer;
  pos = 0;
  end = bytes.length;
  view = undefined;
  buffer = undefined;
  whole = undefined;
  try {
    const first = end > 0 ? bytes[0]! : 0;
    // The root must be a map.
    if (!((first >= 0x80 && first <= 0x8f) || first === 0xde || first === 0xdf)) malformed();
    const value = read(0);
    if (pos !== end) malformed();
    return value;
  } catch (error) {
    if (error instanceof StateMalformedError) throw error;
    // TextDecoder's TypeError on invalid UTF-8, or anything unforeseen: still only a MrtrError leaves
    // (without a cause, whose message could quote input).
    return malformed();
  } finally {
    // Do not keep the plaintext reachable from module state.
    src = EMPTY;
    view = undefined;
    buffer = undefined;
    whole = undefined;
  }
}

function read(depth: number): unknown {
  if (pos >= end) return malformed();
  const t = src[pos++]!;
  if (t < 0x80) return t;
  if (t < 0x90) return readMap(t & 0x0f, depth);
  if (t < 0xa0) return readArray(t & 0x0f, depth);
  if (t < 0xc0) return readString(t & 0x1f);
  if (t >= 0xe0) return t - 0x100;
  switch (t) {
    case 0xc0:
      return null;
    case 0xc2:
      return false;
    case 0xc3:
      return true;
    case 0xcb: {
      need(8);
      view ??= new DataView(src.buffer, src.byteOffset, src.byteLength);
      const value = view.getFloat64(pos);
      pos += 8;
      return value;
    }
    case 0xcc:
      need(1);
      return src[pos++]!;
    case 0xcd:
      return u16();
    case 0xce:
      return u32();
    case 0xd0: {
      need(1);
      const b = src[pos++]!;
      return b < 0x80 ? b : b - 0x100;
    }
    case 0xd1: {
      const v = u16();
      return v < 0x8000 ? v : v - 0x10000;
    }
    case 0xd2:
      return u32() | 0;
    case 0xd9:
      need(1);
      return readString(src[pos++]!);
    case 0xda:
      return readString(u16());
    case 0xdb:
      return readString(u32());
    case 0xdc:
      return readArray(u16(), depth);
    case 0xdd:
      return readArray(u32(), depth);
    case 0xde:
      return readMap(u16(), depth);
    case 0xdf:
      return readMap(u32(), depth);
    default:
      return malformed();
  }
}

function need(n: number): void {
  if (n > end - pos) malformed();
}

function u16(): number {
  need(2);
  const v = (src[pos]! << 8) | src[pos + 1]!;
  pos += 2;
  return v;
}

function u32(): number {
  need(4);
  const v = src[pos]! * 0x1000000 + ((src[pos + 1]! << 16) | (src[pos + 2]! << 8) | src[pos + 3]!);
  pos += 4;
  return v;
}

function readArray(count: number, depth: number): unknown[] {
  if (depth >= MAX_NESTING) malformed();
  // Every element takes at least one byte.
  if (count > end - pos) malformed();
  const out: unknown[] = [];
  for (let i = 0; i < count; i++) out.push(read(depth + 1));
  return out;
}

function readMap(count: number, depth: number): Record<string, unknown> {
  if (depth >= MAX_NESTING) malformed();
  // Every entry takes at least two bytes (a key and a value).
  if (count > (end - pos) / 2) malformed();
  const out: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    const key = readKey();
    const value = read(depth + 1);
    if (key === '__proto__') {
      // Define, never assign: assignment would call the Object.prototype.__proto__ setter.
      Object.defineProperty(out, key, { value, writable: true, enumerable: true, configurable: true });
    } else {
      out[key] = value;
    }
  }
  return out;
}

function readKey(): string {
  if (pos >= end) return malformed();
  const t = src[pos++]!;
  let length: number;
  if (t >= 0xa0 && t < 0xc0) length = t & 0x1f;
  else if (t === 0xd9) {
    need(1);
    length = src[pos++]!;
  } else if (t === 0xda) length = u16();
  else if (t === 0xdb) length = u32();
  else return malformed();
  if (length === 0 || length > KEY_CACHE_MAX_BYTES) return readString(length);
  if (length > end - pos) malformed();
  // Keys repeat from token to token: remember the string of each short key's exact bytes.
  const slot = (length * 0x3b + src[pos]! * 0x11 + src[pos + length - 1]!) & KEY_CACHE_MASK;
  const entry = keyCache[slot];
  if (entry !== undefined && entry.bytes.length === length) {
    const bytes = entry.bytes;
    let i = 0;
    while (i < length && bytes[i] === src[pos + i]) i++;
    if (i === length) {
      pos += length;
      return entry.text;
    }
  }
  const start = pos;
  const text = readString(length);
  keyCache[slot] = { bytes: src.slice(start, start + length), text };
  return text;
}

interface KeyCacheEntry {
  bytes: Uint8Array;
  text: string;
}
/** Keys of at most this many bytes are cached (bytes → the string they decode to; a pure function). */
const KEY_CACHE_MAX_BYTES = 24;
const KEY_CACHE_MASK = 0x3ff;
const keyCache: (KeyCacheEntry | undefined)[] = new Array(KEY_CACHE_MASK + 1).fill(undefined);
const fromCharCode = String.fromCharCode;

function readString(length: number): string {
  if (length > end - pos) malformed();
  const start = pos;
  const stop = pos + length;
  pos = stop;
  if (length === 0) return '';
  if (length > SHORT_STRING) {
    // ASCII (the common case): a slice of the whole input read once as latin1 (one native call per
    // decode instead of one per string), checked by a regular expression.
    whole ??= slicer().latin1Slice(0, end);
    const ascii = whole.slice(start, stop);
    if (!NON_ASCII.test(ascii)) return ascii;
    // One native UTF-8 decode. It replaces every invalid sequence (overlong, surrogate, truncated,
    // above U+10FFFF) with U+FFFD, so a result without U+FFFD proves the bytes were valid UTF-8;
    // otherwise the strict decoder decides (a genuine U+FFFD decodes, anything invalid throws).
    const text = slicer().utf8Slice(start, stop);
    if (text.indexOf('\ufffd') === -1) return text;
    return utf8.decode(src.subarray(start, stop));
  }
  // Short strings, in JS (no native call). ASCII first, in one pass.
  let i = start;
  const codes: number[] = new Array(length);
  for (; i < stop; i++) {
    const b = src[i]!;
    if (b >= 0x80) break;
    codes[i - start] = b;
  }
  if (i === stop) return fromCharCode.apply(null, codes);
  // Short non-ASCII: strict UTF-8 → UTF-16 in JS.
  const units: number[] = [];
  for (let k = start; k < i; k++) units.push(src[k]!);
  while (i < stop) {
    const b = src[i++]!;
    if (b < 0x80) {
      units.push(b);
    } else if (b >= 0xc2 && b <= 0xdf) {
      if (i >= stop) malformed();
      const c = src[i++]!;
      if ((c & 0xc0) !== 0x80) malformed();
      units.push(((b & 0x1f) << 6) | (c & 0x3f));
    } else if (b >= 0xe0 && b <= 0xef) {
      if (i + 1 >= stop) malformed();
      const c1 = src[i++]!;
      const c2 = src[i++]!;
      if ((c1 & 0xc0) !== 0x80 || (c2 & 0xc0) !== 0x80) malformed();
      const cp = ((b & 0x0f) << 12) | ((c1 & 0x3f) << 6) | (c2 & 0x3f);
      // Overlong forms and UTF-16 surrogates are not UTF-8.
      if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)) malformed();
      units.push(cp);
    } else if (b >= 0xf0 && b <= 0xf4) {
      if (i + 2 >= stop) malformed();
      const c1 = src[i++]!;
      const c2 = src[i++]!;
      const c3 = src[i++]!;
      if ((c1 & 0xc0) !== 0x80 || (c2 & 0xc0) !== 0x80 || (c3 & 0xc0) !== 0x80) malformed();
      const cp = ((b & 0x07) << 18) | ((c1 & 0x3f) << 12) | ((c2 & 0x3f) << 6) | (c3 & 0x3f);
      if (cp < 0x10000 || cp > 0x10ffff) malformed();
      const u = cp - 0x10000;
      units.push(0xd800 | (u >> 10), 0xdc00 | (u & 0x3ff));
    } else {
      malformed();
    }
  }
  return fromCharCode.apply(null, units);
}

/** Native string slicing of the input; `utf8Slice` replaces invalid sequences with U+FFFD and keeps a BOM. */
export interface Slicer {
  latin1Slice(start: number, end: number): string;
  utf8Slice(start: number, end: number): string;
}
const NON_ASCII = /[^\x00-\x7f]/;
/** Buffer#latin1Slice / #utf8Slice (what toString() calls, minus its argument handling), with a public fallback. */
function slicer(): Slicer {
  buffer ??= slicerOf(src);
  return buffer;
}

function bufferSlicer(bytes: Uint8Array): Slicer {
  const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const internal = b as Partial<Slicer>;
  return typeof internal.latin1Slice === 'function' && typeof internal.utf8Slice === 'function'
    ? (internal as Slicer)
    : {
        latin1Slice: (start, stop) => b.toString('latin1', start, stop),
        utf8Slice: (start, stop) => b.toString('utf8', start, stop),
      };
}

const lenientUtf8 = new TextDecoder('utf-8', { ignoreBOM: true });
const CHUNK = 0x2000;

/** The web build's {@link Slicer}: no Buffer, only `String.fromCharCode` and `TextDecoder`. */
export function webSlicer(bytes: Uint8Array): Slicer {
  return {
    latin1Slice(start, stop) {
      let out = '';
      for (let i = start; i < stop; i += CHUNK) {
        out += fromCharCode.apply(null, bytes.subarray(i, Math.min(stop, i + CHUNK)) as unknown as number[]);
      }
      return out;
    },
    utf8Slice: (start, stop) => lenientUtf8.decode(bytes.subarray(start, stop)),
  };
}

/**
 * MessagePack encoder for the JSON data model, used by the web build instead of msgpackr (whose packer
 * class extends its unpacker, so importing it bundles both: ~20 KB min+gzip the codec does not need).
 *
 * It writes exactly the bytes msgpackr's `Packr` writes with the codec's options (`useRecords: false,
 * variableMapSize: true, useToJSON: false`, no float32) for every value `isPlainJson` accepts: nil,
 * false/true; integers in the uint32 range as positive fixint (< 0x80) / uint8 / uint16 / uint32 and
 * negative int32 as negative fixint (≥ -32) / int8 / int16 / int32; every other number as float64;
 * strings as UTF-8 with the smallest of fixstr / str8 / str16 / str32 for the byte length; arrays as
 * fixarray / array16 / array32; objects as fixmap / map16 / map32 of `Object.keys` in order.
 * test/pack.test.ts checks the equality against msgpackr on generated values.
 */

const encoder = new TextEncoder();

let out = new Uint8Array(1024);
let view = new DataView(out.buffer);
let pos = 0;

function room(n: number): void {
  if (pos + n <= out.length) return;
  let size = out.length * 2;
  while (size < pos + n) size *= 2;
  const next = new Uint8Array(size);
  next.set(out.subarray(0, pos));
  out = next;
  view = new DataView(out.buffer);
}

/** The MessagePack bytes of a JSON value that `isPlainJson` accepted (a fresh copy). */
export function packJson(value: unknown): Uint8Array {
  pos = 0;
  try {
    write(value);
    return out.slice(0, pos);
  } finally {
    // Do not keep the last plaintext in module state.
    out.fill(0, 0, pos);
  }
}

function header(length: number, fix: number, fixLimit: number, t16: number, t32: number): void {
  room(5);
  if (length < fixLimit) {
    out[pos++] = fix | length;
  } else if (length < 0x10000) {
    out[pos++] = t16;
    out[pos++] = length >> 8;
    out[pos++] = length & 0xff;
  } else {
    out[pos++] = t32;
    view.setUint32(pos, length);
    pos += 4;
  }
}

function write(value: unknown): void {
  switch (typeof value) {
    case 'string': {
      const bytes = encoder.encode(value);
      const length = bytes.length;
      room(5 + length);
      if (length < 0x20) {
        out[pos++] = 0xa0 | length;
      } else if (length < 0x100) {
        out[pos++] = 0xd9;
        out[pos++] = length;
      } else if (length < 0x10000) {
        out[pos++] = 0xda;
        out[pos++] = length >> 8;
        out[pos++] = length & 0xff;
      } else {
        out[pos++] = 0xdb;
        view.setUint32(pos, length);
        pos += 4;
      }
      out.set(bytes, pos);
      pos += length;
      return;
    }
    case 'number': {
      room(9);
      if (value >>> 0 === value) {
        if (value < 0x80) {
          out[pos++] = value;
        } else if (value < 0x100) {
          out[pos++] = 0xcc;
          out[pos++] = value;
        } else if (value < 0x10000) {
          out[pos++] = 0xcd;
          out[pos++] = value >> 8;
          out[pos++] = value & 0xff;
        } else {
          out[pos++] = 0xce;
          view.setUint32(pos, value);
          pos += 4;
        }
      } else if (value >> 0 === value) {
        if (value >= -0x20) {
          out[pos++] = 0x100 + value;
        } else if (value >= -0x80) {
          out[pos++] = 0xd0;
          out[pos++] = value + 0x100;
        } else if (value >= -0x8000) {
          out[pos++] = 0xd1;
          view.setInt16(pos, value);
          pos += 2;
        } else {
          out[pos++] = 0xd2;
          view.setInt32(pos, value);
          pos += 4;
        }
      } else {
        out[pos++] = 0xcb;
        view.setFloat64(pos, value);
        pos += 8;
      }
      return;
    }
    case 'boolean':
      room(1);
      out[pos++] = value ? 0xc3 : 0xc2;
      return;
    case 'object': {
      if (value === null) {
        room(1);
        out[pos++] = 0xc0;
        return;
      }
      if (Array.isArray(value)) {
        const length = value.length;
        header(length, 0x90, 0x10, 0xdc, 0xdd);
        for (let i = 0; i < length; i++) write(value[i]);
        return;
      }
      const record = value as Record<string, unknown>;
      const names = Object.keys(record);
      header(names.length, 0x80, 0x10, 0xde, 0xdf);
      for (let i = 0; i < names.length; i++) {
        const name = names[i]!;
        write(name);
        write(record[name]);
      }
      return;
    }
    default:
      // isPlainJson lets nothing else through.
      throw new TypeError(`AeadCodec.seal: cannot pack a ${typeof value}`);
  }
}

import { createHash, createHmac, hkdfSync, randomFillSync } from 'node:crypto';
import type { CryptoProvider } from './types.js';

const POOL_SIZE = 4096;
let pool = Buffer.allocUnsafe(POOL_SIZE);
let poolOffset = POOL_SIZE;

/** CSPRNG bytes from a pooled buffer: one `randomFillSync` syscall per 4 KiB instead of one per call. */
function randomBytes(length: number): Uint8Array {
  if (!Number.isInteger(length) || length < 0) throw new RangeError('randomBytes: length must be a non-negative integer');
  if (length > POOL_SIZE / 4) return randomFillSync(Buffer.allocUnsafe(length));
  if (poolOffset + length > POOL_SIZE) {
    pool = randomFillSync(Buffer.allocUnsafe(POOL_SIZE));
    poolOffset = 0;
  }
  const out = Buffer.allocUnsafe(length);
  pool.copy(out, 0, poolOffset, poolOffset + length);
  // Wipe what was handed out so the pool never holds bytes already in use elsewhere.
  pool.fill(0, poolOffset, poolOffset + length);
  poolOffset += length;
  return out;
}

const asBuffer = (bytes: Uint8Array): Buffer =>
  Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

/**
 * Strict canonical base64url: Node's decoder is lenient (skips stray characters, accepts '+', '/',
 * '=' and stray low bits), so the decoded bytes are re-encoded and compared. The canonical text of a
 * byte string is unique, so the round trip reproduces `text` exactly when, and only when, `text` is
 * canonical. Two native calls cost less than one JS scan of the text.
 */
function base64urlDecode(text: string): Uint8Array | undefined {
  if (typeof text !== 'string') return undefined;
  const bytes = Buffer.from(text, 'base64url');
  return bytes.toString('base64url') === text ? bytes : undefined;
}

export const cryptoProvider: CryptoProvider = {
  name: 'node',
  sha256: (data) => createHash('sha256').update(data).digest(),
  hmacSha256: (key, data) => createHmac('sha256', key).update(data).digest(),
  hkdfSha256: (ikm, salt, info, length) => new Uint8Array(hkdfSync('sha256', ikm, salt, info, length)),
  randomBytes,
  base64urlEncode: (bytes) => asBuffer(bytes).toString('base64url'),
  base64urlDecode,
};

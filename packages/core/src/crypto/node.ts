import * as nodeCrypto from 'node:crypto';
import { createHash, createHmac, hkdfSync, randomFillSync } from 'node:crypto';
import { startupSnapshot } from 'node:v8';
import type { CryptoProvider } from './types.js';

const POOL_SIZE = 4096;
let pool = Buffer.allocUnsafe(POOL_SIZE);
let poolOffset = POOL_SIZE;
/** The process the pooled bytes were drawn in: a forked or snapshot-restored process must not reuse them. */
let poolPid = -1;

/** Empties the pool: the next call draws fresh bytes. */
function discardPool(): void {
  pool.fill(0);
  poolOffset = POOL_SIZE;
}

// A startup snapshot captures the heap: never let it carry random bytes into every process started from it.
if (startupSnapshot?.isBuildingSnapshot?.()) startupSnapshot.addSerializeCallback(discardPool);

/**
 * CSPRNG bytes from a pooled buffer: one `randomFillSync` syscall per 4 KiB instead of one per call.
 * The pool is refilled whenever the process id changes (a fork, or a process restored from a snapshot).
 */
function randomBytes(length: number): Uint8Array {
  if (!Number.isInteger(length) || length < 0) throw new RangeError('randomBytes: length must be a non-negative integer');
  if (length > POOL_SIZE / 4) return randomFillSync(Buffer.allocUnsafe(length));
  if (poolPid !== process.pid) {
    discardPool();
    poolPid = process.pid;
  }
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

type OneShotHash = (algorithm: string, data: string, encoding: 'base64url') => string;
/** `crypto.hash` (Node ≥ 20.12): one native call instead of a Hash object per digest. */
const oneShotHash = (nodeCrypto as { hash?: OneShotHash }).hash;

/** Strings are hashed as UTF-8 (lone surrogates become U+FFFD, as with `TextEncoder`). */
const sha256Text =
  typeof oneShotHash === 'function'
    ? (text: string): string => oneShotHash('sha256', text, 'base64url')
    : (text: string): string => createHash('sha256').update(text, 'utf8').digest('base64url');

export const cryptoProvider: CryptoProvider = {
  name: 'node',
  sha256: (data) => createHash('sha256').update(data).digest(),
  sha256Text,
  hmacSha256: (key, data) => createHmac('sha256', key).update(data).digest(),
  hkdfSha256: (ikm, salt, info, length) => new Uint8Array(hkdfSync('sha256', ikm, salt, info, length)),
  randomBytes,
  base64urlEncode: (bytes) => asBuffer(bytes).toString('base64url'),
  base64urlDecode,
};

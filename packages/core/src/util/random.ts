import { cryptoProvider } from '#crypto';

/** CSPRNG bytes; on Node from a pooled buffer refilled with `randomFillSync` (and on a change of process). */
export function randomBytes(length: number): Uint8Array {
  return cryptoProvider.randomBytes(length);
}

/** Unpadded base64url. */
export function base64urlEncode(bytes: Uint8Array): string {
  return cryptoProvider.base64urlEncode(bytes);
}

/** Strict canonical base64url decode; `undefined` for anything else (other alphabet, padding, stray bits). */
export function base64urlDecode(text: string): Uint8Array | undefined {
  return cryptoProvider.base64urlDecode(text);
}

/**
 * `count` (1–65536) distinct owner values for a batch of replay-store consumes, from one CSPRNG call: 14
 * random bytes shared by the batch and the consume's index in the last two, each a 22-character base64url
 * text like `base64urlEncode(randomBytes(16))`. A store writes one with each id, so that it can tell its own
 * write from another's when a reply is lost.
 */
export function ownerValues(count: number): string[] {
  if (!Number.isInteger(count) || count < 1 || count > 65_536) {
    throw new RangeError(`ownerValues: count must be an integer from 1 to 65536 (got ${String(count)})`);
  }
  const bytes = randomBytes(16);
  const owners = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    bytes[14] = i >>> 8;
    bytes[15] = i & 0xff;
    owners[i] = base64urlEncode(bytes);
  }
  return owners;
}

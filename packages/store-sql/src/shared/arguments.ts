const MAX_ID_BYTES = 1024;
const MAX_NAMESPACE_BYTES = 256;
const MAX_FINGERPRINT_BYTES = 256;
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function checkKeyText(label: string, value: unknown, maxBytes: number, allowEmpty: boolean): string {
  if (typeof value !== 'string') throw new TypeError(`${label} must be a string`);
  if (!allowEmpty && value.length === 0) throw new RangeError(`${label} must not be empty`);
  if (value.includes('\u0000') || LONE_SURROGATE.test(value)) {
    throw new TypeError(`${label} must be well-formed Unicode without NUL characters`);
  }
  if (Buffer.byteLength(value, 'utf8') > maxBytes) throw new RangeError(`${label} must be at most ${maxBytes} UTF-8 bytes`);
  return value;
}

export function checkNamespace(label: string, value: unknown): string {
  return value === undefined ? '' : checkKeyText(`${label}: namespace`, value, MAX_NAMESPACE_BYTES, true);
}

/** Argument checks of `consume` (and `claim`); misuse is a TypeError/RangeError, never a store error. */
export function checkConsumeArgs(id: unknown, expiresAtMs: unknown, op: 'consume' | 'claim' = 'consume'): number {
  checkKeyText(`${op}: id`, id, MAX_ID_BYTES, false);
  if (typeof expiresAtMs !== 'number') throw new TypeError(`${op}: expiresAtMs must be a number (epoch ms)`);
  if (!Number.isFinite(expiresAtMs)) throw new RangeError(`${op}: expiresAtMs must be finite`);
  const rounded = Math.ceil(expiresAtMs);
  if (!Number.isSafeInteger(rounded)) throw new RangeError(`${op}: expiresAtMs is out of range`);
  return rounded;
}

/** Argument checks of `claim`: those of `consume` plus a fingerprint (non-empty, at most 256 UTF-8 bytes). */
export function checkClaimArgs(id: unknown, expiresAtMs: unknown, fingerprint: unknown): number {
  const expires = checkConsumeArgs(id, expiresAtMs, 'claim');
  checkKeyText('claim: fingerprint', fingerprint, MAX_FINGERPRINT_BYTES, false);
  return expires;
}

/**
 * Argument checks of `record`; returns the text to store: `outcome` itself, or `''` ("done, not kept") when it
 * is over `maxBytes` UTF-8 bytes or would not come back unchanged (a NUL character, which PostgreSQL's `text`
 * cannot hold, or a lone surrogate, which UTF-8 encoding replaces).
 */
export function checkRecordArgs(id: unknown, fingerprint: unknown, outcome: unknown, maxBytes: number): string {
  checkKeyText('record: id', id, MAX_ID_BYTES, false);
  checkKeyText('record: fingerprint', fingerprint, MAX_FINGERPRINT_BYTES, false);
  if (typeof outcome !== 'string') throw new TypeError('record: outcome must be a string');
  // A string has between 1 and 3 UTF-8 bytes per UTF-16 code unit: count the bytes only when that leaves doubt.
  if (outcome.length > maxBytes) return '';
  if (outcome.length * 3 > maxBytes && Buffer.byteLength(outcome, 'utf8') > maxBytes) return '';
  if (outcome.includes('\u0000') || LONE_SURROGATE.test(outcome)) return '';
  return outcome;
}

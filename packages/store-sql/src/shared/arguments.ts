import { checkLeaseMs, checkOwner } from '@mrtr/core/store';

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

/** What `consume` and `claim` take besides the id, checked: `mintedAtMs` (absent: no epoch check). */
export interface SpendArgs {
  readonly minted: number | undefined;
}

/** What `claim` takes on a store with leases, checked (an owner without leaseMs, or none: no lease). */
export interface ClaimArgs extends SpendArgs {
  readonly owner: string | undefined;
  readonly leaseMs: number | undefined;
  readonly reclaim: boolean;
}

const optionsOf = (label: string, options: unknown): Record<string, unknown> => {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object') throw new TypeError(`${label}: options must be an object`);
  return options as Record<string, unknown>;
};

/** `mintedAtMs` of `consume`/`claim`: absent, or a finite number (floored to the ms). */
export function checkSpendOptions(label: string, options: unknown): SpendArgs {
  const { mintedAtMs } = optionsOf(label, options);
  if (mintedAtMs === undefined) return { minted: undefined };
  if (typeof mintedAtMs !== 'number') throw new TypeError(`${label}: mintedAtMs must be a number (epoch ms)`);
  const minted = Math.floor(mintedAtMs);
  if (!Number.isSafeInteger(minted)) throw new RangeError(`${label}: mintedAtMs must be a finite epoch ms`);
  return { minted };
}

/** `claim`'s options: `mintedAtMs`, `owner` (16–64 base64url), `leaseMs` (positive integer), `reclaim` (boolean). */
export function checkClaimOptions(options: unknown): ClaimArgs {
  const label = 'claim';
  const { minted } = checkSpendOptions(label, options);
  const { owner, leaseMs, reclaim } = optionsOf(label, options);
  if (reclaim !== undefined && typeof reclaim !== 'boolean') throw new TypeError('claim: reclaim must be a boolean');
  return {
    minted,
    owner: owner === undefined ? undefined : checkOwner(label, owner),
    leaseMs: leaseMs === undefined ? undefined : checkLeaseMs(label, leaseMs),
    reclaim: reclaim === true,
  };
}

/** `record`'s options: an optional `owner`. */
export function checkRecordOwner(options: unknown): string | undefined {
  const { owner } = optionsOf('record', options);
  return owner === undefined ? undefined : checkOwner('record', owner);
}

/** `renew(id, owner, leaseMs)` / `release(id, owner)`: the id and owner (and lease) checked. */
export function checkLeaseArgs(op: 'renew' | 'release', id: unknown, owner: unknown): string {
  checkKeyText(`${op}: id`, id, MAX_ID_BYTES, false);
  return checkOwner(op, owner);
}

import { checkLeaseMs, checkOwner, type ClaimOptions, type SpendOptions } from '@mrtr/core/store';

/** The arguments every write takes: a non-empty id and a finite expiry. */
export function checkSpend(op: string, id: unknown, expiresAtMs: unknown, options: SpendOptions | undefined): void {
  if (typeof id !== 'string' || id.length === 0) throw new TypeError(`${op}: id must be a non-empty string`);
  if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) throw new TypeError(`${op}: expiresAtMs must be a finite number`);
  if (options === undefined) return;
  if (options === null || typeof options !== 'object') throw new TypeError(`${op}: options must be an object`);
  const minted = options.mintedAtMs;
  if (minted !== undefined && (typeof minted !== 'number' || !Number.isFinite(minted))) {
    throw new TypeError(`${op}: mintedAtMs must be a finite number`);
  }
}

/** The lease part of a claim's options, checked. */
export interface Lease {
  readonly owner: string | undefined;
  readonly leaseMs: number | undefined;
  readonly reclaim: boolean;
}

const NO_LEASE: Lease = Object.freeze({ owner: undefined, leaseMs: undefined, reclaim: false });

export function leaseOf(options: ClaimOptions | undefined): Lease {
  if (options === undefined) return NO_LEASE;
  const { owner, leaseMs, reclaim } = options;
  if (owner !== undefined) checkOwner('claim', owner);
  if (leaseMs !== undefined) checkLeaseMs('claim', leaseMs);
  if (reclaim !== undefined && typeof reclaim !== 'boolean') throw new TypeError('claim: reclaim must be a boolean');
  if (owner === undefined && leaseMs === undefined && reclaim !== true) return NO_LEASE;
  return { owner, leaseMs, reclaim: reclaim === true };
}

/** An owner value (`ClaimOptions.owner`): 16 to 64 base64url characters (stores keep it between separators). */
const OWNER = /^[A-Za-z0-9_-]{16,64}$/;

/** The longest lease a claim or renew takes: 2^31 − 1 ms (about 24.8 days; a state lives minutes). */
export const MAX_LEASE_MS = 2_147_483_647;

/** A misused owner value (`TypeError` for a value that is not a string, `RangeError` for other text); `undefined` when fine. */
function ownerMisuse(label: string, owner: unknown): TypeError | RangeError | undefined {
  if (typeof owner !== 'string') return new TypeError(`${label}: owner must be a string`);
  return OWNER.test(owner) ? undefined : new RangeError(`${label}: owner must be 16 to 64 base64url characters`);
}

/** A misused lease (a positive safe integer, ms, up to {@link MAX_LEASE_MS}); `undefined` when fine. */
function leaseMisuse(label: string, leaseMs: unknown): TypeError | RangeError | undefined {
  if (typeof leaseMs !== 'number') return new TypeError(`${label}: leaseMs must be a number (ms)`);
  if (!Number.isSafeInteger(leaseMs) || leaseMs < 1 || leaseMs > MAX_LEASE_MS) {
    return new RangeError(`${label}: leaseMs must be an integer from 1 to ${MAX_LEASE_MS}`);
  }
  return undefined;
}

/** For store authors: the owner value, checked (a labelled `TypeError`/`RangeError` otherwise). */
export function checkOwner(label: string, owner: unknown): string {
  const misuse = ownerMisuse(label, owner);
  if (misuse !== undefined) throw misuse;
  return owner as string;
}

/** For store authors: the lease in ms, checked (a labelled `TypeError`/`RangeError` otherwise). */
export function checkLeaseMs(label: string, leaseMs: unknown): number {
  const misuse = leaseMisuse(label, leaseMs);
  if (misuse !== undefined) throw misuse;
  return leaseMs as number;
}

import { createHash } from 'node:crypto';
import { withDeadline } from '@mrtr/core/store';
import type { Status } from '../io.js';
import { duration } from '../time.js';

/** One line of the report. */
export interface Check {
  name: string;
  status: Status;
  detail: string;
}

/** Appends a line to the report. */
export type Add = (check: Check) => void;

/** The probes' own namespace: what they write never meets the server's ids or tasks. */
export const DOCTOR_NAMESPACE = 'mrtr-doctor';

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return withDeadline(promise, ms, () => new Error(`${what} did not answer within ${ms} ms`));
}

export const errorText = (error: unknown): string => {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  const code = (error as { code?: unknown }).code;
  return `${typeof code === 'string' && code.startsWith('ERR_') ? `${code} ` : ''}${error.message}${cause}`;
};

export function skewCheck(name: string, skew: number, rtt: number, skewMs: number, note: string): Check {
  const abs = Math.abs(skew);
  const status: Status = abs > skewMs ? 'fail' : abs > skewMs / 2 ? 'warn' : 'ok';
  const where = skew === 0 ? 'in step with this host' : `${duration(abs)} ${skew > 0 ? 'ahead of' : 'behind'} this host`;
  return {
    name,
    status,
    detail: `${where} (round trip ${duration(rtt)}; tolerated ${duration(skewMs)})${status === 'ok' ? '' : `; ${note}`}`,
  };
}

/**
 * This host's clock. `MRTR_CLOCK_OFFSET_MS` (a testing aid, documented as such) shifts it, to see the
 * clock checks warn and fail without a skewed machine.
 */
let clockOffsetMs = 0;
export const hostNow = (): number => Date.now() + clockOffsetMs;
export const setClockOffset = (ms: number): void => {
  clockOffsetMs = ms;
};

/** Folds the check after the probe into the "table was missing" one. */
export function afterCreation(schema: Check, after: Check | undefined): void {
  if (after === undefined) {
    schema.status = 'fail';
    schema.detail += '; it was not created';
  } else {
    if (after.status === 'fail') schema.status = 'fail';
    schema.detail += `; created now: ${after.detail.replace(/^table "[^"]*": /, '')}`;
  }
}

export const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('base64url');

/** Runs `work`, ignoring its failure: the probes' clean-up is best effort (what they wrote expires anyway). */
export async function bestEffort(work: () => Promise<unknown> | unknown): Promise<void> {
  try {
    await work();
  } catch {
    // best effort
  }
}

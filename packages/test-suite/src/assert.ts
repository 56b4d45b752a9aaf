import { AssertionError } from 'node:assert';
import { MrtrError, type MrtrErrorCode } from '@mrtr/core';

export function fail(message: string): never {
  throw new AssertionError({ message });
}

export function ok(condition: unknown, message: string): asserts condition {
  if (!condition) fail(message);
}

/** Runs `fn` and returns the MrtrError it threw; fails if it resolved or threw anything else. */
export async function rejectsMrtr(fn: () => unknown, context: string, codes?: readonly MrtrErrorCode[]): Promise<MrtrError> {
  let value: unknown;
  try {
    value = await fn();
  } catch (error) {
    if (!MrtrError.is(error)) {
      fail(`${context}: threw a non-MrtrError (${error instanceof Error ? `${error.name}: ${error.message}` : String(error)})`);
    }
    if (codes !== undefined && !codes.includes(error.code)) {
      fail(`${context}: expected ${codes.join(' or ')}, got ${error.code}`);
    }
    return error;
  }
  return fail(`${context}: was accepted (resolved ${typeof value})`);
}

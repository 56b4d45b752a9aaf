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

/**
 * Runs `make`, which builds something with the misspelt option `name`: it must throw (or reject with) a `TypeError`
 * naming the option (a misspelt bound is never ignored); whatever it built after all is closed, and the test fails.
 */
export async function refusesUnknownOption<T>(make: () => T | Promise<T>, name: string, close: (made: T) => unknown): Promise<void> {
  let made: T;
  try {
    made = await make();
  } catch (error) {
    ok(
      error instanceof TypeError && error.message.includes(`unknown option "${name}"`),
      `an unknown option must be refused with a TypeError naming it ("${name}"), got ${String(error)}`,
    );
    return;
  }
  await close(made);
  fail(`an unknown option ("${name}") was accepted: the factory must refuse it (and the suite's factory pass its options through)`);
}

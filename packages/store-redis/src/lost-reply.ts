import { MrtrError } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import type { ClaimResult } from '@mrtr/core/store';
import { ReplyError } from 'ioredis';
import type { RedisConnection } from './connection.js';
import type { Waiter } from './waiter.js';

// A reply that never arrived (a timeout, a connection lost with the command in flight) does not say whether the
// write ran: one read of the key settles it, and what it cannot settle fails closed (never a first use).

/** A first claim (a store with leases names its fence: 0 for a first claim). */
export const FIRST: ClaimResult = Object.freeze({ status: 'first', fence: 0 });
export const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
export const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });
/** Fails closed: `ERR_STORE_UNAVAILABLE` (the cause kept when it already is one). */
export function fail(cause: unknown): never {
  if (cause instanceof StoreUnavailableError) throw cause;
  throw new StoreUnavailableError({ cause });
}

/** Errors after which the `SET` cannot have run: Redis answered with an error, or it was never sent. */
export const notWritten = (error: unknown): boolean =>
  error instanceof ReplyError || MrtrError.is(error) || (error instanceof Error && error.message.includes("Stream isn't writeable"));

/**
 * The `SET` may have run although its reply never arrived (timeout, connection lost with the command
 * in flight). Ask once whether the key holds this call's owner value: ours → `true`; another value
 * → `false` (someone else consumed it); no key or no answer → still unknown → `ERR_STORE_UNAVAILABLE`.
 * On one connection Redis answers in order, so the `GET` sees the `SET` if it ran.
 */
export async function resolveLost(connection: RedisConnection, key: string, mine: string, original: unknown): Promise<boolean> {
  let stored: string | null;
  try {
    stored = await connection.bounded(connection.commands.get(key));
  } catch {
    return fail(original);
  }
  if (stored === mine) return true;
  if (typeof stored === 'string') return false;
  return fail(original);
}

/**
 * Settles a batch whose reply is lost, or that failed part-way, from one `MGET` (one slot) of its keys, or `read`:
 * `settle` reads each entry's value and answers false when that cannot tell; such an entry, and every entry when the
 * read gets no answer, fails closed with `failure`.
 */
export async function settleFromValues<E extends { readonly key: string; reject(error: unknown): void }>(
  connection: RedisConnection,
  group: readonly E[],
  failure: StoreUnavailableError,
  settle: (entry: E, value: string | null | undefined, index: number) => boolean,
  read: (keys: string[]) => Promise<(string | null)[]> = (keys) => connection.commands.mget(...keys),
): Promise<void> {
  let stored: (string | null)[];
  try {
    stored = await connection.bounded(read(group.map((entry) => entry.key)));
  } catch {
    for (const entry of group) entry.reject(failure);
    return;
  }
  group.forEach((entry, i) => {
    if (!settle(entry, stored[i], i)) entry.reject(failure);
  });
}

/**
 * {@link resolveLost} for a script call whose reply is lost or that failed part-way: one `MGET` (one
 * slot) of the keys; a key holding the waiter's own owner → `true`, another value → `false`, none → unknown.
 */
export function resolveLostBatch(connection: RedisConnection, group: Waiter[], owners: string[], original: unknown): Promise<void> {
  return settleFromValues(connection, group, new StoreUnavailableError({ cause: original }), (waiter, value, i) => {
    if (value === owners[i]) waiter.resolve(true);
    else if (typeof value === 'string') waiter.resolve(false);
    else return false;
    return true;
  });
}

import type { ServerContext } from '@modelcontextprotocol/server';
import { isIdempotencyKey } from '@mrtr/core/adapter';
import { isObject } from '@mrtr/core/options';
import { invalidKey } from '../protocol/wire.js';

/** Where a `tools/call` carries its idempotency key: `params._meta["dev.mrtr/idempotency-key"]`. */
export const IDEMPOTENCY_KEY_META = 'dev.mrtr/idempotency-key';
/** The HTTP header that carries the key when `_meta` does not (`createHttpHandler`, any transport that passes the `Request`). */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
/** Where a tool declares that it takes keys, in its `_meta` (`tools/list`): `{ ttlMs }`. */
export const IDEMPOTENCY_META = 'dev.mrtr/idempotency';
/** The marker on every replayed answer's `_meta` (an identical MRTR retry, a keyed retry): `true`. */
export const REPLAYED_META = 'dev.mrtr/replayed';

/** A keyed tool's settings, validated at registration. */
export interface Idempotency {
  /** How long a key is held, ms. */
  readonly ttlMs: number;
  /** Whether a tool result with `isError: true` is recorded (and replayed) or given back (a retry runs again). */
  readonly replayErrors: boolean;
}

/**
 * The key of a first-round call, if it carries one: `_meta["dev.mrtr/idempotency-key"]`, else the `Idempotency-Key`
 * header of the HTTP request. Both present and different, or not 1–255 characters of printable ASCII: refused (-32602).
 */
export function keyOf(ctx: ServerContext): string | undefined {
  const meta = isObject(ctx.mcpReq._meta) ? ctx.mcpReq._meta[IDEMPOTENCY_KEY_META] : undefined;
  const header = ctx.http?.req?.headers?.get(IDEMPOTENCY_KEY_HEADER) ?? undefined;
  if (meta === undefined && header === undefined) return undefined;
  if (meta !== undefined && header !== undefined && meta !== header) throw invalidKey();
  const key = meta ?? header;
  if (!isIdempotencyKey(key)) throw invalidKey();
  return key;
}

/** A replayed result, marked in its `_meta`. */
export function markReplayed<R extends object>(result: R): R {
  const meta = (result as { _meta?: unknown })._meta;
  return { ...result, _meta: { ...(isObject(meta) ? meta : {}), [REPLAYED_META]: true } };
}

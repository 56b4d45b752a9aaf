/**
 * The delay an HTTP answer's `Retry-After` header carries: noted by the adapter on the request a JSON-RPC error with
 * `data.retryAfterMs` answers (`round_in_progress`, `store_unavailable`), read by `createHttpHandler` once the answer
 * is built, so that no answer body is ever read for it.
 */
import { ProtocolError, type ServerContext } from '@modelcontextprotocol/server';

const noted = new WeakMap<Request, number>();

/** `data.retryAfterMs` of a JSON-RPC error when it is a finite number ≥ 0; `undefined` for anything else. */
export function retryAfterMsOf(error: unknown): number | undefined {
  if (!(error instanceof ProtocolError)) return undefined;
  const data: unknown = error.data;
  const ms = typeof data === 'object' && data !== null ? (data as { retryAfterMs?: unknown }).retryAfterMs : undefined;
  return typeof ms === 'number' && Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

/**
 * Notes on the HTTP request behind `ctx` (nothing without one: stdio) that it is answered with `error`, when `error`
 * is a JSON-RPC error with a `retryAfterMs` (see {@link retryAfterMsOf}).
 */
export function noteRetryAfter(ctx: ServerContext, error: unknown): void {
  const request = ctx.http?.req;
  if (request === undefined) return;
  const ms = retryAfterMsOf(error);
  if (ms !== undefined) noted.set(request, ms);
}

/** The `retryAfterMs` noted on `request` (see {@link noteRetryAfter}), if any. */
export function retryAfterNoted(request: Request): number | undefined {
  return noted.get(request);
}

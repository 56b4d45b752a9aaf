import { readWithin } from '@mrtr/core/encoding';
/** A JSON-RPC error answered over HTTP (no request id: it answers the HTTP request, not a JSON-RPC one). */
export function jsonRpcError(status: number, code: number, message: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });
}

/**
 * Longest JSON body read for a `retryAfterMs`: an error answer that carries one is about 200 bytes; a larger body
 * (a tool result) is passed on as it is, read no further.
 */
export const MAX_RETRY_AFTER_BODY_BYTES = 4_096;

/**
 * The `Retry-After` seconds for a JSON-RPC error answer whose `error.data.retryAfterMs` is a finite number ≥ 0
 * (`round_in_progress`, `store_unavailable`): rounded up, at least 1. `undefined` for anything else (a result, a
 * batch, an error without it, not JSON).
 */
export function retryAfterSeconds(body: string): number | undefined {
  if (!body.includes('"retryAfterMs"')) return undefined;
  let message: unknown;
  try {
    message = JSON.parse(body);
  } catch {
    return undefined;
  }
  const error = (message as { error?: unknown } | null)?.error;
  const data = typeof error === 'object' && error !== null ? (error as { data?: unknown }).data : undefined;
  const ms = typeof data === 'object' && data !== null ? (data as { retryAfterMs?: unknown }).retryAfterMs : undefined;
  if (Array.isArray(message) || typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return undefined;
  return Math.max(1, Math.ceil(ms / 1000));
}

/**
 * `response` with an HTTP `Retry-After` header (seconds, rounded up, at least 1) when it is one JSON-RPC error in a
 * plain JSON body whose `error.data.retryAfterMs` is set; otherwise `response` itself. The status stays what the
 * SDK's transport chose (`200` for an error a handler produced): JSON-RPC clients read the error from the body as
 * before, and HTTP-level clients and intermediaries get the delay in the standard header. SSE streams are never
 * read (the answer is one frame among others, after the headers went out), nor JSON bodies over
 * {@link MAX_RETRY_AFTER_BODY_BYTES}.
 */
export async function withRetryAfter(response: Response): Promise<Response> {
  if (response.body === null || response.bodyUsed || response.headers.has('retry-after')) return response;
  if (!(response.headers.get('content-type') ?? '').toLowerCase().startsWith('application/json')) return response;
  const peek = response.clone().body;
  const bytes = peek === null ? undefined : await readWithin(peek, MAX_RETRY_AFTER_BODY_BYTES);
  const seconds = bytes === undefined ? undefined : retryAfterSeconds(new TextDecoder().decode(bytes));
  if (seconds === undefined) return response;
  const headers = new Headers(response.headers);
  headers.set('retry-after', String(seconds));
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

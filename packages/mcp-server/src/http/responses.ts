/** A JSON-RPC error answered over HTTP (no request id: it answers the HTTP request, not a JSON-RPC one). */
export function jsonRpcError(status: number, code: number, message: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });
}

/**
 * The `Retry-After` seconds for a delay of `retryAfterMs` (a JSON-RPC error's `data.retryAfterMs`:
 * `round_in_progress`, `store_unavailable`): rounded up, at least 1. `undefined` unless it is a finite number ≥ 0.
 */
export function retryAfterSeconds(retryAfterMs: unknown): number | undefined {
  if (typeof retryAfterMs !== 'number' || !Number.isFinite(retryAfterMs) || retryAfterMs < 0) return undefined;
  return Math.max(1, Math.ceil(retryAfterMs / 1000));
}

/**
 * `response` with an HTTP `Retry-After` header (seconds, rounded up, at least 1) when the request it answers was
 * answered with a JSON-RPC error carrying `retryAfterMs` (noted by the adapter where it produced the error: see
 * `noteRetryAfter`) and `response` is a plain JSON body; otherwise `response` itself. The body is never read: the
 * new `Response` takes over the same stream. The status stays what the SDK's transport chose (`200` for an error a
 * handler produced): JSON-RPC clients read the error from the body as before, and HTTP-level clients and
 * intermediaries get the delay in the standard header. SSE answers are left as they are (the error is one frame
 * among others, after the headers went out), and so is a `Retry-After` already set.
 */
export function withRetryAfter(response: Response, retryAfterMs: number | undefined): Response {
  const seconds = retryAfterSeconds(retryAfterMs);
  if (seconds === undefined || response.body === null || response.bodyUsed || response.headers.has('retry-after')) return response;
  if (!(response.headers.get('content-type') ?? '').toLowerCase().startsWith('application/json')) return response;
  const headers = new Headers(response.headers);
  headers.set('retry-after', String(seconds));
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

import { ProtocolError, SdkError, SdkErrorCode } from '@modelcontextprotocol/client';
import { OutcomeUnknownError, ResponseLostError, RoundInProgressError } from './errors.js';
import type { Settings } from './options.js';
import { isObject } from './sdk.js';

/**
 * What a failed send means:
 * - `busy`: the server is still running an identical earlier attempt (`data.reason: "round_in_progress"`): send the
 *   same request again after `retryAfterMs`;
 * - `again`: the server did nothing and says so (its store or clock, `store_unavailable`/`clock_skew`): safe to resend;
 * - `lost`: no answer (network error, timeout, closed connection): the request may have run;
 * - `unknown`: the server says an earlier attempt may have run unrecorded (`outcome_unknown`);
 * - `final`: anything else (the server's own answer): thrown as is.
 */
type Fault = { kind: 'busy' | 'again'; retryAfterMs: number | undefined } | { kind: 'lost' | 'unknown' | 'final' };

const LOST_SDK_CODES: ReadonlySet<string> = new Set([SdkErrorCode.RequestTimeout, SdkErrorCode.ConnectionClosed, SdkErrorCode.SendFailed]);
// HTTP answers of a proxy or an overloaded server that carry no MCP answer.
const LOST_HTTP_STATUS: ReadonlySet<number> = new Set([408, 429, 502, 503, 504]);

/**
 * What fetch and sockets throw when no response arrives: fetch's network error is a `TypeError` ("fetch failed",
 * "Failed to fetch", …); a socket's carries a system code (`ECONNRESET`, `EPIPE`, undici's `UND_ERR_…`). Anything
 * else (a bug, an abort) is not a lost response.
 */
function isNetworkError(error: unknown): boolean {
  if (!(error instanceof Error) || error.name === 'AbortError') return false;
  const code = (error as { code?: unknown }).code;
  return error.name === 'TypeError' || (typeof code === 'string' && /^(E[A-Z]+|UND_ERR_[A-Z_]+)$/.test(code));
}

function classify(error: unknown): Fault {
  if (error instanceof ProtocolError) {
    const data = isObject(error.data) ? error.data : {};
    const retryAfterMs =
      typeof data.retryAfterMs === 'number' && Number.isFinite(data.retryAfterMs) && data.retryAfterMs >= 0 ? data.retryAfterMs : undefined;
    if (data.reason === 'round_in_progress') return { kind: 'busy', retryAfterMs };
    if (data.reason === 'outcome_unknown') return { kind: 'unknown' };
    if (data.reason === 'store_unavailable' || data.reason === 'clock_skew') return { kind: 'again', retryAfterMs };
    return { kind: 'final' };
  }
  if (error instanceof SdkError) {
    const status = (error.data as { status?: unknown } | undefined)?.status;
    if (typeof status === 'number') return LOST_HTTP_STATUS.has(status) ? { kind: 'lost' } : { kind: 'final' };
    return LOST_SDK_CODES.has(error.code) ? { kind: 'lost' } : { kind: 'final' };
  }
  return isNetworkError(error) ? { kind: 'lost' } : { kind: 'final' };
}

/** The wait before attempt `attempt + 1`: the server's retry-after if it gave one, else exponential with full jitter; at most `maxMs`. */
export function backoff(settings: Settings, attempt: number, retryAfterMs?: number): number {
  const { baseMs, maxMs } = settings.retry;
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, maxMs);
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt - 1, 30));
  return Math.floor(settings.random() * ceiling);
}

/**
 * Runs `send` until it answers, at most `retry.maxAttempts` times. A lost response is sent again only when `resend`
 * says the request is safe to repeat (a later round, under its `requestState`; a keyed first call; a read); otherwise,
 * or when the budget runs out, it is a {@link ResponseLostError}. "In progress" is always waited for (the server asks
 * for exactly that), then a {@link RoundInProgressError}; "outcome unknown" is an {@link OutcomeUnknownError} at once.
 */
export async function retrying<T>(
  settings: Settings,
  send: () => Promise<T>,
  resend: boolean,
  signal: AbortSignal | undefined,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (error) {
      signal?.throwIfAborted();
      const fault = classify(error);
      if (fault.kind === 'final') throw error;
      if (fault.kind === 'unknown') throw new OutcomeUnknownError({ cause: error });
      if (fault.kind === 'lost' && !resend) throw new ResponseLostError({ cause: error, attempts: attempt });
      if (attempt >= settings.retry.maxAttempts) {
        if (fault.kind === 'busy') throw new RoundInProgressError({ cause: error, retryAfterMs: fault.retryAfterMs, attempts: attempt });
        if (fault.kind === 'lost') throw new ResponseLostError({ cause: error, attempts: attempt });
        throw error;
      }
      await settings.sleep(backoff(settings, attempt, 'retryAfterMs' in fault ? fault.retryAfterMs : undefined), signal);
    }
  }
}

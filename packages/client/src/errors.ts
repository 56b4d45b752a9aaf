/**
 * One base error with stable string codes, like `@mrtr/core`'s (the two codes a server also sends keep their names:
 * `ERR_ROUND_IN_PROGRESS`, `ERR_OUTCOME_UNKNOWN`). Callers switch on `code`, never on the message. Messages are fixed
 * per code: no arguments, answers, state or key in them.
 */

const MESSAGES = {
  ERR_ROUND_IN_PROGRESS: 'the server was still processing this round after every retry',
  ERR_OUTCOME_UNKNOWN: 'the outcome of this request is unknown: it may have run',
  ERR_RESPONSE_LOST: 'the response was lost and the request is not safe to send again: it may have run',
  ERR_ROUNDS_EXCEEDED: 'the server kept asking for input beyond the round limit',
  ERR_INPUT_UNSUPPORTED: 'the server asked for input this client has no handler for',
  ERR_TASK_CANCELLED: 'the task was cancelled',
  ERR_TASK_POLLS_EXCEEDED: 'the task did not end within the poll limit',
} as const;

/** The stable code of every `MrtrClientError`. */
export type MrtrClientErrorCode = keyof typeof MESSAGES;

const CODES: ReadonlySet<string> = new Set(Object.keys(MESSAGES));
// One brand for every copy of this package in a process (ESM and CJS builds), so `instanceof` works across them.
const BRAND: unique symbol = Symbol.for('@mrtr/client/MrtrClientError') as never;

/** Options every `MrtrClientError` constructor takes. */
export interface MrtrClientErrorOptions {
  /** The failure underneath (the last transport error, the server's JSON-RPC error). */
  cause?: unknown;
}

/** Base class of every error `@mrtr/client` throws for a runtime condition (misuse throws TypeError/RangeError). */
export class MrtrClientError<C extends MrtrClientErrorCode = MrtrClientErrorCode> extends Error {
  /** The code of this class's instances (`'ERR_MRTR_CLIENT'` on the base class: any code). */
  static readonly code: MrtrClientErrorCode | 'ERR_MRTR_CLIENT' = 'ERR_MRTR_CLIENT';
  /** The stable code: switch on it. */
  readonly code: C;

  constructor(code: C, options?: MrtrClientErrorOptions) {
    if (!CODES.has(code)) throw new TypeError('MrtrClientError: unknown code');
    super(MESSAGES[code], options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.name = new.target.name;
  }

  /** True for any `MrtrClientError`, from any copy of this package. */
  static is(value: unknown): value is MrtrClientError {
    return value instanceof MrtrClientError;
  }
}
Object.defineProperty(MrtrClientError.prototype, BRAND, { value: true });
Object.defineProperty(MrtrClientError, Symbol.hasInstance, {
  value: function hasInstance(this: { code?: unknown }, value: unknown): boolean {
    if (value === null || typeof value !== 'object' || (value as { [BRAND]?: unknown })[BRAND] !== true) return false;
    return this.code === 'ERR_MRTR_CLIENT' || (value as { code?: unknown }).code === this.code;
  },
});

/**
 * The server still answered "in progress" (an earlier attempt with the same state, answers or key is running) when
 * the retry budget ran out. Nothing was lost: send the same call again later, or look for its effect.
 */
export class RoundInProgressError extends MrtrClientError<'ERR_ROUND_IN_PROGRESS'> {
  static override readonly code = 'ERR_ROUND_IN_PROGRESS' as const;
  /** The server's last `retryAfterMs`, if it gave one. */
  readonly retryAfterMs: number | undefined;
  /** How many times the round was sent. */
  readonly attempts: number;
  constructor(options: MrtrClientErrorOptions & { retryAfterMs?: number | undefined; attempts: number }) {
    super('ERR_ROUND_IN_PROGRESS', options);
    this.retryAfterMs = options.retryAfterMs;
    this.attempts = options.attempts;
  }
}

/**
 * The server says an earlier attempt of this round stopped before its outcome was recorded: it may have run. It will
 * not run it again blind, and neither does this client: check the effect before starting again.
 */
export class OutcomeUnknownError extends MrtrClientError<'ERR_OUTCOME_UNKNOWN'> {
  static override readonly code = 'ERR_OUTCOME_UNKNOWN' as const;
  constructor(options?: MrtrClientErrorOptions) {
    super('ERR_OUTCOME_UNKNOWN', options);
  }
}

/**
 * The response did not arrive (network error, timeout, closed connection) and the request may have run: either it
 * was not safe to send again (a first-round call with no idempotency key), or every retry was lost too. `cause` is
 * the last transport error.
 */
export class ResponseLostError extends MrtrClientError<'ERR_RESPONSE_LOST'> {
  static override readonly code = 'ERR_RESPONSE_LOST' as const;
  /** How many times the request was sent. */
  readonly attempts: number;
  constructor(options: MrtrClientErrorOptions & { attempts: number }) {
    super('ERR_RESPONSE_LOST', options);
    this.attempts = options.attempts;
  }
}

/** The server answered `input_required` more than `maxRounds` times. */
export class RoundsExceededError extends MrtrClientError<'ERR_ROUNDS_EXCEEDED'> {
  static override readonly code = 'ERR_ROUNDS_EXCEEDED' as const;
  constructor(options?: MrtrClientErrorOptions) {
    super('ERR_ROUNDS_EXCEEDED', options);
  }
}

/** The server asked for an input request with no handler here (no `onInput` and none registered on the client). */
export class InputUnsupportedError extends MrtrClientError<'ERR_INPUT_UNSUPPORTED'> {
  static override readonly code = 'ERR_INPUT_UNSUPPORTED' as const;
  /** The method of the embedded request (`elicitation/create`, `sampling/createMessage`, `roots/list`, …). */
  readonly method: string;
  constructor(method: string, options?: MrtrClientErrorOptions) {
    super('ERR_INPUT_UNSUPPORTED', options);
    this.method = method;
  }
}

/** The task ended `cancelled` (by this client's signal, `cancelTask`, or the server). */
export class TaskCancelledError extends MrtrClientError<'ERR_TASK_CANCELLED'> {
  static override readonly code = 'ERR_TASK_CANCELLED' as const;
  /** The task's id. */
  readonly taskId: string;
  constructor(taskId: string, options?: MrtrClientErrorOptions) {
    super('ERR_TASK_CANCELLED', options);
    this.taskId = taskId;
  }
}

/** The task was still running after `tasks.maxPolls` polls; it was not cancelled (cancel it with `cancelTask`). */
export class TaskPollsExceededError extends MrtrClientError<'ERR_TASK_POLLS_EXCEEDED'> {
  static override readonly code = 'ERR_TASK_POLLS_EXCEEDED' as const;
  /** The task's id. */
  readonly taskId: string;
  constructor(taskId: string, options?: MrtrClientErrorOptions) {
    super('ERR_TASK_POLLS_EXCEEDED', options);
    this.taskId = taskId;
  }
}

/** Every concrete error, discriminated by `code`. */
export type AnyMrtrClientError =
  | RoundInProgressError
  | OutcomeUnknownError
  | ResponseLostError
  | RoundsExceededError
  | InputUnsupportedError
  | TaskCancelledError
  | TaskPollsExceededError;

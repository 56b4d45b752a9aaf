/**
 * One base error with stable string codes. Callers switch on `code`, never on the message.
 * Messages are fixed per code: they never contain a payload, a principal, a token or key material.
 */

export type MrtrErrorCode =
  | 'ERR_STATE_MALFORMED'
  | 'ERR_STATE_TOO_LARGE'
  | 'ERR_STATE_INTEGRITY'
  | 'ERR_KEY_UNKNOWN'
  | 'ERR_STATE_EXPIRED'
  | 'ERR_STATE_AUDIENCE'
  | 'ERR_STATE_PRINCIPAL'
  | 'ERR_STATE_BINDING'
  | 'ERR_FLOW_EXPIRED'
  | 'ERR_FLOW_ROUNDS'
  | 'ERR_STATE_REPLAYED'
  | 'ERR_STORE_UNAVAILABLE'
  | 'ERR_STORE_FULL'
  | 'ERR_PRINCIPAL_REQUIRED'
  | 'ERR_CAPABILITY_MISSING';

export interface MrtrErrorOptions {
  cause?: unknown;
}

/** Base class of every error mrtr throws for a runtime condition (misuse throws TypeError/RangeError). */
export class MrtrError extends Error {
  static readonly code: MrtrErrorCode | 'ERR_MRTR' = 'ERR_MRTR';
  readonly code: MrtrErrorCode;

  constructor(code: MrtrErrorCode, message: string, options?: MrtrErrorOptions) {
    // Rejections are driven by whoever sends a token, so they must stay cheap: no stack trace is
    // captured (V8 spends microseconds on one, more than opening a valid token). The code and the fixed
    // message say what happened; an underlying failure keeps its own stack in `cause`.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.code = code;
    this.name = new.target.name;
  }

  /** True for any `MrtrError`, also across duplicate copies of this package (checks the code shape). */
  static is(value: unknown): value is AnyMrtrError {
    if (value instanceof MrtrError) return true;
    if (!(value instanceof Error)) return false;
    const code: unknown = (value as { code?: unknown }).code;
    return typeof code === 'string' && MRTR_ERROR_CODES.has(code as MrtrErrorCode);
  }
}

export class StateMalformedError extends MrtrError {
  static override readonly code = 'ERR_STATE_MALFORMED' as const;
  declare readonly code: 'ERR_STATE_MALFORMED';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_MALFORMED', 'request state is malformed', options);
  }
}
export class StateTooLargeError extends MrtrError {
  static override readonly code = 'ERR_STATE_TOO_LARGE' as const;
  declare readonly code: 'ERR_STATE_TOO_LARGE';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_TOO_LARGE', 'request state exceeds the size limit', options);
  }
}
export class StateIntegrityError extends MrtrError {
  static override readonly code = 'ERR_STATE_INTEGRITY' as const;
  declare readonly code: 'ERR_STATE_INTEGRITY';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_INTEGRITY', 'request state failed integrity verification', options);
  }
}
export class KeyUnknownError extends MrtrError {
  static override readonly code = 'ERR_KEY_UNKNOWN' as const;
  declare readonly code: 'ERR_KEY_UNKNOWN';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_KEY_UNKNOWN', 'request state names a key that is not in the key ring', options);
  }
}
export class StateExpiredError extends MrtrError {
  static override readonly code = 'ERR_STATE_EXPIRED' as const;
  declare readonly code: 'ERR_STATE_EXPIRED';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_EXPIRED', 'request state has expired or is not yet valid', options);
  }
}
export class StateAudienceError extends MrtrError {
  static override readonly code = 'ERR_STATE_AUDIENCE' as const;
  declare readonly code: 'ERR_STATE_AUDIENCE';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_AUDIENCE', 'request state was issued for another audience', options);
  }
}
export class StatePrincipalError extends MrtrError {
  static override readonly code = 'ERR_STATE_PRINCIPAL' as const;
  declare readonly code: 'ERR_STATE_PRINCIPAL';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_PRINCIPAL', 'request state was issued to another principal', options);
  }
}
export class StateBindingError extends MrtrError {
  static override readonly code = 'ERR_STATE_BINDING' as const;
  declare readonly code: 'ERR_STATE_BINDING';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_BINDING', 'request state was issued for another request', options);
  }
}
export class FlowExpiredError extends MrtrError {
  static override readonly code = 'ERR_FLOW_EXPIRED' as const;
  declare readonly code: 'ERR_FLOW_EXPIRED';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_FLOW_EXPIRED', 'the multi-round flow has passed its deadline', options);
  }
}
export class FlowRoundsError extends MrtrError {
  static override readonly code = 'ERR_FLOW_ROUNDS' as const;
  declare readonly code: 'ERR_FLOW_ROUNDS';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_FLOW_ROUNDS', 'the multi-round flow has exceeded its round limit', options);
  }
}
export class StateReplayedError extends MrtrError {
  static override readonly code = 'ERR_STATE_REPLAYED' as const;
  declare readonly code: 'ERR_STATE_REPLAYED';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_REPLAYED', 'request state has already been used', options);
  }
}
export class StoreUnavailableError extends MrtrError {
  static override readonly code = 'ERR_STORE_UNAVAILABLE' as const;
  declare readonly code: 'ERR_STORE_UNAVAILABLE';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STORE_UNAVAILABLE', 'replay store is unavailable', options);
  }
}
export class StoreFullError extends MrtrError {
  static override readonly code = 'ERR_STORE_FULL' as const;
  declare readonly code: 'ERR_STORE_FULL';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STORE_FULL', 'replay store is full', options);
  }
}
export class PrincipalRequiredError extends MrtrError {
  static override readonly code = 'ERR_PRINCIPAL_REQUIRED' as const;
  declare readonly code: 'ERR_PRINCIPAL_REQUIRED';
  constructor(options?: MrtrErrorOptions) {
    super('ERR_PRINCIPAL_REQUIRED', 'an authenticated principal is required', options);
  }
}
export class CapabilityMissingError extends MrtrError {
  static override readonly code = 'ERR_CAPABILITY_MISSING' as const;
  declare readonly code: 'ERR_CAPABILITY_MISSING';
  /** The client capabilities the request needed, shaped as `ClientCapabilities` (for `-32021` `data`). */
  readonly requiredCapabilities: Record<string, unknown>;
  constructor(requiredCapabilities: Record<string, unknown>, options?: MrtrErrorOptions) {
    super('ERR_CAPABILITY_MISSING', 'the client did not declare a capability this request needs', options);
    this.requiredCapabilities = requiredCapabilities;
  }
}

/** Discriminated union of every concrete error: `switch (err.code)` narrows. */
export type AnyMrtrError =
  | StateMalformedError
  | StateTooLargeError
  | StateIntegrityError
  | KeyUnknownError
  | StateExpiredError
  | StateAudienceError
  | StatePrincipalError
  | StateBindingError
  | FlowExpiredError
  | FlowRoundsError
  | StateReplayedError
  | StoreUnavailableError
  | StoreFullError
  | PrincipalRequiredError
  | CapabilityMissingError;

export const MRTR_ERROR_CODES: ReadonlySet<MrtrErrorCode> = new Set<MrtrErrorCode>([
  'ERR_STATE_MALFORMED',
  'ERR_STATE_TOO_LARGE',
  'ERR_STATE_INTEGRITY',
  'ERR_KEY_UNKNOWN',
  'ERR_STATE_EXPIRED',
  'ERR_STATE_AUDIENCE',
  'ERR_STATE_PRINCIPAL',
  'ERR_STATE_BINDING',
  'ERR_FLOW_EXPIRED',
  'ERR_FLOW_ROUNDS',
  'ERR_STATE_REPLAYED',
  'ERR_STORE_UNAVAILABLE',
  'ERR_STORE_FULL',
  'ERR_PRINCIPAL_REQUIRED',
  'ERR_CAPABILITY_MISSING',
]);

/**
 * Codes that mean "this request state must be rejected" (the wire answer is the opaque `-32602`).
 * Store outages (`ERR_STORE_UNAVAILABLE`, `ERR_STORE_FULL`) are server faults, never a rejection of the state.
 */
export function isStateRejection(code: MrtrErrorCode): boolean {
  return code !== 'ERR_STORE_UNAVAILABLE' && code !== 'ERR_STORE_FULL' && code !== 'ERR_CAPABILITY_MISSING';
}

/** True when the error is a server-side fault (store outage or a full store): answer `-32603`, never "replayed". */
export function isServerFault(code: MrtrErrorCode): boolean {
  return code === 'ERR_STORE_UNAVAILABLE' || code === 'ERR_STORE_FULL';
}

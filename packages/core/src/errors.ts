/**
 * One base error with stable string codes. Callers switch on `code`, never on the message.
 * Messages are fixed per code: they never contain a payload, a principal, a token or key material. (`ERR_KEY_MISMATCH`,
 * a start-up error never sent to a client, adds the kid, the store's namespace and a time: how to proceed.)
 */

/** Every error code and its fixed message: the one list the code union and the code set derive from. */
const MESSAGES = {
  ERR_STATE_MALFORMED: 'request state is malformed',
  ERR_STATE_TOO_LARGE: 'request state exceeds the size limit',
  ERR_STATE_INTEGRITY: 'request state failed integrity verification',
  ERR_KEY_UNKNOWN: 'request state names a key that is not in the key ring',
  ERR_STATE_EXPIRED: 'request state has expired or is not yet valid',
  ERR_STATE_AUDIENCE: 'request state was issued for another audience',
  ERR_STATE_PRINCIPAL: 'request state was issued to another principal',
  ERR_STATE_BINDING: 'request state was issued for another request',
  ERR_FLOW_EXPIRED: 'the multi-round flow has passed its deadline',
  ERR_FLOW_ROUNDS: 'the multi-round flow has exceeded its round limit',
  ERR_STATE_REPLAYED: 'request state has already been used',
  ERR_STORE_UNAVAILABLE: 'replay store is unavailable',
  ERR_STORE_FULL: 'replay store is full',
  ERR_PRINCIPAL_REQUIRED: 'an authenticated principal is required',
  ERR_CAPABILITY_MISSING: 'the client did not declare a capability this request needs',
  ERR_QUOTA_EXCEEDED: 'the principal has minted too many states in this window',
  ERR_SEAL_FAILED: 'the state could not be sealed',
  ERR_ROUND_IN_PROGRESS: 'this round is still being processed',
  ERR_OUTCOME_UNKNOWN: 'the outcome of this round is unknown: it may have run',
  ERR_IDEMPOTENCY_KEY_CONFLICT: 'the idempotency key was used for a call with other arguments, or its result was not kept',
  ERR_CLOCK_SKEW: "this server's clock disagrees with the replay store's",
  ERR_LEDGER_LOST: 'the replay store lost its ledger since this state was issued',
  ERR_TASK_LIMIT: 'the principal holds too many tasks',
  ERR_KEYS_UNAVAILABLE: 'no key of the key ring may seal now',
  ERR_KEY_SOURCE: 'the key source failed or returned an invalid key set',
  ERR_KEY_CONFLICT: 'the key source changed the secret of a known key id',
  ERR_KEY_MISMATCH: "this key ring does not match the fleet's keys",
} as const;

/** The stable code of every `MrtrError`. */
export type MrtrErrorCode = keyof typeof MESSAGES;

/** Every `MrtrErrorCode`, in declaration order. */
export const MRTR_ERROR_CODES: ReadonlySet<MrtrErrorCode> = new Set(Object.keys(MESSAGES) as MrtrErrorCode[]);

/** The codes of a key provider's refresh and of the fleet key check: reported at start and to `onError`, never per request. */
type KeyFaultCode = 'ERR_KEY_SOURCE' | 'ERR_KEY_CONFLICT' | 'ERR_KEY_MISMATCH';

/**
 * Every code a request's state can be refused with (what `state.rejected` reports): every `MrtrErrorCode` but those of
 * a key provider's refresh and of the fleet key check, in declaration order. Frozen.
 */
export const MRTR_REJECTION_CODES: readonly Exclude<MrtrErrorCode, KeyFaultCode>[] = /* @__PURE__ */ (() =>
  Object.freeze(
    [...MRTR_ERROR_CODES].filter(
      (code): code is Exclude<MrtrErrorCode, KeyFaultCode> =>
        code !== 'ERR_KEY_SOURCE' && code !== 'ERR_KEY_CONFLICT' && code !== 'ERR_KEY_MISMATCH',
    ),
  ))();

/** Options every `MrtrError` constructor takes. */
export interface MrtrErrorOptions {
  /** The underlying failure (kept for logs; never shown on the wire). */
  cause?: unknown;
}

// One brand shared by every copy of this package in a process (ESM and CJS builds, duplicate installs),
// so `instanceof` and `MrtrError.is` work across them.
const BRAND: unique symbol = Symbol.for('@mrtr/core/MrtrError') as never;

/** Base class of every error mrtr throws for a runtime condition (misuse throws TypeError/RangeError). */
export class MrtrError<C extends MrtrErrorCode = MrtrErrorCode> extends Error {
  /** The code of this class's instances (`'ERR_MRTR'` on the base class: any code). */
  static readonly code: MrtrErrorCode | 'ERR_MRTR' = 'ERR_MRTR';
  /** The stable code: switch on it. */
  readonly code: C;

  constructor(code: C, options?: MrtrErrorOptions) {
    if (!MRTR_ERROR_CODES.has(code)) throw new TypeError('MrtrError: unknown code');
    // Rejections are driven by whoever sends a token, so they must stay cheap: no stack trace is
    // captured (V8 spends microseconds on one, more than opening a valid token). The code and the fixed
    // message say what happened; an underlying failure keeps its own stack in `cause`.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(MESSAGES[code], options?.cause === undefined ? undefined : { cause: options.cause });
    } finally {
      Error.stackTraceLimit = limit;
    }
    this.code = code;
    this.name = new.target.name;
  }

  /** True for any `MrtrError`, from any copy of this package; narrows to the union of concrete errors. */
  static is(value: unknown): value is AnyMrtrError {
    return value instanceof MrtrError && MRTR_ERROR_CODES.has((value as { code: MrtrErrorCode }).code);
  }
}
Object.defineProperty(MrtrError.prototype, BRAND, { value: true });
// `instanceof` by brand, not by prototype: true for errors from any copy of this package (the ESM and CJS
// builds, or two installed versions); a subclass matches the errors with its code. Defined outside the
// class body so `this` is the class `instanceof` was asked about (bundlers rewrite `this` in static methods).
Object.defineProperty(MrtrError, Symbol.hasInstance, {
  value: function hasInstance(this: { code?: unknown }, value: unknown): boolean {
    if (value === null || typeof value !== 'object' || (value as { [BRAND]?: unknown })[BRAND] !== true) return false;
    return this.code === 'ERR_MRTR' || (value as { code?: unknown }).code === this.code;
  },
});

/** The token is not a well-formed token of this codec (or not a string). */
export class StateMalformedError extends MrtrError<'ERR_STATE_MALFORMED'> {
  static override readonly code = 'ERR_STATE_MALFORMED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_MALFORMED', options);
  }
}
/** The token is longer than the cap (checked before any decoding). */
export class StateTooLargeError extends MrtrError<'ERR_STATE_TOO_LARGE'> {
  static override readonly code = 'ERR_STATE_TOO_LARGE' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_TOO_LARGE', options);
  }
}
/** The MAC or AEAD tag does not verify. */
export class StateIntegrityError extends MrtrError<'ERR_STATE_INTEGRITY'> {
  static override readonly code = 'ERR_STATE_INTEGRITY' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_INTEGRITY', options);
  }
}
/** The token names a key id that is not in the ring. */
export class KeyUnknownError extends MrtrError<'ERR_KEY_UNKNOWN'> {
  static override readonly code = 'ERR_KEY_UNKNOWN' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_KEY_UNKNOWN', options);
  }
}
/** The state is past `exp` (plus skew) or issued in the future. */
export class StateExpiredError extends MrtrError<'ERR_STATE_EXPIRED'> {
  static override readonly code = 'ERR_STATE_EXPIRED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_EXPIRED', options);
  }
}
/** The state was minted for another audience. */
export class StateAudienceError extends MrtrError<'ERR_STATE_AUDIENCE'> {
  static override readonly code = 'ERR_STATE_AUDIENCE' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_AUDIENCE', options);
  }
}
/** The state was minted for another principal. */
export class StatePrincipalError extends MrtrError<'ERR_STATE_PRINCIPAL'> {
  static override readonly code = 'ERR_STATE_PRINCIPAL' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_PRINCIPAL', options);
  }
}
/** The state was minted for another method, target or arguments. */
export class StateBindingError extends MrtrError<'ERR_STATE_BINDING'> {
  static override readonly code = 'ERR_STATE_BINDING' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_BINDING', options);
  }
}
/** The flow is past its absolute deadline. */
export class FlowExpiredError extends MrtrError<'ERR_FLOW_EXPIRED'> {
  static override readonly code = 'ERR_FLOW_EXPIRED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_FLOW_EXPIRED', options);
  }
}
/** The flow has used up its rounds. */
export class FlowRoundsError extends MrtrError<'ERR_FLOW_ROUNDS'> {
  static override readonly code = 'ERR_FLOW_ROUNDS' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_FLOW_ROUNDS', options);
  }
}
/** The state was consumed before. */
export class StateReplayedError extends MrtrError<'ERR_STATE_REPLAYED'> {
  static override readonly code = 'ERR_STATE_REPLAYED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STATE_REPLAYED', options);
  }
}
/** The replay store failed or did not answer in time (never reported as "replayed"). */
export class StoreUnavailableError extends MrtrError<'ERR_STORE_UNAVAILABLE'> {
  static override readonly code = 'ERR_STORE_UNAVAILABLE' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STORE_UNAVAILABLE', options);
  }
}
/** A bounded replay store is full (it fails closed). */
export class StoreFullError extends MrtrError<'ERR_STORE_FULL'> {
  static override readonly code = 'ERR_STORE_FULL' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_STORE_FULL', options);
  }
}
/** The request has no principal and anonymous use is off. */
export class PrincipalRequiredError extends MrtrError<'ERR_PRINCIPAL_REQUIRED'> {
  static override readonly code = 'ERR_PRINCIPAL_REQUIRED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_PRINCIPAL_REQUIRED', options);
  }
}
/** The client did not declare a capability an input request needs. */
export class CapabilityMissingError extends MrtrError<'ERR_CAPABILITY_MISSING'> {
  static override readonly code = 'ERR_CAPABILITY_MISSING' as const;
  /** The client capabilities the request needed, shaped as `ClientCapabilities` (for `-32021` `data`). */
  readonly requiredCapabilities: Record<string, unknown>;
  constructor(requiredCapabilities: Record<string, unknown>, options?: MrtrErrorOptions) {
    super('ERR_CAPABILITY_MISSING', options);
    this.requiredCapabilities = requiredCapabilities;
  }
}
/** A principal has reached its quota of open flows (a bound no single principal may exceed). */
export class QuotaExceededError extends MrtrError<'ERR_QUOTA_EXCEEDED'> {
  static override readonly code = 'ERR_QUOTA_EXCEEDED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_QUOTA_EXCEEDED', options);
  }
}

/** The codec could not seal a state (e.g. it outgrew the size cap or holds data the codec refuses). */
export class SealFailedError extends MrtrError<'ERR_SEAL_FAILED'> {
  static override readonly code = 'ERR_SEAL_FAILED' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_SEAL_FAILED', options);
  }
}

/**
 * An identical retry of a round whose first attempt has not recorded its outcome yet (still running on some
 * instance, or it died before recording), after waiting for it as long as the guard's `retryWaitMs` allows.
 */
export class RoundInProgressError extends MrtrError<'ERR_ROUND_IN_PROGRESS'> {
  static override readonly code = 'ERR_ROUND_IN_PROGRESS' as const;
  /** How long the client should wait before it sends the same request again, ms. */
  readonly retryAfterMs: number;
  constructor(options?: MrtrErrorOptions & { retryAfterMs?: number | undefined }) {
    super('ERR_ROUND_IN_PROGRESS', options);
    this.retryAfterMs = options?.retryAfterMs ?? 1_000;
  }
}

/**
 * An identical retry of a round whose first attempt stopped without recording its outcome: its claim's lease lapsed
 * (the instance running it died or lost the store). The round may have run, or not: the client should check the
 * effect before trying again (a new flow), never assume it did not happen.
 */
export class OutcomeUnknownError extends MrtrError<'ERR_OUTCOME_UNKNOWN'> {
  static override readonly code = 'ERR_OUTCOME_UNKNOWN' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_OUTCOME_UNKNOWN', options);
  }
}

/**
 * This instance's clock is further from the replay store's than the guard's `clockSkewMs` tolerates (measured from the
 * store, or a state the guard holds live that the store's clock says has expired). Nothing is spent or minted until it
 * is back within bounds (fail closed): fix the instance's time (NTP).
 */
export class ClockSkewError extends MrtrError<'ERR_CLOCK_SKEW'> {
  static override readonly code = 'ERR_CLOCK_SKEW' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_CLOCK_SKEW', options);
  }
}

/**
 * The replay store's ledger began after this state was minted (it restarted empty, was flushed, or failed over to an
 * empty replica): the store cannot know whether the state was spent, so it is refused. The client starts a new flow.
 */
export class LedgerLostError extends MrtrError<'ERR_LEDGER_LOST'> {
  static override readonly code = 'ERR_LEDGER_LOST' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_LEDGER_LOST', options);
  }
}

/** Which bound of a task store refused a new task. */
export type TaskLimit = 'live' | 'kept' | 'store';

/**
 * A task store refused a new task: the principal already holds its most unfinished tasks (`live`), or its most
 * tasks kept until their `ttlMs` passes, finished ones included (`kept`), or the store is full (`store`).
 */
export class TaskLimitError extends MrtrError<'ERR_TASK_LIMIT'> {
  static override readonly code = 'ERR_TASK_LIMIT' as const;
  /** The bound that was reached. */
  readonly limit: TaskLimit;
  /** Its value (how many tasks the bound allows). */
  readonly max: number;
  constructor(limit: TaskLimit, max: number, options?: MrtrErrorOptions) {
    super('ERR_TASK_LIMIT', options);
    this.limit = limit;
    this.max = max;
  }
}

/**
 * No key of a refreshing ring may seal now: every key is scheduled to start later or is past its `notAfter`. Nothing
 * is sealed or opened until the source gives a key that is active (fail closed).
 */
export class KeysUnavailableError extends MrtrError<'ERR_KEYS_UNAVAILABLE'> {
  static override readonly code = 'ERR_KEYS_UNAVAILABLE' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_KEYS_UNAVAILABLE', options);
  }
}
/** A key source threw, or returned something that is not a valid key set (the reason is the `cause`). */
export class KeySourceError extends MrtrError<'ERR_KEY_SOURCE'> {
  static override readonly code = 'ERR_KEY_SOURCE' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_KEY_SOURCE', options);
  }
}
/**
 * A refresh returned a known key id with another secret. Refused (the last good ring stays): a kid's secret never
 * changes, so that what was sealed under it keeps opening and caches of its subkeys stay valid. Use a new kid.
 */
export class KeyConflictError extends MrtrError<'ERR_KEY_CONFLICT'> {
  static override readonly code = 'ERR_KEY_CONFLICT' as const;
  /** The key id whose secret changed (an id, never key material). */
  readonly kid: string;
  constructor(kid: string, options?: MrtrErrorOptions) {
    super('ERR_KEY_CONFLICT', options);
    this.kid = kid;
  }
}
/** Why a replica's ring does not match the fleet's (see {@link KeyMismatchError}). */
export type KeyMismatch = 'secret' | 'missing';
/** Where and until when the fleet's record of a kid is held (see {@link KeyMismatchError}). */
export interface KeyMismatchOptions extends MrtrErrorOptions {
  /** Until when (ms since the epoch) the store holds the fleet's record of `kid`: the fleet may present states sealed under it until then. */
  expiresAtMs?: number | undefined;
  /** The store's namespace that holds the record, when the store names it (`ReplayStore.namespace`). */
  namespace?: string | undefined;
}

/**
 * The fleet check (`StateGuard.checkKeys`) found that this replica's ring cannot open what the fleet seals: the
 * shared store holds another secret's fingerprint for `kid` (`secret`), or a kid the fleet seals with is not in
 * this ring (`missing`). A start-up error, never sent to a client: its message names the kid, the namespace that holds
 * the record and until when, and how to proceed (the same keys as the fleet; or, when no replica runs under those
 * keys any more — a restart with new keys — wait until then, use another namespace, or delete the namespace's key
 * fingerprints).
 */
export class KeyMismatchError extends MrtrError<'ERR_KEY_MISMATCH'> {
  static override readonly code = 'ERR_KEY_MISMATCH' as const;
  /** The key id at fault (an id, never key material). */
  readonly kid: string;
  readonly reason: KeyMismatch;
  /** Until when (ms since the epoch) the store holds the fleet's record of `kid`; `undefined` when not known. */
  readonly expiresAtMs: number | undefined;
  /** The store's namespace that holds the record; `undefined` when the store does not name it. */
  readonly namespace: string | undefined;
  constructor(kid: string, reason: KeyMismatch, options?: KeyMismatchOptions) {
    super('ERR_KEY_MISMATCH', options);
    this.kid = kid;
    this.reason = reason;
    this.expiresAtMs = options?.expiresAtMs;
    this.namespace = options?.namespace;
    const where = this.namespace === undefined ? 'the shared store' : `namespace ${JSON.stringify(this.namespace)} of the shared store`;
    const what =
      reason === 'secret'
        ? `${where} holds the fleet's fingerprint of another secret under kid ${JSON.stringify(kid)}`
        : `${where} holds the fleet's fingerprint of kid ${JSON.stringify(kid)}, which this key ring lacks`;
    const date = new Date(this.expiresAtMs ?? Number.NaN);
    const until = Number.isNaN(date.getTime()) ? '' : ` until ${date.toISOString()}`;
    const stale = until === '' ? 'until it expires' : until.slice(1);
    this.message =
      `${this.message}: ${what}${until}. Give this replica the same keys as the fleet; if no replica runs under those ` +
      `keys any more (a restart with new keys), wait ${stale}, use another namespace, or delete that namespace's key fingerprints`;
  }
}

/**
 * A keyed first-round call (`GuardRequest.claimKey`) whose key this principal already used on this tool with other
 * arguments, or whose first call's result was not kept (too large, past the outcome budget, or dropped after
 * `MAX_FINGERPRINT_MISSES` conflicting uses): the call does not run. The key is free again once it expires.
 */
export class IdempotencyKeyConflictError extends MrtrError<'ERR_IDEMPOTENCY_KEY_CONFLICT'> {
  static override readonly code = 'ERR_IDEMPOTENCY_KEY_CONFLICT' as const;
  constructor(options?: MrtrErrorOptions) {
    super('ERR_IDEMPOTENCY_KEY_CONFLICT', options);
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
  | CapabilityMissingError
  | QuotaExceededError
  | SealFailedError
  | RoundInProgressError
  | OutcomeUnknownError
  | IdempotencyKeyConflictError
  | ClockSkewError
  | LedgerLostError
  | TaskLimitError
  | KeysUnavailableError
  | KeySourceError
  | KeyConflictError
  | KeyMismatchError;

const SERVER_FAULTS: ReadonlySet<MrtrErrorCode> = new Set<MrtrErrorCode>([
  'ERR_STORE_UNAVAILABLE',
  'ERR_STORE_FULL',
  'ERR_SEAL_FAILED',
  'ERR_CLOCK_SKEW',
  'ERR_KEYS_UNAVAILABLE',
  'ERR_KEY_SOURCE',
  'ERR_KEY_CONFLICT',
  'ERR_KEY_MISMATCH',
]);

/**
 * True for server-side faults (store outage, full store, a failed seal, no usable key): answer `-32603`, never
 * "invalid state".
 */
export function isServerFault(code: MrtrErrorCode): boolean {
  return SERVER_FAULTS.has(code);
}

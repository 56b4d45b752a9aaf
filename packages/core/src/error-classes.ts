/**
 * The concrete error classes, one per `MrtrErrorCode` (`instanceof`-able across builds through `MrtrError`'s brand):
 * exported by `@mrtr/core/errors`, for applications that match on them and for authors who throw them.
 */
export {
  CapabilityMissingError,
  ClockSkewError,
  FlowExpiredError,
  FlowRoundsError,
  IdempotencyKeyConflictError,
  KeyConflictError,
  KeyMismatchError,
  KeySourceError,
  KeysUnavailableError,
  KeyUnknownError,
  LedgerLostError,
  OutcomeUnknownError,
  PrincipalRequiredError,
  QuotaExceededError,
  RoundInProgressError,
  SealFailedError,
  StateAudienceError,
  StateBindingError,
  StateExpiredError,
  StateIntegrityError,
  StateMalformedError,
  StatePrincipalError,
  StateReplayedError,
  StateTooLargeError,
  StoreFullError,
  StoreUnavailableError,
  TaskLimitError,
} from './errors.js';

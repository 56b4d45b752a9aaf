/**
 * `@mrtr/core/errors`: one concrete class per code (each a `MrtrError`, the base class `@mrtr/core` exports), the
 * code lists and `isServerFault`, for applications that match on them and for authors who throw them.
 */
export {
  type AnyMrtrError,
  isServerFault,
  type KeyMismatch,
  type KeyMismatchOptions,
  MRTR_ERROR_CODES,
  MRTR_REJECTION_CODES,
  type MrtrErrorOptions,
  type TaskLimit,
} from './errors.js';
export * from './error-classes.js';

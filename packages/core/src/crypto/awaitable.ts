/**
 * The one place core decides between "now" and "later". Core's crypto is synchronous on Node (`node:crypto`) and
 * asynchronous where only WebCrypto exists; a codec may be either. Everything above this module composes such values
 * with {@link andThen} and awaits once, instead of testing for promises itself.
 */

/** A value now, or a promise of it: what a codec's `seal`/`unseal` and core's crypto primitives return. */
export type Awaitable<T> = T | Promise<T>;

/** Whether `value` is a promise or another thenable (a codec may return any `PromiseLike`). */
export const isPromiseLike = <T>(value: T | PromiseLike<T>): value is PromiseLike<T> =>
  value instanceof Promise || (value !== null && typeof value === 'object' && typeof (value as { then?: unknown }).then === 'function');

/**
 * `fn(value)`, now when `value` is a plain value (no promise, no microtask), after it resolves when it is a promise.
 * `onRejected`, if given, handles a rejection of `value` only (like the second argument of `then`): a plain value is
 * never an error, and an error thrown by `fn` is not passed to it.
 */
export function andThen<T, R>(
  value: T | PromiseLike<T>,
  fn: (value: T) => Awaitable<R>,
  onRejected?: (error: unknown) => Awaitable<R>,
): Awaitable<R> {
  if (!isPromiseLike(value)) return fn(value);
  return Promise.resolve(value).then(fn, onRejected);
}

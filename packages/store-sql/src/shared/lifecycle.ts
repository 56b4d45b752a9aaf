import { MrtrError } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { BackgroundError } from '@mrtr/core/store';

/** Anything that is not already a `MrtrError` becomes `ERR_STORE_UNAVAILABLE` with the original as `cause`. */
export function toStoreError(error: unknown): MrtrError {
  return MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error });
}

/** `ERR_STORE_UNAVAILABLE` of a store that was closed (`what`: "replay store", "task store"). */
export const closedError = (what: 'replay store' | 'task store' = 'replay store'): StoreUnavailableError =>
  new StoreUnavailableError({ cause: new Error(`${what} is closed`) });

/** Caches a successful async initialisation; a failed one is retried by the next caller. */
export function once<T>(init: () => Promise<T>): { get(): Promise<T>; readonly done: boolean } {
  let pending: Promise<T> | undefined;
  let done = false;
  return {
    get() {
      if (pending === undefined) {
        pending = init().then(
          (value) => {
            done = true;
            return value;
          },
          (error: unknown) => {
            pending = undefined;
            throw error;
          },
        );
      }
      return pending;
    },
    get done() {
      return done;
    },
  };
}

/**
 * Runs bounded purge passes on an unref'd interval, one at a time. `run` must never throw
 * synchronously into the timer; its errors go to `onError` as a `STORE_PURGE_FAILED` {@link BackgroundError}
 * labelled with `label` (the factory), the error itself as `cause`.
 */
export function startPurgeTimer(
  label: string,
  intervalMs: number,
  run: () => Promise<unknown>,
  onError: (error: BackgroundError) => void,
): () => void {
  if (intervalMs === 0) return () => {};
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    run()
      .catch((error: unknown) => {
        try {
          const reason = error instanceof Error ? error.message || error.name : String(error);
          onError(
            new BackgroundError(
              'STORE_PURGE_FAILED',
              `${label}: the background purge failed (${reason}); expired rows stay until a later run succeeds`,
              { cause: error },
            ),
          );
        } catch {
          // a throwing onError must not become an unhandled rejection
        }
      })
      .finally(() => {
        running = false;
      });
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** Runs `work`; any failure that is not already a `MrtrError` becomes `ERR_STORE_UNAVAILABLE` (see {@link toStoreError}). */
export async function storeCall<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw toStoreError(error);
  }
}

/** An idempotent `close()`: `shutdown` runs on the first call; every call gets its promise. */
export function closeOnce(shutdown: () => Promise<void>): () => Promise<void> {
  let closing: Promise<void> | undefined;
  return () => {
    closing ??= shutdown();
    return closing;
  };
}

/** A connection (a pool, a database) a store was given or opens itself on first use. */
export interface ResourceHandle<T> {
  get(): Promise<T>;
  /** Whether it exists (an idle store opens nothing). */
  readonly done: boolean;
  /** The one the store opened itself, once it exists. */
  readonly owned: T | undefined;
  /** Closes one the store opened (waiting for one still being opened); never an injected one. */
  close(): Promise<void>;
}

/** The injected resource, or the one `open` makes on first use (retried after a failure) and `release` closes. */
export function resourceHandle<T>(
  injected: T | undefined,
  open: () => Promise<T>,
  release: (owned: T) => Promise<void>,
): ResourceHandle<T> {
  let owned: T | undefined;
  const ready = once<T>(async () => {
    if (injected !== undefined) return injected;
    owned = await open();
    return owned;
  });
  return {
    get: () => ready.get(),
    get done() {
      return ready.done;
    },
    get owned() {
      return owned;
    },
    async close() {
      if (injected !== undefined) return;
      await ready.get().catch(() => undefined);
      if (owned !== undefined) await release(owned);
    },
  };
}

/**
 * The resource once its schema is ensured (when the store ensures it: `schema` set): `ready()` sets it up,
 * `current()` answers without an await once it is.
 */
export function whenReady<T>(handle: { get(): Promise<T> }, schema: { get(): Promise<void> } | undefined) {
  let current: T | undefined;
  return {
    current: (): T | undefined => current,
    async ready(): Promise<T> {
      if (current !== undefined) return current;
      const value = await handle.get();
      if (schema !== undefined) await schema.get();
      current = value;
      return value;
    },
  };
}

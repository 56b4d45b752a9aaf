import type { Awaitable } from '../crypto/awaitable.js';
import { KeyConflictError, KeySourceError, KeysUnavailableError, MrtrError } from '../errors.js';
import { type KeySetInput, parseKeySet } from './sources.js';
import { type KeyRing, ringInternals } from './keys.js';
import { type OptionNames, rejectUnknownOptions } from '../util/validate.js';

/** Options of {@link KeyProvider.create}. */
export interface KeyProviderOptions {
  /**
   * Reads the key set: an `MRTR_KEYS` value, a JWK Set (text or object) or keys with their schedule. Called once by
   * `create`, then every `refreshMs` and on `refresh()`. Put a secret manager read or a KMS unwrap here.
   */
  load: () => Awaitable<KeySetInput>;
  /** Time between refreshes, ms; `0`: only on `refresh()`. @default 300000 (5 minutes) */
  refreshMs?: number;
  /** The clock the schedule is read with (ms since the epoch). @default Date.now */
  now?: () => number;
  /**
   * Called when a refresh fails (`ERR_KEY_SOURCE`, `ERR_KEY_CONFLICT`, `ERR_KEYS_UNAVAILABLE`): the last good ring stays
   * in force. A throw from the hook is swallowed.
   */
  onError?: (error: MrtrError) => void;
  /** Called after a refresh that changed the key set (a throw from the hook is swallowed). */
  onChange?: (keys: KeyRing) => void;
}

const OPTIONS: OptionNames<KeyProviderOptions> = { load: true, refreshMs: true, now: true, onError: true, onChange: true };
const DEFAULT_REFRESH_MS = 300_000;
const MAX_REFRESH_MS = 86_400_000;

const quietly = <A>(hook: ((arg: A) => void) | undefined, arg: A): void => {
  if (hook === undefined) return;
  try {
    hook(arg);
  } catch {
    // An observer never changes what the provider does.
  }
};

/**
 * A key ring that refreshes itself without a restart. `keys` is a refreshing {@link KeyRing}: give it to the guard
 * (and the adapter) like any ring; the guard reads the ring in force per operation and rebuilds its codec only when
 * it changes. Each key may carry a schedule (`notBefore`: starts sealing; `notAfter`: stops opening), so every replica
 * reading the same source switches at the same moment, within their clock skew, without a coordinator.
 *
 * Fails closed: `create` rejects when the first load fails or gives no key that may seal now; a later refresh that
 * fails (the source throws, returns an invalid set, changes a known kid's secret, or has no key that may seal) keeps
 * the last good ring and reports the error to `onError`. No key seals before its `notBefore`.
 */
export class KeyProvider {
  /** The refreshing ring. */
  readonly keys: KeyRing;
  readonly #load: () => Awaitable<KeySetInput>;
  readonly #now: () => number;
  readonly #onError: ((error: MrtrError) => void) | undefined;
  readonly #onChange: ((keys: KeyRing) => void) | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #inflight: Promise<boolean> | undefined;
  #closed = false;

  private constructor(keys: KeyRing, options: KeyProviderOptions, now: () => number) {
    this.keys = keys;
    this.#load = options.load;
    this.#now = now;
    this.#onError = options.onError;
    this.#onChange = options.onChange;
  }

  /** Loads the key set once and starts refreshing it (rejects when the first load fails: nothing starts on no keys). */
  static async create(options: KeyProviderOptions): Promise<KeyProvider> {
    if (options === null || typeof options !== 'object') throw new TypeError('KeyProvider.create: options must be an object');
    rejectUnknownOptions('KeyProvider.create', options, OPTIONS);
    if (typeof options.load !== 'function') throw new TypeError('KeyProvider.create: load must be a function');
    const now = options.now ?? Date.now;
    if (typeof now !== 'function') throw new TypeError('KeyProvider.create: now must be a function');
    for (const name of ['onError', 'onChange'] as const) {
      if (options[name] !== undefined && typeof options[name] !== 'function')
        throw new TypeError(`KeyProvider.create: ${name} must be a function`);
    }
    const refreshMs = options.refreshMs ?? DEFAULT_REFRESH_MS;
    if (!Number.isSafeInteger(refreshMs) || refreshMs < 0 || refreshMs > MAX_REFRESH_MS) {
      throw new RangeError(`KeyProvider.create: refreshMs must be an integer in 0-${MAX_REFRESH_MS}`);
    }
    const loaded = await loadKeys(options.load);
    let keys: KeyRing;
    try {
      keys = ringInternals.live(now, loaded);
    } catch (cause) {
      throw new KeySourceError({ cause });
    }
    keys.current(); // ERR_KEYS_UNAVAILABLE now rather than at the first request
    const provider = new KeyProvider(keys, options, now);
    if (refreshMs > 0) {
      const timer = setInterval(() => {
        provider.refresh().catch(() => {});
      }, refreshMs);
      (timer as { unref?: () => void }).unref?.();
      provider.#timer = timer;
    }
    return provider;
  }

  /**
   * Reads the source now. Resolves `true` when the key set changed, `false` when it did not; rejects (and calls
   * `onError`) when the refresh failed, the last good ring staying in force. Concurrent calls share one read.
   */
  refresh(): Promise<boolean> {
    if (this.#closed) return Promise.reject(new TypeError('KeyProvider: closed'));
    this.#inflight ??= this.#refreshOnce().finally(() => {
      this.#inflight = undefined;
    });
    return this.#inflight;
  }

  async #refreshOnce(): Promise<boolean> {
    let changed: boolean;
    try {
      const keys = await loadKeys(this.#load);
      // A set with no key that may seal now would leave the fleet unable to mint: refused like an invalid one.
      probe(keys, this.#now());
      changed = ringInternals.replace(this.keys, keys);
    } catch (error) {
      const reported = MrtrError.is(error) ? error : new KeySourceError({ cause: error });
      quietly(this.#onError, reported);
      throw reported;
    }
    if (changed) quietly(this.#onChange, this.keys);
    return changed;
  }

  /** Stops the refresh timer (idempotent); the ring keeps its last keys. */
  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

/** Calls the source and validates what it returned (a failure is `ERR_KEY_SOURCE` with the reason as `cause`). */
async function loadKeys(load: () => Awaitable<KeySetInput>) {
  try {
    return parseKeySet(await load());
  } catch (cause) {
    if (cause instanceof KeyConflictError) throw cause;
    throw new KeySourceError({ cause });
  }
}

/** Throws `ERR_KEYS_UNAVAILABLE` when no key of `keys` may seal at `t`. */
function probe(keys: ReturnType<typeof parseKeySet>, t: number): void {
  const sealing = keys.some((k) => (k.notBefore ?? Number.NEGATIVE_INFINITY) <= t && t < (k.notAfter ?? Number.POSITIVE_INFINITY));
  if (!sealing) throw new KeysUnavailableError();
}

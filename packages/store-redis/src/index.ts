import { type ReplayStore, StoreUnavailableError } from '@mrtr/core';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';

/** Options of {@link createRedisStore}. Give `url` or `client`, not both. */
export interface RedisStoreOptions {
  /**
   * Connection URL (`redis://`, `rediss://`, with user, password and db) for a client the store creates
   * and owns. Default `redis://127.0.0.1:6379` when no `client` is given.
   */
  url?: string | undefined;
  /**
   * An existing ioredis `Redis` or `Cluster` instance. The store only sends `SET … NX PXAT` on it and
   * never quits it: its owner closes it. Its own options (offline queue, retries) stay in force; the
   * store bounds every command with `commandTimeoutMs` itself.
   */
  client?: Redis | Cluster | undefined;
  /** Raw key prefix. Default `"mrtr:replay:"`. */
  prefix?: string | undefined;
  /**
   * Ledger name inside the prefix: the key is `prefix + namespace + ":" + id`, with `%` and `:` in the
   * namespace percent-encoded so two namespaces can never produce the same key. Default `"default"`.
   */
  namespace?: string | undefined;
  /**
   * Extra time each record is kept after `expiresAtMs`. Redis expires keys by its own clock: if that
   * clock may run ahead of this host's, set this to the bound so a record cannot vanish while a token
   * is still valid here. Default `0`.
   */
  extraRetentionMs?: number | undefined;
  /** Longest wait for one `SET` reply before `ERR_STORE_UNAVAILABLE`. Default `1000`. */
  commandTimeoutMs?: number | undefined;
  /** Owned client: longest wait for a TCP/TLS connection, and for the first `ready` at start-up. Default `2000`. */
  connectTimeoutMs?: number | undefined;
  /** Owned client: cap of the exponential reconnect backoff (50 ms, 100 ms, … up to this). Default `2000`. */
  maxReconnectDelayMs?: number | undefined;
  /**
   * Owned client: further ioredis options (TLS, credentials, `db`, `connectionName`, …). The options that
   * make an outage fail fast (`enableOfflineQueue`, `maxRetriesPerRequest`, `autoResendUnfulfilledCommands`,
   * timeouts, `retryStrategy`) are set by the store and override these.
   */
  redisOptions?: RedisOptions | undefined;
}

/** A {@link ReplayStore} on Redis. */
export interface RedisReplayStore extends ReplayStore {
  /** The connection in use (owned unless it was passed in as `client`). */
  readonly client: Redis | Cluster;
  /** The prefix every key of this store starts with (`prefix + encoded namespace + ":"`). */
  readonly keyPrefix: string;
}

interface SetNxPxat {
  set(key: string, value: string, pxat: 'PXAT', unixTimeMs: number, nx: 'NX'): Promise<'OK' | null>;
}

const DEFAULT_URL = 'redis://127.0.0.1:6379';
const DEFAULT_PREFIX = 'mrtr:replay:';
const DEFAULT_NAMESPACE = 'default';

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`createRedisStore: ${name} must be a positive integer (milliseconds)`);
  }
  return value;
}

/**
 * Replay store on Redis ≥ 6.2. Each `consume` is one atomic `SET key 1 NX PXAT expiresAtMs` on one
 * key: `"OK"` → `true` (first use), nil → `false`. No multi-key command is used, so it runs unchanged on
 * Redis Cluster. Any error, timeout or unexpected reply rejects with `StoreUnavailableError` (the
 * original error as `cause`) — never `true`.
 *
 * The owned client fails fast while Redis is down (offline queue disabled, in-flight commands rejected
 * when the connection drops, not resent) and reconnects by itself with capped exponential backoff, so
 * consumes succeed again as soon as Redis is back.
 *
 * An `expiresAtMs` at or before this process's `Date.now()` resolves `false` without a command:
 * Redis would accept `SET … PXAT <past>` and drop the key at once, so every call would look like a
 * first use.
 */
export function createRedisStore(options: RedisStoreOptions = {}): RedisReplayStore {
  if (options === null || typeof options !== 'object') {
    throw new TypeError('createRedisStore: options must be an object');
  }
  const { url, client: injected } = options;
  if (url !== undefined && injected !== undefined) {
    throw new TypeError('createRedisStore: give either url or client, not both');
  }
  if (url !== undefined && typeof url !== 'string') throw new TypeError('createRedisStore: url must be a string');
  if (injected !== undefined && (injected === null || typeof (injected as Partial<SetNxPxat>).set !== 'function')) {
    throw new TypeError('createRedisStore: client must be an ioredis Redis or Cluster instance');
  }
  const prefix = options.prefix ?? DEFAULT_PREFIX;
  if (typeof prefix !== 'string') throw new TypeError('createRedisStore: prefix must be a string');
  const namespace = options.namespace ?? DEFAULT_NAMESPACE;
  if (typeof namespace !== 'string' || namespace.length === 0) {
    throw new TypeError('createRedisStore: namespace must be a non-empty string');
  }
  const commandTimeoutMs = positiveInteger(options.commandTimeoutMs, 1000, 'commandTimeoutMs');
  const connectTimeoutMs = positiveInteger(options.connectTimeoutMs, 2000, 'connectTimeoutMs');
  const maxReconnectDelayMs = positiveInteger(options.maxReconnectDelayMs, 2000, 'maxReconnectDelayMs');
  const extraRetentionMs = options.extraRetentionMs ?? 0;
  if (!Number.isSafeInteger(extraRetentionMs) || extraRetentionMs < 0) {
    throw new RangeError('createRedisStore: extraRetentionMs must be a non-negative integer (milliseconds)');
  }
  const redisOptions = options.redisOptions ?? {};
  if (redisOptions === null || typeof redisOptions !== 'object') {
    throw new TypeError('createRedisStore: redisOptions must be an object');
  }

  const keyPrefix = `${prefix}${namespace.replaceAll('%', '%25').replaceAll(':', '%3A')}:`;
  const owned = injected === undefined;
  let lastError: unknown;
  const client: Redis | Cluster =
    injected ??
    new Redis(url ?? DEFAULT_URL, {
      ...(redisOptions as RedisOptions & { replyMapping?: 'legacy' }),
      lazyConnect: false,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      enableReadyCheck: true,
      connectTimeout: connectTimeoutMs,
      commandTimeout: commandTimeoutMs,
      retryStrategy: (attempt: number) => {
        const base = Math.min(maxReconnectDelayMs, 50 * 2 ** Math.min(attempt - 1, 16));
        return Math.max(1, Math.round(base * (0.8 + Math.random() * 0.2)));
      },
      // After a failover a connection may land on a replica: reconnect instead of failing forever.
      reconnectOnError: (error: Error) => error.message.startsWith('READONLY'),
    });
  const commands = client as unknown as SetNxPxat;

  let closed = false;
  let closing: Promise<void> | undefined;
  let everReady = false;
  let startup: Promise<void> | undefined;

  if (owned) {
    const redis = client as Redis;
    // Without a listener ioredis prints every connection error; keep the last one as the `cause`.
    redis.on('error', (error: unknown) => {
      lastError = error;
    });
    redis.on('ready', () => {
      everReady = true;
      lastError = undefined;
    });
  }

  /** Owned client only: at start-up, wait (bounded) for the first connection; afterwards never wait. */
  const whenUsable = (): Promise<void> | undefined => {
    const redis = client as Redis;
    const status = redis.status;
    if (status === 'ready') return undefined;
    if (everReady || (status !== 'wait' && status !== 'connecting' && status !== 'connect')) {
      return Promise.reject(new StoreUnavailableError({ cause: lastError ?? new Error(`redis connection is ${status}`) }));
    }
    startup ??= new Promise<void>((resolve, reject) => {
      const done = (error?: unknown) => {
        clearTimeout(timer);
        redis.off('ready', onReady);
        redis.off('close', onClose);
        startup = undefined;
        if (error === undefined) resolve();
        else reject(new StoreUnavailableError({ cause: error }));
      };
      const onReady = () => done();
      const onClose = () => done(lastError ?? new Error('redis connection closed'));
      const timer = setTimeout(() => done(new Error('redis connection timed out')), connectTimeoutMs);
      timer.unref();
      redis.once('ready', onReady);
      redis.once('close', onClose);
    });
    return startup;
  };

  /** Injected client: bound the command ourselves, whatever the client's own settings. */
  const bounded = (reply: Promise<'OK' | null>): Promise<'OK' | null> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('redis command timed out')), commandTimeoutMs);
      reply.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });

  const interpret = (reply: unknown): boolean => {
    if (reply === 'OK') return true;
    if (reply === null) return false;
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to SET NX PXAT') });
  };
  const fail = (cause: unknown): never => {
    if (cause instanceof StoreUnavailableError) throw cause;
    throw new StoreUnavailableError({ cause });
  };

  const send = (key: string, at: number): Promise<boolean> => {
    const reply = commands.set(key, '1', 'PXAT', at, 'NX');
    return (owned ? reply : bounded(reply)).then(interpret, fail);
  };

  const consume = (id: string, expiresAtMs: number): Promise<boolean> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    if (typeof id !== 'string' || id.length === 0) {
      return Promise.reject(new TypeError('consume: id must be a non-empty string'));
    }
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return Promise.reject(new TypeError('consume: expiresAtMs must be a finite number'));
    }
    if (expiresAtMs <= Date.now()) return Promise.resolve(false);
    const key = keyPrefix + id;
    // Round up: the id must be remembered until at least expiresAtMs.
    const at = Math.ceil(expiresAtMs) + extraRetentionMs;
    try {
      const wait = owned ? whenUsable() : undefined;
      if (wait === undefined) return send(key, at);
      return wait.then(() => (closed ? fail(new Error('store is closed')) : send(key, at)));
    } catch (cause) {
      // ioredis may throw synchronously (e.g. a Cluster with no nodes): still never true.
      return Promise.reject(new StoreUnavailableError({ cause }));
    }
  };

  const close = (): Promise<void> => {
    closed = true;
    if (closing !== undefined) return closing;
    if (!owned) {
      closing = Promise.resolve();
      return closing;
    }
    const redis = client as Redis;
    closing = (async () => {
      const status = redis.status;
      // A live socket ends with an 'end' event; wait for it (bounded) so close() means closed.
      const ended =
        status === 'ready' || status === 'connect' || status === 'connecting'
          ? new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, connectTimeoutMs);
              timer.unref();
              redis.once('end', () => {
                clearTimeout(timer);
                resolve();
              });
            })
          : undefined;
      try {
        if (status === 'ready') await redis.quit();
      } catch {
        // The connection is going away either way.
      }
      // Also cancels a pending reconnect timer, so nothing keeps the process alive.
      redis.disconnect(false);
      await ended;
    })();
    return closing;
  };

  return { consume, close, client, keyPrefix };
}

import { StoreUnavailableError } from '@mrtr/core/errors';
import { BackgroundError, redactUrl, withDeadline } from '@mrtr/core/store';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';

/** The commands the replay store sends. */
export interface RedisCommands {
  set(key: string, value: string, pxat: 'PXAT', unixTimeMs: number, nx: 'NX'): Promise<'OK' | null>;
  get(key: string): Promise<string | null>;
  mget(...keys: string[]): Promise<(string | null)[]>;
  evalsha(sha: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  config(op: 'GET', name: string): Promise<unknown>;
  info(section: string): Promise<unknown>;
  time(): Promise<unknown>;
}

export const DEFAULT_URL = 'redis://127.0.0.1:6379';
export const timedOut = (): Error => new Error('redis command timed out');

/** The store's connection: owned (created from `url`) or injected (`client`). */
export interface RedisConnection {
  readonly client: Redis | Cluster;
  readonly commands: RedisCommands;
  /** Whether the store created the client (and so closes it). */
  readonly owned: boolean;
  /** Owned client only: at start-up, wait (bounded) for the first connection; afterwards never wait. */
  whenUsable(): Promise<void> | undefined;
  /** Injected client: bound each command ourselves, whatever the client's own settings (owned: ioredis `commandTimeout`). */
  bounded<T>(reply: Promise<T>): Promise<T>;
  /** Stops the start-up report timer. */
  stop(): void;
  /** Owned client: quits (when ready) and waits, bounded, for the socket's end; injected: nothing. */
  end(): Promise<void>;
}

/** What {@link openConnection} needs: the connection options both stores parse alike, and how reports name the store. */
export interface ConnectionOptions {
  readonly url: string | undefined;
  readonly injected: Redis | Cluster | undefined;
  readonly redisOptions: RedisOptions;
  readonly connectTimeoutMs: number;
  readonly commandTimeoutMs: number;
  readonly maxReconnectDelayMs: number;
  /** `store`: '' for the replay store, else its name ('task store'); `operation`: what fails closed while Redis is down. */
  readonly subject: { readonly store: string; readonly operation: string };
}

/**
 * Opens the owned client (fail-fast options, capped exponential reconnect) or wraps the injected one. An owned
 * client that is down at start-up is reported through `warn` at once (`STORE_UNREACHABLE`), not only by the first
 * consume, and once more when it is reached after that (`STORE_REACHABLE`).
 */
export function openConnection(
  options: ConnectionOptions,
  warn: (error: BackgroundError) => void,
  isClosed: () => boolean,
): RedisConnection {
  const { url, injected, redisOptions, connectTimeoutMs, commandTimeoutMs, maxReconnectDelayMs, subject } = options;
  // How the start-up reports name the store: '' (the replay store) or e.g. 'task store'.
  const who = subject.store === '' ? '' : `${subject.store} `;
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
  const commands = client as unknown as RedisCommands;
  let everReady = false;
  let startup: Promise<void> | undefined;

  // Owned client: a Redis that is down at start-up is reported at once (through onError), not only by the
  // first consume; consumes still fail closed until it is reachable.
  let startupTimer: ReturnType<typeof setTimeout> | undefined;
  if (owned) {
    const redis = client as Redis;
    const where = redactUrl(url ?? DEFAULT_URL);
    let reportedDown = false;
    const reportDown = (cause: unknown): void => {
      clearTimeout(startupTimer);
      if (reportedDown || everReady || isClosed()) return;
      reportedDown = true;
      const reason = cause instanceof Error ? cause.message || cause.name : String(cause);
      warn(
        new BackgroundError(
          'STORE_UNREACHABLE',
          `@mrtr/store-redis: ${who}cannot reach Redis at ${where} at start-up (${reason}); every ${subject.operation} fails closed with ERR_STORE_UNAVAILABLE until it is reachable.`,
          { cause },
        ),
      );
    };
    // Without a listener ioredis prints every connection error; keep the last one as the `cause`.
    redis.on('error', (error: unknown) => {
      lastError = error;
      if (!everReady) reportDown(error);
    });
    redis.on('ready', () => {
      clearTimeout(startupTimer);
      if (reportedDown && !everReady)
        warn(
          new BackgroundError('STORE_REACHABLE', `@mrtr/store-redis: ${who && `${subject.store}: `}Redis at ${where} is reachable now.`),
        );
      everReady = true;
      lastError = undefined;
    });
    startupTimer = setTimeout(() => reportDown(lastError ?? new Error(`no connection within ${connectTimeoutMs} ms`)), connectTimeoutMs);
    startupTimer.unref?.();
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

  const bounded = <T>(reply: Promise<T>): Promise<T> => (owned ? reply : withDeadline(reply, commandTimeoutMs, timedOut));

  const end = async (): Promise<void> => {
    if (!owned) return;
    const redis = client as Redis;
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
  };

  return { client, commands, owned, whenUsable, bounded, stop: () => clearTimeout(startupTimer), end };
}

/** Redis's `TIME` reply (`[seconds, microseconds]`) in epoch ms. */
export function redisMs(reply: unknown): number {
  const [seconds, micros] = Array.isArray(reply) ? reply.map(Number) : [];
  if (seconds === undefined || micros === undefined || !Number.isFinite(seconds) || !Number.isFinite(micros)) {
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to TIME') });
  }
  return seconds * 1000 + Math.floor(micros / 1000);
}

import { createHash } from 'node:crypto';
import { type ClaimResult, MrtrError, type ReplayStore } from '@mrtr/core';
import {
  type BatchEntry,
  base64urlEncode,
  createBatcher,
  ownerValues,
  randomBytes,
  StoreUnavailableError,
  withDeadline,
} from '@mrtr/core/authoring';
import { type Cluster, Redis, type RedisOptions, ReplyError } from 'ioredis';
import { hashSlot } from './hash-slot.js';

export { hashSlot } from './hash-slot.js';

/** Options of {@link createRedisStore}. Give `url` or `client`, not both. */
export interface RedisStoreOptions {
  /**
   * Connection URL (`redis://`, `rediss://`, with user, password and db) for a client the store creates
   * and owns. Default `redis://127.0.0.1:6379` when no `client` is given.
   */
  url?: string | undefined;
  /**
   * An existing ioredis `Redis` or `Cluster` instance. The store only sends `SET … NX PXAT`, `GET`, for
   * batches `EVALSHA`/`EVAL` of its batch script and `MGET`, and for `claim`/`record` `EVALSHA`/`EVAL` of
   * their one-key scripts, on it and never quits it: its owner closes it. Its own options (offline queue,
   * retries) stay in force; the store bounds every command with `commandTimeoutMs` itself.
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
  /**
   * Longest wait for one `SET` reply. When it passes (or the connection drops with the `SET` in flight)
   * the store asks once, with a `GET` bounded by the same time, whether the key holds this call's owner
   * value; only if that is still unknown does the consume reject `ERR_STORE_UNAVAILABLE`. Default `1000`.
   */
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
  /**
   * What to do at start-up when Redis reports a `maxmemory-policy` that may evict keys (`allkeys-*` or
   * `volatile-*`: every key of this store has an expiry, so `volatile-*` policies target exactly them).
   * An evicted id can be used again. `'warn'` (default) calls `onWarning`; `'refuse'` makes every consume (and claim)
   * reject `ERR_STORE_UNAVAILABLE` until a later check (on reconnect) sees a safe policy; `'off'` skips
   * the check. When `CONFIG GET` is not allowed (managed Redis, ACLs) the policy is unknown: `'warn'`
   * warns that it could not be checked, `'refuse'` refuses (set `'off'` once you have verified the
   * policy yourself).
   */
  evictionPolicyCheck?: 'warn' | 'refuse' | 'off' | undefined;
  /**
   * Receives the eviction-policy warnings and, for an owned client, the start-up connection report: one
   * warning when Redis cannot be reached at start-up (the first connection error, or no connection within
   * `connectTimeoutMs`), and one more when it is reached after that. Default `console.warn`.
   */
  onWarning?: ((message: string) => void) | undefined;
  /**
   * Batching: consumes that arrive while a batch is in flight are sent together as one script call
   * (`EVALSHA` of a script running one `SET … NX PXAT` per key; on a Cluster, one call per hash slot), and
   * each consume still gets its own answer. A lone consume is a plain `SET`. `false` sends one `SET` per
   * consume. Default `true`.
   */
  batch?: boolean | undefined;
  /** Most consumes in one batch (1–4096). Default `256`. */
  maxBatchSize?: number | undefined;
  /** Most consumes waiting for a batch; one more fails closed at once with `ERR_STORE_UNAVAILABLE`. Default `16384`. */
  maxQueued?: number | undefined;
  /**
   * Largest outcome `record` keeps, in UTF-8 bytes (sealed outcomes are ASCII tokens, so characters). A larger
   * one is recorded as `''`, "done, not kept": `record` resolves `false` and identical retries of that round
   * are replays. Every kept outcome lives in Redis memory until the state's expiry. `0` keeps none.
   * @default 65536
   */
  maxOutcomeBytes?: number | undefined;
}

/** Result of the start-up `maxmemory-policy` check. */
export type EvictionCheck =
  | { readonly status: 'safe'; readonly policy: string }
  | { readonly status: 'evicting'; readonly policy: string }
  | { readonly status: 'unknown'; readonly error: unknown };

/** A {@link ReplayStore} on Redis. */
export interface RedisReplayStore extends ReplayStore {
  /**
   * One atomic script on the id's key (the key `consume` uses): takes it with `p:<fingerprint>:<owner>` and the
   * same expiry as `consume` if it is free, else reports how it is held. See {@link ReplayStore.claim}.
   */
  claim(id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult>;
  /**
   * One atomic script on the id's key: replaces `p:<fingerprint>:…` with `d:<fingerprint>:<outcome>`, keeping
   * the key's expiry (`KEEPTTL`). See {@link ReplayStore.record}.
   */
  record(id: string, fingerprint: string, outcome: string): Promise<boolean>;
  /** Largest outcome kept, in bytes (see {@link RedisStoreOptions.maxOutcomeBytes}). */
  readonly maxOutcomeBytes: number;
  /** The connection in use (owned unless it was passed in as `client`). */
  readonly client: Redis | Cluster;
  /** The prefix every key of this store starts with (`prefix + encoded namespace + ":"`). */
  readonly keyPrefix: string;
  /**
   * Runs the `maxmemory-policy` check now (it also runs by itself on every `ready` of an owned client,
   * and before the first consume on an injected one) and resolves its result; never rejects.
   */
  checkEvictionPolicy(): Promise<EvictionCheck>;
  /**
   * Resolves when the store can consume: an owned client has its connection (waiting, at start-up only, up
   * to `connectTimeoutMs` for the first one); an injected client answers a `PING` within `commandTimeoutMs`.
   * Otherwise rejects with `ERR_STORE_UNAVAILABLE` (the connection error as `cause`). Await it at boot to
   * fail fast on a Redis that is down; consumes fail closed either way.
   */
  ready(): Promise<void>;
}

interface SetNxPxat {
  set(key: string, value: string, pxat: 'PXAT', unixTimeMs: number, nx: 'NX'): Promise<'OK' | null>;
  get(key: string): Promise<string | null>;
  mget(...keys: string[]): Promise<(string | null)[]>;
  evalsha(sha: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  config(op: 'GET', name: string): Promise<unknown>;
}

/**
 * One `SET key owner PXAT at NX` per key (ARGV holds owner and at for each key, in order); the reply
 * lists 1 (set: this consume won) or 0 (a live key) per key. A repeated key in one call is 1 at most once.
 * Scripts are not rolled back: when a `SET` fails (OOM, READONLY) the keys before it stay written, so a
 * failed call is resolved key by key from the owners (see resolveLostBatch).
 */
const BATCH_SCRIPT =
  "local r = {} for i = 1, #KEYS do if redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'PXAT', ARGV[2 * i], 'NX') " +
  'then r[i] = 1 else r[i] = 0 end end return r';
const BATCH_SHA = createHash('sha1').update(BATCH_SCRIPT).digest('hex');

/**
 * `claim` on one key. ARGV: the value to write (`p:<fp>:<owner>`), the absolute expiry (ms), the pending
 * prefix `p:<fp>:` and the done prefix `d:<fp>:`. Free key → written, `'first'`; held by this fingerprint with
 * no outcome → `'pending'`; with a non-empty outcome → the whole stored value (`d:<fp>:<outcome>`); anything
 * else (a `consume` owner value, another fingerprint, `d:<fp>:` = done, not kept) → `'replayed'`.
 */
const CLAIM_SCRIPT =
  "local v = redis.call('GET', KEYS[1]) " +
  "if not v then redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2]) return 'first' end " +
  "if string.sub(v, 1, #ARGV[3]) == ARGV[3] then return 'pending' end " +
  'if #v > #ARGV[4] and string.sub(v, 1, #ARGV[4]) == ARGV[4] then return v end ' +
  "return 'replayed'";
const CLAIM_SHA = createHash('sha1').update(CLAIM_SCRIPT).digest('hex');
/**
 * `record` on one key. ARGV: the pending prefix `p:<fp>:` and the value to write (`d:<fp>:<outcome>`). Only a
 * key held by `claim` with this fingerprint and no outcome is replaced, keeping its expiry: 1; else 0.
 */
const RECORD_SCRIPT =
  "local v = redis.call('GET', KEYS[1]) " +
  'if not v or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then return 0 end ' +
  "redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') return 1";
const RECORD_SHA = createHash('sha1').update(RECORD_SCRIPT).digest('hex');
const DEFAULT_MAX_OUTCOME_BYTES = 65_536;
/** Longest fingerprint `claim` and `record` accept (core's is a 43-character SHA-256 in base64url). */
const MAX_FINGERPRINT_LENGTH = 256;
/** Redis's largest string (512 MiB). */
const MAX_MAX_OUTCOME_BYTES = 512 * 1024 * 1024;

const FIRST: ClaimResult = Object.freeze({ status: 'first' });
const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });
/** Batches one store keeps in flight at once. */
const MAX_IN_FLIGHT = 2;

/** One consume waiting for its batch. */
interface Waiter extends BatchEntry<boolean> {
  readonly key: string;
  readonly at: number;
}

/** Policies that never delete a key before its expiry. */
const SAFE_POLICIES = new Set(['noeviction']);

/** Reads `maxmemory-policy`; `unknown` when `CONFIG` is refused or the reply is not understood. */
async function readEvictionPolicy(commands: SetNxPxat, timeoutMs: number): Promise<EvictionCheck> {
  try {
    const reply = await withDeadline(commands.config('GET', 'maxmemory-policy'), timeoutMs, timedOut);
    // RESP2: ['maxmemory-policy', 'noeviction']; a Cluster answers per node the same way.
    const flat = Array.isArray(reply) ? reply.flat(2) : [];
    const index = flat.indexOf('maxmemory-policy');
    const policy = index >= 0 ? flat[index + 1] : undefined;
    if (typeof policy !== 'string') return { status: 'unknown', error: new Error('CONFIG GET maxmemory-policy gave no value') };
    return { status: SAFE_POLICIES.has(policy) ? 'safe' : 'evicting', policy };
  } catch (error) {
    return { status: 'unknown', error };
  }
}

const DEFAULT_URL = 'redis://127.0.0.1:6379';
const timedOut = (): Error => new Error('redis command timed out');

/**
 * A URL as messages show it: scheme, host, port and database only (`redis://user:pw@host:6379/0?password=x#f` →
 * `redis://host:6379/0`): no user, password, query or fragment, where secrets also travel.
 */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname === '/' ? '' : parsed.pathname}`;
  } catch {
    return 'the configured URL';
  }
}
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
 * Replay store on Redis ≥ 6.2. Each `consume` is one atomic `SET key <owner> NX PXAT expiresAtMs` on
 * one key, where `<owner>` is 16 random bytes only this call knows: `"OK"` → `true` (first use), nil →
 * `false`. No multi-key command is used, so it runs unchanged on Redis Cluster. When the reply is lost
 * (timeout, connection dropped in flight) one `GET` asks whether the key holds this call's owner value:
 * yes → `true`, another value → `false`; otherwise, and on any error or unexpected reply, the consume
 * rejects with `StoreUnavailableError` (the original error as `cause`) — never `true` for a write that
 * is not this call's.
 *
 * The owned client fails fast while Redis is down (offline queue disabled, in-flight commands rejected
 * when the connection drops, not resent) and reconnects by itself with capped exponential backoff, so
 * consumes succeed again as soon as Redis is back.
 *
 * An `expiresAtMs` at or before this process's `Date.now()` resolves `false` without a command:
 * Redis would accept `SET … PXAT <past>` and drop the key at once, so every call would look like a
 * first use.
 *
 * Outcome recording (`claim`, `record`): each is one `EVALSHA` (`EVAL` on `NOSCRIPT`) of a Lua script on the
 * id's one key — the key `consume` uses, so an id taken by either is taken for both — and so runs unchanged on
 * a Cluster. `claim` writes `p:<fingerprint>:<owner>` with the expiry `consume` would give; `record` replaces
 * it with `d:<fingerprint>:<outcome>` keeping that expiry (`KEEPTTL`), or with `d:<fingerprint>:` (done, not
 * kept) when the outcome exceeds `maxOutcomeBytes`. A lost reply is resolved with one `GET`, as for `consume`:
 * a claim is `first` only when the key holds this call's own owner value.
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
  const evictionPolicyCheck = options.evictionPolicyCheck ?? 'warn';
  if (evictionPolicyCheck !== 'warn' && evictionPolicyCheck !== 'refuse' && evictionPolicyCheck !== 'off') {
    throw new TypeError('createRedisStore: evictionPolicyCheck must be "warn", "refuse" or "off"');
  }
  const onWarning = options.onWarning ?? ((message: string) => console.warn(message));
  if (typeof onWarning !== 'function') throw new TypeError('createRedisStore: onWarning must be a function');
  const batching = options.batch ?? true;
  if (typeof batching !== 'boolean') throw new TypeError('createRedisStore: batch must be a boolean');
  const maxBatchSize = options.maxBatchSize ?? 256;
  if (!Number.isSafeInteger(maxBatchSize) || maxBatchSize < 1 || maxBatchSize > 4096) {
    throw new RangeError('createRedisStore: maxBatchSize must be an integer from 1 to 4096');
  }
  const maxQueued = options.maxQueued ?? 16_384;
  if (!Number.isSafeInteger(maxQueued) || maxQueued < 1 || maxQueued > 1_000_000) {
    throw new RangeError('createRedisStore: maxQueued must be an integer from 1 to 1000000');
  }
  const maxOutcomeBytes = options.maxOutcomeBytes ?? DEFAULT_MAX_OUTCOME_BYTES;
  if (!Number.isSafeInteger(maxOutcomeBytes) || maxOutcomeBytes < 0 || maxOutcomeBytes > MAX_MAX_OUTCOME_BYTES) {
    throw new RangeError(`createRedisStore: maxOutcomeBytes must be an integer from 0 to ${MAX_MAX_OUTCOME_BYTES} (bytes)`);
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

  const warn = (message: string): void => {
    try {
      onWarning(message);
    } catch {
      // a throwing warning sink must not break the store
    }
  };

  // Owned client: a Redis that is down at start-up is reported at once (through onWarning), not only by the
  // first consume; consumes still fail closed until it is reachable.
  let startupTimer: ReturnType<typeof setTimeout> | undefined;
  if (owned) {
    const redis = client as Redis;
    const where = redact(url ?? DEFAULT_URL);
    let reportedDown = false;
    const reportDown = (cause: unknown): void => {
      clearTimeout(startupTimer);
      if (reportedDown || everReady || closed) return;
      reportedDown = true;
      const reason = cause instanceof Error ? cause.message || cause.name : String(cause);
      warn(`@mrtr/store-redis: cannot reach Redis at ${where} at start-up (${reason}); every consume fails closed with ERR_STORE_UNAVAILABLE until it is reachable.`);
    };
    // Without a listener ioredis prints every connection error; keep the last one as the `cause`.
    redis.on('error', (error: unknown) => {
      lastError = error;
      if (!everReady) reportDown(error);
    });
    redis.on('ready', () => {
      clearTimeout(startupTimer);
      if (reportedDown && !everReady) warn(`@mrtr/store-redis: Redis at ${where} is reachable now.`);
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

  /** Injected client: bound each command ourselves, whatever the client's own settings (owned: ioredis `commandTimeout`). */
  const bounded = <T>(reply: Promise<T>): Promise<T> => (owned ? reply : withDeadline(reply, commandTimeoutMs, timedOut));

  const interpret = (reply: unknown): boolean => {
    if (reply === 'OK') return true;
    if (reply === null) return false;
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to SET NX PXAT') });
  };
  const fail = (cause: unknown): never => {
    if (cause instanceof StoreUnavailableError) throw cause;
    throw new StoreUnavailableError({ cause });
  };

  /**
   * The `SET` may have run although its reply never arrived (timeout, connection lost with the command
   * in flight). Ask once whether the key holds this call's owner value: ours → `true`; another value
   * → `false` (someone else consumed it); no key or no answer → still unknown → `ERR_STORE_UNAVAILABLE`.
   * On one connection Redis answers in order, so the `GET` sees the `SET` if it ran.
   */
  const resolveLost = async (key: string, mine: string, original: unknown): Promise<boolean> => {
    let stored: string | null;
    try {
      stored = await bounded(commands.get(key));
    } catch {
      return fail(original);
    }
    if (stored === mine) return true;
    if (typeof stored === 'string') return false;
    return fail(original);
  };

  /** Errors after which the `SET` cannot have run: Redis answered with an error, or it was never sent. */
  const notWritten = (error: unknown): boolean =>
    error instanceof ReplyError ||
    MrtrError.is(error) ||
    (error instanceof Error && error.message.includes("Stream isn't writeable"));

  const send = (key: string, at: number): Promise<boolean> => {
    const mine = base64urlEncode(randomBytes(16)); // a value only this consume knows
    return bounded(commands.set(key, mine, 'PXAT', at, 'NX')).then(interpret, (error: unknown) =>
      notWritten(error) ? fail(error) : resolveLost(key, mine, error),
    );
  };

  const isCluster = (client as { isCluster?: unknown }).isCluster === true;

  const evalScript = async (script: string, sha: string, args: (string | number)[], count: number): Promise<unknown> => {
    try {
      return await bounded(commands.evalsha(sha, count, ...args));
    } catch (error) {
      // Not cached on this server (first use, a restart, SCRIPT FLUSH): nothing ran; EVAL loads it.
      if (error instanceof ReplyError && String((error as Error).message).startsWith('NOSCRIPT')) {
        return bounded(commands.eval(script, count, ...args));
      }
      throw error;
    }
  };
  const runScript = (args: (string | number)[], count: number): Promise<unknown> => evalScript(BATCH_SCRIPT, BATCH_SHA, args, count);

  /**
   * {@link resolveLost} for a script call whose reply is lost or that failed part-way: one `MGET` (one
   * slot) of the keys; a key holding the waiter's own owner → `true`, another value → `false`, none → unknown.
   */
  const resolveLostBatch = async (group: Waiter[], owners: string[], original: unknown): Promise<void> => {
    const failure = new StoreUnavailableError({ cause: original });
    let stored: (string | null)[];
    try {
      stored = await bounded(commands.mget(...group.map((waiter) => waiter.key)));
    } catch {
      for (const waiter of group) waiter.reject(failure);
      return;
    }
    group.forEach((waiter, i) => {
      const value = stored[i];
      if (value === owners[i]) waiter.resolve(true);
      else if (typeof value === 'string') waiter.resolve(false);
      else waiter.reject(failure);
    });
  };

  /** One script call for a group of consumes whose keys share a hash slot; settles every waiter. */
  let scriptDenied = false;
  const sendGroup = async (group: Waiter[]): Promise<void> => {
    if (group.length === 1 || scriptDenied) {
      await Promise.all(group.map(sendLone));
      return;
    }
    const owners = ownerValues(group.length);
    const args: (string | number)[] = new Array(group.length * 3);
    group.forEach((waiter, i) => {
      args[i] = waiter.key;
      args[group.length + 2 * i] = owners[i] as string;
      args[group.length + 2 * i + 1] = waiter.at;
    });
    let reply: unknown;
    try {
      reply = await runScript(args, group.length);
    } catch (error) {
      // An ACL without EVALSHA/EVAL: the script never ran; send this batch and every later one as single SETs.
      if (error instanceof ReplyError && String((error as Error).message).startsWith('NOPERM')) {
        scriptDenied = true;
        return sendGroup(group);
      }
      // Never sent: nothing written. Anything else (timeout, connection lost, an error part-way through
      // the script, whose earlier SETs stay) is resolved from the owners.
      if (MrtrError.is(error) || (error instanceof Error && error.message.includes("Stream isn't writeable"))) {
        const failure = error instanceof StoreUnavailableError ? error : new StoreUnavailableError({ cause: error });
        for (const waiter of group) waiter.reject(failure);
        return;
      }
      return resolveLostBatch(group, owners, error);
    }
    if (!Array.isArray(reply) || reply.length !== group.length) {
      return resolveLostBatch(group, owners, new Error('unexpected reply to the batch script'));
    }
    group.forEach((waiter, i) => {
      waiter.resolve(reply[i] === 1);
    });
  };

  /** One batch: grouped by hash slot on a Cluster (one script call per slot, in parallel). */
  const runBatch = async (batch: Waiter[]): Promise<void> => {
    if (closed) {
      const failure = new StoreUnavailableError({ cause: new Error('store is closed') });
      for (const waiter of batch) waiter.reject(failure);
      return;
    }
    if (!isCluster || batch.length === 1) return sendGroup(batch);
    const slots = new Map<number, Waiter[]>();
    for (const waiter of batch) {
      const slot = hashSlot(waiter.key);
      const group = slots.get(slot);
      if (group === undefined) slots.set(slot, [waiter]);
      else group.push(waiter);
    }
    await Promise.all([...slots.values()].map(sendGroup));
  };

  /** Settles one waiter from a plain SET; a synchronous throw of the client (a Cluster without nodes) fails it closed too. */
  const sendLone = async (waiter: Waiter): Promise<void> => {
    try {
      waiter.resolve(await send(waiter.key, waiter.at));
    } catch (error) {
      waiter.reject(MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error }));
    }
  };
  /**
   * Queues a consume (see `createBatcher`). One that finds nothing in flight is sent at once, as a plain `SET`
   * (no added latency, no timer). The ones that arrive while something is in flight are sent together at the
   * end of the tick when fewer than two calls are in flight, else as soon as one is answered (at most
   * `maxBatchSize` per call). Two in flight keep the connection busy while the answers of one are handed out,
   * so waves of consumers do not alternate between a lone `SET` and a batch.
   */
  const batcher = createBatcher<Waiter, boolean>({
    maxBatchSize,
    maxQueued,
    maxInFlight: MAX_IN_FLIGHT,
    runLoneAtOnce: true,
    // A lone consume is the plain SET of an unbatched store, with nothing added on its way.
    run: (batch) => (batch.length === 1 && !closed ? sendLone(batch[0] as Waiter) : runBatch(batch)),
    batchError: (error) => new StoreUnavailableError({ cause: error }),
  });
  const enqueue = (key: string, at: number): Promise<boolean> => batcher.add((resolve, reject) => ({ key, at, resolve, reject }));

  // Start-up check of maxmemory-policy: eviction could drop consumed ids before they expire.
  let policy: EvictionCheck | undefined;
  let checking: Promise<EvictionCheck> | undefined;
  let warned: string | undefined;
  const checkEvictionPolicy = (): Promise<EvictionCheck> => {
    checking ??= readEvictionPolicy(commands, commandTimeoutMs).then((result) => {
      checking = undefined;
      policy = result;
      const message =
        result.status === 'evicting'
          ? `@mrtr/store-redis: Redis maxmemory-policy is "${result.policy}": under memory pressure it can delete consumed ids before they expire, and those states could then be used again. Use "noeviction" or a dedicated Redis.`
          : result.status === 'unknown'
            ? `@mrtr/store-redis: could not read Redis maxmemory-policy (${String((result.error as Error)?.message ?? result.error)}); make sure it is "noeviction", then set evictionPolicyCheck: 'off'.`
            : undefined;
      if (message !== undefined && message !== warned && evictionPolicyCheck === 'warn') {
        warned = message;
        warn(message);
      }
      return result;
    });
    return checking;
  };
  if (owned && evictionPolicyCheck !== 'off') {
    (client as Redis).on('ready', () => void checkEvictionPolicy());
  }
  /** `'refuse'`: consumes wait for a check that says `noeviction`; while it does not, every consume fails (and re-checks). */
  const policyGate = (): Promise<void> | undefined => {
    if (evictionPolicyCheck === 'off') return undefined;
    if (evictionPolicyCheck === 'warn') {
      if (!owned && policy === undefined) void checkEvictionPolicy();
      return undefined;
    }
    if (policy?.status === 'safe') return undefined;
    return (checking ?? checkEvictionPolicy()).then((result) => {
      if (result.status === 'safe') return;
      const cause =
        result.status === 'evicting'
          ? new Error(`Redis maxmemory-policy is "${result.policy}" (evicting); refused by evictionPolicyCheck: 'refuse'`)
          : new Error("Redis maxmemory-policy could not be read; refused by evictionPolicyCheck: 'refuse'", { cause: result.error });
      throw new StoreUnavailableError({ cause });
    });
  };

  const write = batching ? enqueue : send;
  const sendChecked = (key: string, at: number): Promise<boolean> => {
    const gate = policyGate();
    if (gate === undefined) return write(key, at);
    return gate.then(() => (closed ? fail(new Error('store is closed')) : write(key, at)), fail);
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
      if (wait === undefined) return sendChecked(key, at);
      return wait.then(() => (closed ? fail(new Error('store is closed')) : sendChecked(key, at)));
    } catch (cause) {
      // ioredis may throw synchronously (e.g. a Cluster with no nodes): still never true.
      return Promise.reject(new StoreUnavailableError({ cause }));
    }
  };

  // Outcome recording. `consume` writes a 22-character owner value (base64url, no ':'); `claim` writes
  // `p:<fp>:<owner>` and `record` turns it into `d:<fp>:<outcome>`: one key per id, so the two share the ledger.

  const checkFingerprint = (fingerprint: unknown, method: string): Error | undefined => {
    if (typeof fingerprint !== 'string' || fingerprint.length === 0 || fingerprint.includes(':')) {
      return new TypeError(`${method}: fingerprint must be a non-empty string without ":"`);
    }
    if (fingerprint.length > MAX_FINGERPRINT_LENGTH) {
      return new RangeError(`${method}: fingerprint must be at most ${MAX_FINGERPRINT_LENGTH} characters`);
    }
    return undefined;
  };

  /** `d:<fp>:<outcome>` with a non-empty outcome → `recorded`; else `undefined`. */
  const recordedIn = (value: string, fp: string): ClaimResult | undefined => {
    const done = `d:${fp}:`;
    if (value.length > done.length && value.startsWith(done)) return { status: 'recorded', outcome: value.slice(done.length) };
    return undefined;
  };

  const interpretClaim = (reply: unknown, fp: string): ClaimResult => {
    if (reply === 'first') return FIRST;
    if (reply === 'pending') return PENDING;
    if (reply === 'replayed') return REPLAYED;
    const recorded = typeof reply === 'string' ? recordedIn(reply, fp) : undefined;
    if (recorded !== undefined) return recorded;
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to the claim script') });
  };

  /**
   * The claim script may have run although its reply never arrived. One `GET` (on one connection Redis answers
   * in order, so it sees the script if it ran): this call's own value → `first`; another value → what the
   * script would have answered on it (someone else took the id first); no key or no answer → unknown →
   * `ERR_STORE_UNAVAILABLE`, never `first`.
   */
  const resolveLostClaim = async (key: string, mine: string, fp: string, original: unknown): Promise<ClaimResult> => {
    let stored: string | null;
    try {
      stored = await bounded(commands.get(key));
    } catch {
      return fail(original);
    }
    if (stored === mine) return FIRST;
    if (typeof stored !== 'string') return fail(original);
    if (stored.startsWith(`p:${fp}:`)) return PENDING;
    return recordedIn(stored, fp) ?? REPLAYED;
  };

  const sendClaim = (key: string, at: number, fp: string): Promise<ClaimResult> => {
    const mine = `p:${fp}:${base64urlEncode(randomBytes(16))}`; // a value only this claim knows
    return evalScript(CLAIM_SCRIPT, CLAIM_SHA, [key, mine, at, `p:${fp}:`, `d:${fp}:`], 1).then(
      (reply) => interpretClaim(reply, fp),
      (error: unknown) => (notWritten(error) ? fail(error) : resolveLostClaim(key, mine, fp, error)),
    );
  };

  /** A lost reply to `record`: one `GET`; the key holds exactly the value this call wrote → it was stored. */
  const resolveLostRecord = async (key: string, value: string, kept: boolean, original: unknown): Promise<boolean> => {
    let stored: string | null;
    try {
      stored = await bounded(commands.get(key));
    } catch {
      return fail(original);
    }
    return stored === value && kept;
  };

  const sendRecord = (key: string, fp: string, value: string, kept: boolean): Promise<boolean> =>
    evalScript(RECORD_SCRIPT, RECORD_SHA, [key, `p:${fp}:`, value], 1).then(
      (reply) => {
        if (reply === 1) return kept;
        if (reply === 0) return false;
        throw new StoreUnavailableError({ cause: new Error('unexpected reply to the record script') });
      },
      (error: unknown) => (notWritten(error) ? fail(error) : resolveLostRecord(key, value, kept, error)),
    );

  /**
   * Runs `op` once the store may talk to Redis: an owned client's start-up wait and, when `gated`, the eviction
   * gate. With nothing to wait for, `op` runs (and its command is sent) synchronously, as a lone consume's is.
   */
  const whenOpen = <T>(op: () => Promise<T>, gated: boolean): Promise<T> => {
    const go = (): Promise<T> => {
      if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
      const gate = gated ? policyGate() : undefined;
      if (gate === undefined) return op().catch(fail);
      return gate.then(() => (closed ? fail(new Error('store is closed')) : op()), fail).catch(fail);
    };
    try {
      const wait = owned ? whenUsable() : undefined;
      return wait === undefined ? go() : wait.then(go, fail);
    } catch (cause) {
      // ioredis may throw synchronously (e.g. a Cluster with no nodes): never first.
      return Promise.reject(new StoreUnavailableError({ cause }));
    }
  };

  /** UTF-8 bytes ≤ 3 × UTF-16 code units: the exact count only when that bound does not settle it. */
  const outcomeFits = (outcome: string): boolean =>
    outcome.length <= maxOutcomeBytes && (outcome.length * 3 <= maxOutcomeBytes || Buffer.byteLength(outcome, 'utf8') <= maxOutcomeBytes);

  const claim = (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    if (typeof id !== 'string' || id.length === 0) return Promise.reject(new TypeError('claim: id must be a non-empty string'));
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return Promise.reject(new TypeError('claim: expiresAtMs must be a finite number'));
    }
    const misuse = checkFingerprint(fingerprint, 'claim');
    if (misuse !== undefined) return Promise.reject(misuse);
    // As for consume: an id that could not be remembered is never a first use.
    if (expiresAtMs <= Date.now()) return Promise.resolve(REPLAYED);
    const key = keyPrefix + id;
    const at = Math.ceil(expiresAtMs) + extraRetentionMs;
    return whenOpen(() => sendClaim(key, at, fingerprint), true);
  };

  const record = (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    if (typeof id !== 'string' || id.length === 0) return Promise.reject(new TypeError('record: id must be a non-empty string'));
    const misuse = checkFingerprint(fingerprint, 'record');
    if (misuse !== undefined) return Promise.reject(misuse);
    if (typeof outcome !== 'string') return Promise.reject(new TypeError('record: outcome must be a string'));
    // Too large: recorded as '' (done, not kept), so identical retries are replays and memory stays bounded.
    const kept = outcome !== '' && outcomeFits(outcome);
    const value = `d:${fingerprint}:${kept ? outcome : ''}`;
    return whenOpen(() => sendRecord(keyPrefix + id, fingerprint, value, kept), false);
  };

  const close = (): Promise<void> => {
    closed = true;
    clearTimeout(startupTimer);
    if (closing !== undefined) return closing;
    // Consumes still queued fail closed; a batch in flight settles by itself.
    const failure = new StoreUnavailableError({ cause: new Error('store is closed') });
    batcher.failAll(() => failure);
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

  /** Public: an owned client first waits (bounded, as a consume does) for its connection. */
  const checkNow = async (): Promise<EvictionCheck> => {
    if (closed) return { status: 'unknown', error: new Error('store is closed') };
    if (owned) {
      try {
        await whenUsable();
      } catch (error) {
        return { status: 'unknown', error };
      }
    }
    return checkEvictionPolicy();
  };

  const ready = async (): Promise<void> => {
    if (closed) throw new StoreUnavailableError({ cause: new Error('store is closed') });
    if (owned) {
      await whenUsable();
      return;
    }
    try {
      await bounded((client as unknown as { ping(): Promise<unknown> }).ping());
    } catch (cause) {
      fail(cause);
    }
  };

  return { consume, claim, record, maxOutcomeBytes, close, client, keyPrefix, checkEvictionPolicy: checkNow, ready };
}

export { createRedisTaskStore, type RedisTaskStore, type RedisTaskStoreOptions } from './tasks.js';

import type { ClaimResult, ReplayStore } from '@mrtr/core';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { RedisCommands } from './connection.js';
import type { EvictionCheck } from './eviction.js';

/** Options of {@link createRedisStore}. Give `url` or `client`, not both. */
export interface RedisStoreOptions {
  /**
   * Connection URL (`redis://`, `rediss://`, with user, password and db) for a client the store creates
   * and owns. Default `redis://127.0.0.1:6379` when no `client` is given.
   * @default `'redis://127.0.0.1:6379'` (when no `client` is given)
   */
  url?: string | undefined;
  /**
   * An existing ioredis `Redis` or `Cluster` instance. The store only sends `SET … NX PXAT`, `GET`, for
   * batches `EVALSHA`/`EVAL` of its batch script and `MGET`, and for `claim`/`record` `EVALSHA`/`EVAL` of
   * their one-key scripts, on it and never quits it: its owner closes it. Its own options (offline queue,
   * retries) stay in force; the store bounds every command with `commandTimeoutMs` itself.
   * @default none (the store creates its own client from `url`)
   */
  client?: Redis | Cluster | undefined;
  /**
   * Raw key prefix. Default `"mrtr:replay:"`.
   * @default 'mrtr:replay:'
   */
  prefix?: string | undefined;
  /**
   * Ledger name inside the prefix: the key is `prefix + namespace + ":" + id`, with `%` and `:` in the
   * namespace percent-encoded so two namespaces can never produce the same key. Default `"default"`.
   * @default 'default'
   */
  namespace?: string | undefined;
  /**
   * Extra time each record is kept after `expiresAtMs`. Redis expires keys by its own clock: if that
   * clock may run ahead of this host's, set this to the bound so a record cannot vanish while a token
   * is still valid here. Default `0`.
   * @default 0
   */
  extraRetentionMs?: number | undefined;
  /**
   * Longest wait for one `SET` reply. When it passes (or the connection drops with the `SET` in flight)
   * the store asks once, with a `GET` bounded by the same time, whether the key holds this call's owner
   * value; only if that is still unknown does the consume reject `ERR_STORE_UNAVAILABLE`. Default `1000`.
   * @default 1000
   */
  commandTimeoutMs?: number | undefined;
  /**
   * Owned client: longest wait for a TCP/TLS connection, and for the first `ready` at start-up. Default `2000`.
   * @default 2000
   */
  connectTimeoutMs?: number | undefined;
  /**
   * Owned client: cap of the exponential reconnect backoff (50 ms, 100 ms, … up to this). Default `2000`.
   * @default 2000
   */
  maxReconnectDelayMs?: number | undefined;
  /**
   * Owned client: further ioredis options (TLS, credentials, `db`, `connectionName`, …). The options that
   * make an outage fail fast (`enableOfflineQueue`, `maxRetriesPerRequest`, `autoResendUnfulfilledCommands`,
   * timeouts, `retryStrategy`) are set by the store and override these.
   * @default {}
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
   * @default 'warn'
   */
  evictionPolicyCheck?: 'warn' | 'refuse' | 'off' | undefined;
  /**
   * Receives the eviction-policy warnings and, for an owned client, the start-up connection report: one
   * warning when Redis cannot be reached at start-up (the first connection error, or no connection within
   * `connectTimeoutMs`), and one more when it is reached after that. Default `console.warn`.
   * @default console.warn
   */
  onWarning?: ((message: string) => void) | undefined;
  /**
   * Batching: consumes that arrive while a batch is in flight are sent together as one script call
   * (`EVALSHA` of a script running one `SET … NX PXAT` per key; on a Cluster, one call per hash slot), and
   * each consume still gets its own answer. A lone consume is a plain `SET`. `false` sends one `SET` per
   * consume. Default `true`.
   * @default true
   */
  batch?: boolean | undefined;
  /**
   * Most consumes in one batch (1–4096). Default `256`.
   * @default 256
   */
  maxBatchSize?: number | undefined;
  /**
   * Most consumes waiting for a batch; one more fails closed at once with `ERR_STORE_UNAVAILABLE`. Default `16384`.
   * @default 16384
   */
  maxQueued?: number | undefined;
  /**
   * Largest outcome `record` keeps, in UTF-8 bytes (sealed outcomes are ASCII tokens, so characters). A larger
   * one is recorded as `''`, "done, not kept": `record` resolves `false` and identical retries of that round
   * are replays. Every kept outcome lives in Redis memory until the state's expiry. `0` keeps none.
   * @default 65536
   */
  maxOutcomeBytes?: number | undefined;
}

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

export const DEFAULT_PREFIX = 'mrtr:replay:';
export const DEFAULT_NAMESPACE = 'default';
const DEFAULT_MAX_OUTCOME_BYTES = 65_536;
/** Redis's largest string (512 MiB). */
const MAX_MAX_OUTCOME_BYTES = 512 * 1024 * 1024;

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`createRedisStore: ${name} must be a positive integer (milliseconds)`);
  }
  return value;
}

/** {@link RedisStoreOptions} checked, with every default filled in. */
export interface ParsedRedisStoreOptions {
  readonly url: string | undefined;
  readonly injected: Redis | Cluster | undefined;
  readonly keyPrefix: string;
  readonly commandTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly maxReconnectDelayMs: number;
  readonly extraRetentionMs: number;
  readonly evictionPolicyCheck: 'warn' | 'refuse' | 'off';
  readonly onWarning: (message: string) => void;
  readonly batching: boolean;
  readonly maxBatchSize: number;
  readonly maxQueued: number;
  readonly maxOutcomeBytes: number;
  readonly redisOptions: RedisOptions;
}

/** Checks the options of {@link createRedisStore} (a misuse throws `TypeError`/`RangeError`) and fills in the defaults. */
export function parseRedisStoreOptions(options: RedisStoreOptions): ParsedRedisStoreOptions {
  if (options === null || typeof options !== 'object') {
    throw new TypeError('createRedisStore: options must be an object');
  }
  const { url, client: injected } = options;
  if (url !== undefined && injected !== undefined) {
    throw new TypeError('createRedisStore: give either url or client, not both');
  }
  if (url !== undefined && typeof url !== 'string') throw new TypeError('createRedisStore: url must be a string');
  if (injected !== undefined && (injected === null || typeof (injected as Partial<RedisCommands>).set !== 'function')) {
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
  return {
    url,
    injected,
    keyPrefix,
    commandTimeoutMs,
    connectTimeoutMs,
    maxReconnectDelayMs,
    extraRetentionMs,
    evictionPolicyCheck,
    onWarning,
    batching,
    maxBatchSize,
    maxQueued,
    maxOutcomeBytes,
    redisOptions,
  };
}

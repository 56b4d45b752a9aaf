import { boolOption, fnOption, intOption, isObject, oneOfOption, optionsObject, stringOption } from '@mrtr/core/options';
import {
  type BackgroundError,
  type ClaimOptions,
  type ClaimResult,
  type KeyFingerprint,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  parseOutcomeStoreLimits,
  type RecordingReplayStore,
  type SpendOptions,
} from '@mrtr/core/store';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type { RedisCommands } from './connection.js';
import type { EvictionCheck, EvictionPolicyMode, PersistenceCheck } from './eviction.js';

/** Options of {@link createRedisStore}. Give `url` or `client`, not both. */
export interface RedisStoreOptions extends OutcomeStoreLimits {
  /**
   * Connection URL (`redis://`, `rediss://`, with user, password and db) for a client the store creates
   * and owns. Default `redis://127.0.0.1:6379` when no `client` is given.
   * @default `'redis://127.0.0.1:6379'` (when no `client` is given)
   */
  url?: string | undefined;
  /**
   * An existing ioredis `Redis` or `Cluster` instance. The store only sends `SET … NX PXAT`, `GET`, for
   * batches `EVALSHA`/`EVAL` of its batch script and `MGET`, and for `claim`/`record` `EVALSHA`/`EVAL` of
   * their script and `MGET`, on it and never quits it: its owner closes it. Its own options (offline queue,
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
   * namespace percent-encoded so two namespaces can never produce the same key. The default ledger (`''`, the
   * default of every `@mrtr/store-*` store) is keyed as `default`, this option's former default: so `''` and `'default'` name the same ledger and existing keys stay in use.
   * @default ''
   */
  namespace?: string | undefined;
  /**
   * Extra time each record is kept after `expiresAtMs`, in ms (a safe integer, at least 0). Redis expires keys by
   * its own clock: if that clock may run ahead of this host's, set this to the bound so a record cannot vanish
   * while a token is still valid here. Default `0`.
   * @default 0
   */
  extraRetentionMs?: number | undefined;
  /**
   * Longest wait for one `SET` reply. When it passes (or the connection drops with the `SET` in flight)
   * the store asks once, with a `GET` bounded by the same time, whether the key holds this call's owner
   * value; only if that is still unknown does the consume reject `ERR_STORE_UNAVAILABLE`. In ms, 1–2147483647.
   * Default `1000`.
   * @default 1000
   */
  commandTimeoutMs?: number | undefined;
  /**
   * Owned client: longest wait for a TCP/TLS connection, and for the first `ready` at start-up. In ms,
   * 1–2147483647. Default `2000`.
   * @default 2000
   */
  connectTimeoutMs?: number | undefined;
  /**
   * Owned client: cap of the exponential reconnect backoff (50 ms, 100 ms, … up to this). In ms, 1–2147483647.
   * Default `2000`.
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
   * What to do when Redis reports a `maxmemory-policy` that may evict keys (`allkeys-*` or `volatile-*`: every
   * key of this store has an expiry, so `volatile-*` policies target exactly them), or when the policy cannot be read.
   * An evicted id can be used again: a flood of other keys (outcomes of another user included) can evict a spent
   * state, and its confirmed action then runs twice. The policy is read with `CONFIG GET`, or, where that is refused
   * (managed Redis, ACLs), from `INFO memory`. Checked at start-up and on every reconnect (an injected client: before
   * its first write).
   * - Not set (the default): an evicting policy, or one that cannot be read by either command, is refused — every
   *   consume and claim rejects `ERR_STORE_UNAVAILABLE` until a later check sees `noeviction` — and reported through
   *   `onError` (`STORE_EVICTION_POLICY`, `STORE_EVICTION_POLICY_UNKNOWN`).
   * - `'accept-unknown'`: refuses an evicting policy, but accepts one it cannot read (reported): for a server whose
   *   policy you have checked yourself and that hides both `CONFIG` and `INFO`.
   * - `'warn'`: reports either and goes on.
   * - `'refuse'`: refuses both an evicting and an unknown policy, without a report.
   * - `'off'`: no check (once you have verified the policy yourself).
   * @default refuse an evicting policy and one that cannot be read (reported)
   */
  evictionPolicyCheck?: 'accept-unknown' | 'warn' | 'refuse' | 'off' | undefined;
  /**
   * Receives the problems the store survives in the background, as a `BackgroundError` (`@mrtr/core/store`:
   * an `Error` with a stable `code`, the underlying error as `cause`) — the hook every `@mrtr/store-*` store takes
   * under this name and shape: `STORE_EVICTION_POLICY` (Redis may evict keys, see `evictionPolicyCheck`),
   * `STORE_EVICTION_POLICY_UNKNOWN` (the policy could not be read), and for an owned client the start-up
   * connection report: `STORE_UNREACHABLE` once when Redis cannot be reached at start-up (the first connection
   * error, or no connection within `connectTimeoutMs`), and `STORE_REACHABLE` once when it is reached after that.
   * Default: `console.warn` of the message.
   * @default (error) => console.warn(error.message)
   */
  onError?: ((error: BackgroundError) => void) | undefined;
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
   * Most consumes waiting for a batch (1–1000000); one more fails closed at once with `ERR_STORE_UNAVAILABLE`.
   * Default `16384`.
   * @default 16384
   */
  maxQueued?: number | undefined;
  /**
   * Largest outcome `record` keeps, in UTF-8 bytes (sealed outcomes are ASCII tokens, so characters). A larger
   * one is recorded as `''`, "done, not kept": `record` resolves `false` and identical retries of that round
   * are replays. `0` keeps none; at most 536870912 (Redis's largest string).
   * @default 16384
   */
  maxOutcomeBytes?: number | undefined;
  /**
   * Most bytes of outcomes this ledger (prefix and namespace) holds in Redis at once, every instance together:
   * checked and taken in the script that writes an outcome; past it an outcome is recorded as `''` (done, not
   * kept). An outcome is counted until the end of the minute (Redis's clock) in which its id expires. On a Cluster
   * the whole budget is one pair of keys that records lease their bytes from (see the README). `0` keeps none.
   * @default 67108864 (64 MiB)
   */
  outcomeBudgetBytes?: number | undefined;
}

/** A {@link ReplayStore} on Redis. */
export interface RedisReplayStore extends RecordingReplayStore {
  /**
   * One call of the consume script on the id's key, batched with other consumes: Redis's clock decides (an
   * `expiresAtMs` at or before its `TIME` rejects `ERR_STATE_EXPIRED`, a `mintedAtMs` before the ledger epoch
   * `ERR_LEDGER_LOST`). See {@link ReplayStore.consume}.
   */
  consume(id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean>;
  /**
   * Atomic on the id's key (the key `consume` uses), batched with other claims and records: takes it if it is free
   * (with `owner` and `leaseMs`: a lease on Redis's clock), else reports how it is held (a claim with another
   * fingerprint counts a miss; the third drops the outcome). See {@link ReplayStore.claim}.
   */
  claim(id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult>;
  /**
   * Atomic on the id's key, batched: records the outcome of the claim with this fingerprint (with `owner`: only the
   * claim's owner, and a second record by it answers as the first), keeping the key's expiry (`KEEPTTL`), the outcome's
   * bytes taken from the ledger's budget in the same step (`''` past `maxOutcomeBytes` or the budget). See
   * {@link ReplayStore.record}.
   */
  record(id: string, fingerprint: string, outcome: string, options?: { readonly owner?: string | undefined }): Promise<boolean>;
  /** One script on the id's key: extends `owner`'s lease to `leaseMs` from Redis's `TIME`. See {@link ReplayStore.renew}. */
  renew(id: string, owner: string, leaseMs: number): Promise<boolean>;
  /** One script on the id's key: deletes `owner`'s unrecorded claim (compare-and-delete). See {@link ReplayStore.release}. */
  release(id: string, owner: string): Promise<boolean>;
  /** Redis's `TIME`, epoch ms. */
  time(): Promise<number>;
  /**
   * The ledger's epoch (epoch ms, Redis's clock), written where missing (see `ReplayStore.ledgerEpoch`). One
   * Redis: one script on `<prefix><namespace>%e`. A Cluster: the master key `<prefix><namespace>%e`, kept at the latest
   * of the slots' copies (written with them when it is missing; raised when a spend finds a slot begun again).
   */
  ledgerEpoch(): Promise<number>;
  /**
   * The fleet check's exchange (see {@link ReplayStore.keyFingerprints}): one script on one hash of the ledger
   * (`<prefix><namespace>%k{<prefix><namespace>}`), expiry judged by Redis's clock; a new kid past 256 live records
   * rejects with `ERR_STORE_UNAVAILABLE`.
   */
  keyFingerprints(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  /** Largest outcome kept, in bytes (see {@link RedisStoreOptions.maxOutcomeBytes}). */
  readonly maxOutcomeBytes: number;
  /** Most outcome bytes held at once (see {@link RedisStoreOptions.outcomeBudgetBytes}). */
  readonly outcomeBudgetBytes: number;
  /** The connection in use (owned unless it was passed in as `client`). */
  readonly client: Redis | Cluster;
  /** The prefix every key of this store starts with (`prefix + encoded namespace + ":"`). */
  readonly keyPrefix: string;
  /** The `namespace` option (named in the fleet check's `ERR_KEY_MISMATCH`). */
  readonly namespace: string;
  /**
   * Runs the `maxmemory-policy` check now (it also runs by itself on every `ready` of an owned client,
   * and before the first consume on an injected one) and resolves its result; never rejects.
   */
  checkEvictionPolicy(): Promise<EvictionCheck>;
  /**
   * Reads the server's persistence now (`INFO persistence`, and `CONFIG GET save` when allowed: RDB and AOF on or off;
   * reported at start-up through `onError` when off or unknown) and resolves it; never rejects. For `mrtr doctor`.
   */
  checkPersistence(): Promise<PersistenceCheck>;
  /**
   * Resolves when the store can consume: an owned client has its connection (waiting, at start-up only, up
   * to `connectTimeoutMs` for the first one); an injected client answers a `PING` within `commandTimeoutMs`.
   * Otherwise rejects with `ERR_STORE_UNAVAILABLE` (the connection error as `cause`). Await it at boot to
   * fail fast on a Redis that is down; consumes fail closed either way.
   */
  ready(): Promise<void>;
}

export const DEFAULT_PREFIX = 'mrtr:replay:';
/** The default ledger (the default of every `@mrtr/store-*` store). */
export const DEFAULT_NAMESPACE = '';
/** How the default ledger is keyed: `'default'`, this option's former default, so existing keys stay in use. */
const DEFAULT_NAMESPACE_KEY = 'default';
/** The longest delay a timer takes (Node fires a longer one at once). */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * The key prefix of a ledger: `prefix + namespace + ":"`, `%` and `:` in the namespace percent-encoded (so two
 * namespaces never share a key), the default ledger `''` keyed as `default`.
 */
export function ledgerKeyPrefix(prefix: string, namespace: string): string {
  const name = namespace === DEFAULT_NAMESPACE ? DEFAULT_NAMESPACE_KEY : namespace;
  return `${prefix}${name.replaceAll('%', '%25').replaceAll(':', '%3A')}:`;
}

/** The `onError` hook of a Redis store; not given: `console.warn` of the message. */
export function onErrorOption(label: string, options: { onError?: unknown }): (error: BackgroundError) => void {
  return fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, warnMessage);
}

const warnMessage = (error: BackgroundError): void => console.warn(error.message);

/** The `redisOptions` option: `{}` when absent, else a plain object. */
export function redisOptionsOption(label: string, value: unknown): RedisOptions {
  if (value === undefined) return {};
  if (!isObject(value)) throw new TypeError(`${label}: redisOptions must be an object`);
  return value as RedisOptions;
}

/** {@link RedisStoreOptions} checked, with every default filled in. */
export interface ParsedRedisStoreOptions {
  readonly url: string | undefined;
  readonly injected: Redis | Cluster | undefined;
  readonly keyPrefix: string;
  readonly namespace: string;
  readonly commandTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly maxReconnectDelayMs: number;
  readonly extraRetentionMs: number;
  /** `'default'`: refuses (and reports) a policy read as evicting, or that cannot be read. */
  readonly evictionPolicyCheck: EvictionPolicyMode;
  readonly onError: (error: BackgroundError) => void;
  readonly batching: boolean;
  readonly maxBatchSize: number;
  readonly maxQueued: number;
  readonly maxOutcomeBytes: number;
  readonly outcomeBudgetBytes: number;
  readonly redisOptions: RedisOptions;
}

/** Checks the options of {@link createRedisStore} (a misuse throws `TypeError`/`RangeError`) and fills in the defaults. */
export function parseRedisStoreOptions(options: RedisStoreOptions): ParsedRedisStoreOptions {
  const label = 'createRedisStore';
  options = optionsObject(label, options, {
    ...OUTCOME_STORE_LIMIT_OPTIONS,
    url: true,
    client: true,
    prefix: true,
    namespace: true,
    extraRetentionMs: true,
    commandTimeoutMs: true,
    connectTimeoutMs: true,
    maxReconnectDelayMs: true,
    redisOptions: true,
    evictionPolicyCheck: true,
    onError: true,
    batch: true,
    maxBatchSize: true,
    maxQueued: true,
  });
  const { url, client: injected } = options;
  if (url !== undefined && injected !== undefined) {
    throw new TypeError('createRedisStore: give either url or client, not both');
  }
  stringOption(`${label}: url`, url, '');
  if (injected !== undefined && (injected === null || typeof (injected as Partial<RedisCommands>).set !== 'function')) {
    throw new TypeError('createRedisStore: client must be an ioredis Redis or Cluster instance');
  }
  const prefix = stringOption(`${label}: prefix`, options.prefix, DEFAULT_PREFIX);
  const namespace = stringOption(`${label}: namespace`, options.namespace, DEFAULT_NAMESPACE);
  const commandTimeoutMs = intOption(`${label}: commandTimeoutMs`, options.commandTimeoutMs, 1000, 1, MAX_TIMER_MS);
  const connectTimeoutMs = intOption(`${label}: connectTimeoutMs`, options.connectTimeoutMs, 2000, 1, MAX_TIMER_MS);
  const maxReconnectDelayMs = intOption(`${label}: maxReconnectDelayMs`, options.maxReconnectDelayMs, 2000, 1, MAX_TIMER_MS);
  const extraRetentionMs = intOption(`${label}: extraRetentionMs`, options.extraRetentionMs, 0, 0, Number.MAX_SAFE_INTEGER);
  const evictionPolicyCheck =
    options.evictionPolicyCheck === undefined
      ? 'default'
      : oneOfOption(`${label}: evictionPolicyCheck`, options.evictionPolicyCheck, 'warn', [
          'accept-unknown',
          'warn',
          'refuse',
          'off',
        ] as const);
  const onError = onErrorOption(label, options);
  const batching = boolOption(`${label}: batch`, options.batch, true);
  const maxBatchSize = intOption(`${label}: maxBatchSize`, options.maxBatchSize, 256, 1, 4096);
  const maxQueued = intOption(`${label}: maxQueued`, options.maxQueued, 16_384, 1, 1_000_000);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(label, options);
  const redisOptions = redisOptionsOption(label, options.redisOptions);

  const keyPrefix = ledgerKeyPrefix(prefix, namespace);
  return {
    url,
    injected,
    keyPrefix,
    namespace,
    commandTimeoutMs,
    connectTimeoutMs,
    maxReconnectDelayMs,
    extraRetentionMs,
    evictionPolicyCheck,
    onError,
    batching,
    maxBatchSize,
    maxQueued,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    redisOptions,
  };
}

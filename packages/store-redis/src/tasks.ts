/**
 * A `TaskStore` (`@mrtr/core`) on Redis: the tasks of `@mrtr/mcp-server` shared by every instance on one Redis
 * (or Redis Cluster).
 *
 * Keys (`<kp>` = `prefix + namespace + ":"`, `H(x)` = SHA-256 of `x` in base64url, 43 characters):
 * - `<kp>t:{H(taskId)}` — the task: a string `<version><json>`, where `<version>` is 22 random base64url
 *   characters written with every change (so a compare-and-set can never be fooled by an older value coming
 *   back), expiring (`PXAT`) at `lastUpdatedAt + ttlMs`.
 * - `<kp>p:{H(principal)}:k` and `…:l` — the principal's kept tasks and unfinished ("live") tasks: sorted sets of
 *   `H(taskId)` scored by expiry. Both carry the same hash tag, so one script touches one slot on a Cluster.
 *
 * Ids and principals are attacker-influenced: only their hashes reach key names (bounded length, no `{}`).
 *
 * A task's key and its principal's sets are on different slots, so a create and an update are two steps each,
 * ordered so that a process dying between them can only make a principal's count too high (its own tasks are
 * refused a little earlier, until the stale entry's expiry), never too low (the bounds always hold):
 * - create: the principal script first (drop expired entries, check both bounds, add the entry), then
 *   `SET … NX PXAT` of the task. An id already present: its entry is taken back, the first record stays.
 * - update: read the task with its version, run `change`, raise the entry's scores (`ZADD XX GT`) to the new
 *   expiry first, then a compare-and-set script on the version; on a conflict read again and run `change` again
 *   (at most `maxUpdateAttempts` times). A task that became final leaves the live set after its write.
 * Each set entry is thus always scored at or after its task's expiry.
 */
import { createHash } from 'node:crypto';
import { MrtrError, type TaskRecord, type TaskStore, type TaskStoreLimits } from '@mrtr/core';
import {
  asTaskRecord,
  assertTaskChange,
  type BackgroundError,
  base64urlEncode,
  intOption,
  isTerminalStatus,
  optionsObject,
  parseTaskStoreLimits,
  randomBytes,
  stringOption,
  StoreUnavailableError,
  TaskLimitError,
  taskExpiresAt,
} from '@mrtr/core/authoring';
import { type Cluster, type Redis, type RedisOptions, ReplyError } from 'ioredis';
import { openConnection } from './connection.js';
import { DEFAULT_NAMESPACE, ledgerKeyPrefix, MAX_TIMER_MS, onErrorOption, redisOptionsOption } from './options.js';

const LABEL = 'createRedisTaskStore';

/** Options of {@link createRedisTaskStore}: the per-principal bounds (16 unfinished, 256 kept) and these. Give `url` or `client`, not both. */
export interface RedisTaskStoreOptions extends TaskStoreLimits {
  /**
   * Connection URL (`redis://`, `rediss://`, with user, password and db) for a client the store creates and
   * owns. Default `redis://127.0.0.1:6379` when no `client` is given.
   * @default `'redis://127.0.0.1:6379'` (when no `client` is given)
   */
  url?: string | undefined;
  /**
   * An existing ioredis `Redis` or `Cluster` instance. The store sends `GET`, `SET … NX PXAT`, `ZADD`, `ZREM`
   * and `EVALSHA`/`EVAL` of its scripts on it and never quits it: its owner closes it. The store bounds every
   * command with `commandTimeoutMs` itself.
   * @default none (the store creates its own client from `url`)
   */
  client?: Redis | Cluster | undefined;
  /**
   * Raw key prefix. Default `"mrtr:task:"`.
   * @default 'mrtr:task:'
   */
  prefix?: string | undefined;
  /**
   * Store name inside the prefix (`prefix + namespace + ":"`, with `%` and `:` percent-encoded so two
   * namespaces never share a key). Stores with the same prefix and namespace share their tasks. The default
   * (`''`, the default of every `@mrtr/store-*` store) is keyed as `default`, as before issue 22 when `'default'`
   * was this option's default: so `''` and `'default'` name the same store and existing keys stay in use.
   * @default ''
   */
  namespace?: string | undefined;
  /**
   * Longest wait for one Redis reply; then the operation rejects `ERR_STORE_UNAVAILABLE`. In ms, 1–2147483647.
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
   * Owned client: cap of the exponential reconnect backoff. In ms, 1–2147483647. Default `2000`.
   * @default 2000
   */
  maxReconnectDelayMs?: number | undefined;
  /**
   * Owned client: further ioredis options; the fail-fast options (offline queue, retries, timeouts) are the store's.
   * @default {}
   */
  redisOptions?: RedisOptions | undefined;
  /**
   * Receives the problems the store survives in the background, as a `BackgroundError` (`@mrtr/core/authoring`:
   * an `Error` with a stable `code`, the underlying error as `cause`) — the hook every `@mrtr/store-*` store takes
   * under this name and shape: the owned client's start-up connection report, `STORE_UNREACHABLE` once when
   * Redis cannot be reached at start-up and `STORE_REACHABLE` once when it is reached after that.
   * Default: `console.warn` of the message.
   * @default (error) => console.warn(error.message)
   */
  onError?: ((error: BackgroundError) => void) | undefined;
  /**
   * Former name of `onError`, receiving the message alone (kept for one release; giving both with different
   * values is a `TypeError`).
   * @deprecated use `onError` (`error.message` is the string this hook receives)
   * @default (message) => console.warn(message)
   */
  onWarning?: ((message: string) => void) | undefined;
  /**
   * Most reads-and-writes one `update` tries when other instances change the task at the same moment (1–1000);
   * then it rejects `ERR_STORE_UNAVAILABLE`, the record as the others left it. Default `32`.
   * @default 32
   */
  maxUpdateAttempts?: number | undefined;
}

/** A {@link TaskStore} on Redis. */
export interface RedisTaskStore extends TaskStore {
  /** The connection in use (owned unless it was passed in as `client`). */
  readonly client: Redis | Cluster;
  /** The prefix every key of this store starts with (`prefix + encoded namespace + ":"`). */
  readonly keyPrefix: string;
  /**
   * Resolves when the store can reach Redis (owned client: its first connection, waiting up to
   * `connectTimeoutMs`; injected: a `PING` within `commandTimeoutMs`), else rejects `ERR_STORE_UNAVAILABLE`.
   */
  ready(): Promise<void>;
  /** Closes the connection when the store created it (an injected client stays open). Later calls reject. */
  close(): Promise<void>;
}

interface Commands {
  get(key: string): Promise<string | null>;
  set(key: string, value: string, pxat: 'PXAT', unixTimeMs: number, nx: 'NX'): Promise<'OK' | null>;
  zrem(key: string, member: string): Promise<number>;
  evalsha(sha: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  ping(): Promise<unknown>;
}

/** Length of the version that starts every stored task (16 random bytes in base64url). */
const VERSION_LENGTH = 22;

/**
 * Create, on the principal's slot. KEYS: kept set, live set. ARGV: member, expiry (ms), `1` when the task is
 * unfinished, maxLive, maxKept. Drops entries past Redis's clock, refuses a member already kept
 * (`duplicate`), then the live bound (`live`), then the kept bound (`kept`); else adds the member and keeps each
 * set until its latest entry's expiry (`ok`). Its work is bounded by the sets' size, itself bounded by maxKept.
 */
const RESERVE_SCRIPT =
  "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) " +
  "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now) redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now) " +
  "if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 'duplicate' end " +
  "if ARGV[3] == '1' and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 'live' end " +
  "if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) then return 'kept' end " +
  "redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) if ARGV[3] == '1' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) end " +
  "for i = 1, 2 do local top = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES') " +
  "if top[2] then redis.call('PEXPIREAT', KEYS[i], top[2]) end end return 'ok'";
/**
 * Before an update's write, on the principal's slot. KEYS: kept set, live set. ARGV: member, new expiry. Raises
 * the member's score where it is present (`XX GT`: never adds, never lowers) and keeps each set as long as its
 * latest entry.
 */
const BUMP_SCRIPT =
  "for i = 1, 2 do redis.call('ZADD', KEYS[i], 'XX', 'GT', ARGV[2], ARGV[1]) " +
  "local top = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES') " +
  "if top[2] then redis.call('PEXPIREAT', KEYS[i], top[2]) end end return 1";
/**
 * Compare-and-set of a task, on its slot. KEYS: the task. ARGV: the version read, the new value, its expiry.
 * 0: no task (expired meanwhile); 1: another version (changed meanwhile); 2: written.
 */
const CAS_SCRIPT =
  `local v = redis.call('GETRANGE', KEYS[1], 0, ${VERSION_LENGTH - 1}) ` +
  "if v == '' then return 0 end if v ~= ARGV[1] then return 1 end " +
  "redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) return 2";

const sha1 = (script: string): string => createHash('sha1').update(script).digest('hex');
const RESERVE_SHA = sha1(RESERVE_SCRIPT);
const BUMP_SHA = sha1(BUMP_SCRIPT);
const CAS_SHA = sha1(CAS_SCRIPT);

const DEFAULT_PREFIX = 'mrtr:task:';
const MAX_TASK_ID_LENGTH = 256;

const digest = (value: string): string => createHash('sha256').update(value, 'utf8').digest('base64url');
const newVersion = (): string => base64urlEncode(randomBytes(16));

/** A stored value that is not `<version><task record as JSON>` for this id (a foreign or damaged key). */
const corrupt = (taskId: string): StoreUnavailableError =>
  new StoreUnavailableError({
    cause: new Error(`${LABEL}: the value stored for a task is not a task record (id of ${taskId.length} characters)`),
  });

/**
 * Task store on Redis ≥ 6.2 (`PXAT`, `ZADD … GT`), on one server or a Cluster, shared by every instance that
 * uses the same prefix and namespace. See the module comment (and the README's "Task store") for the keys and
 * the order of writes. Fails closed: any Redis error, timeout or unexpected reply is `ERR_STORE_UNAVAILABLE`
 * (`StoreUnavailableError`, the original as `cause`), as is a stored value that is not a task record of the id
 * asked for (it is never treated as absent, so a create cannot replace it and an update never writes over it).
 */
export function createRedisTaskStore(options: RedisTaskStoreOptions = {}): RedisTaskStore {
  options = optionsObject(LABEL, options);
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept } = parseTaskStoreLimits(LABEL, options);
  const { url, client: injected } = options;
  if (url !== undefined && injected !== undefined) throw new TypeError(`${LABEL}: give either url or client, not both`);
  stringOption(`${LABEL}: url`, url, '');
  if (injected !== undefined && (injected === null || typeof (injected as Partial<Commands>).evalsha !== 'function')) {
    throw new TypeError(`${LABEL}: client must be an ioredis Redis or Cluster instance`);
  }
  const prefix = stringOption(`${LABEL}: prefix`, options.prefix, DEFAULT_PREFIX);
  const namespace = stringOption(`${LABEL}: namespace`, options.namespace, DEFAULT_NAMESPACE);
  const commandTimeoutMs = intOption(`${LABEL}: commandTimeoutMs`, options.commandTimeoutMs, 1000, 1, MAX_TIMER_MS);
  const connectTimeoutMs = intOption(`${LABEL}: connectTimeoutMs`, options.connectTimeoutMs, 2000, 1, MAX_TIMER_MS);
  const maxReconnectDelayMs = intOption(`${LABEL}: maxReconnectDelayMs`, options.maxReconnectDelayMs, 2000, 1, MAX_TIMER_MS);
  const maxUpdateAttempts = intOption(`${LABEL}: maxUpdateAttempts`, options.maxUpdateAttempts, 32, 1, 1000);
  const onError = onErrorOption(LABEL, options);
  const redisOptions = redisOptionsOption(LABEL, options.redisOptions);

  const keyPrefix = ledgerKeyPrefix(prefix, namespace);
  const taskKey = (taskId: string): string => `${keyPrefix}t:{${digest(taskId)}}`;
  const principalKeys = (principal: string): [kept: string, live: string] => {
    const tag = `${keyPrefix}p:{${digest(principal)}}`;
    return [`${tag}:k`, `${tag}:l`];
  };

  let closed = false;
  let closing: Promise<void> | undefined;
  const warn = (error: BackgroundError): void => {
    try {
      onError(error);
    } catch {
      // a throwing hook must not break the store
    }
  };
  const connection = openConnection(
    {
      url,
      injected,
      redisOptions,
      connectTimeoutMs,
      commandTimeoutMs,
      maxReconnectDelayMs,
      subject: { store: 'task store', operation: 'task operation' },
    },
    warn,
    () => closed,
  );
  const { client, owned, bounded } = connection;
  const commands = client as unknown as Commands;
  const whenUsable = (): Promise<void> | undefined => (owned ? connection.whenUsable() : undefined);

  const fail = (cause: unknown): never => {
    if (cause instanceof StoreUnavailableError) throw cause;
    throw new StoreUnavailableError({ cause });
  };

  /**
   * Sends one command once the store may (not closed; an owned client's start-up wait), bounded by
   * `commandTimeoutMs` (owned: ioredis's `commandTimeout`; injected: a deadline of its own). Every failure,
   * a synchronous throw of the client included, is `StoreUnavailableError`.
   */
  const call = async <T>(send: () => Promise<T>): Promise<T> => {
    try {
      if (closed) throw new Error('store is closed');
      const wait = whenUsable();
      if (wait !== undefined) await wait;
      if (closed) throw new Error('store is closed');
      const reply = send();
      return await bounded(reply);
    } catch (error) {
      return fail(error);
    }
  };

  const script = async (source: string, sha: string, keys: string[], args: (string | number)[]): Promise<unknown> => {
    try {
      return await call(() => commands.evalsha(sha, keys.length, ...keys, ...args));
    } catch (error) {
      // Not cached on this server (first use, a restart, SCRIPT FLUSH): nothing ran; EVAL loads it.
      const cause = (error as { cause?: unknown }).cause;
      if (cause instanceof ReplyError && String((cause as Error).message).startsWith('NOSCRIPT')) {
        return call(() => commands.eval(source, keys.length, ...keys, ...args));
      }
      throw error;
    }
  };

  /** The command cannot have run: Redis answered with an error, or it was never sent. */
  const notWritten = (error: unknown): boolean => {
    const cause = error instanceof StoreUnavailableError ? (error as { cause?: unknown }).cause : error;
    return (
      cause instanceof ReplyError ||
      (cause instanceof Error && (cause.message === 'store is closed' || cause.message.includes("Stream isn't writeable"))) ||
      MrtrError.is(cause)
    );
  };

  /** The stored value of a task: its version and record; `undefined` when absent or expired (by this host's clock too). */
  const read = async (taskId: string): Promise<{ version: string; record: TaskRecord } | undefined> => {
    const value = await call(() => commands.get(taskKey(taskId)));
    if (value === null) return undefined;
    if (typeof value !== 'string' || value.length <= VERSION_LENGTH) throw corrupt(taskId);
    let parsed: unknown;
    try {
      parsed = JSON.parse(value.slice(VERSION_LENGTH));
    } catch {
      throw corrupt(taskId);
    }
    const record = asTaskRecord(parsed);
    if (record === undefined || record.taskId !== taskId) throw corrupt(taskId);
    if (Date.now() >= taskExpiresAt(record)) return undefined;
    return { version: value.slice(0, VERSION_LENGTH), record };
  };

  /** Takes back a create's set entries (best effort: a leftover entry only counts until its expiry). */
  const release = async (kept: string, live: string, member: string): Promise<void> => {
    await Promise.all([call(() => commands.zrem(kept, member)), call(() => commands.zrem(live, member))]).catch(() => undefined);
  };

  const duplicate = (): Error => new Error(`${LABEL}: create: a task with this id is already present`);

  const create = async (record: TaskRecord): Promise<void> => {
    if (asTaskRecord(record) === undefined) throw new TypeError(`${LABEL}: create: record must be a task record`);
    const { taskId } = record;
    if (taskId.length === 0 || taskId.length > MAX_TASK_ID_LENGTH) {
      throw new TypeError(`${LABEL}: create: taskId must have 1 to ${MAX_TASK_ID_LENGTH} characters`);
    }
    const at = taskExpiresAt(record);
    if (!Number.isSafeInteger(at)) throw new TypeError(`${LABEL}: create: lastUpdatedAt + ttlMs must be a safe integer`);
    const json = JSON.stringify(record);
    const [kept, live] = principalKeys(record.principal);
    const member = digest(taskId);
    const unfinished = !isTerminalStatus(record.status);
    const reply = await script(RESERVE_SCRIPT, RESERVE_SHA, [kept, live], [member, at, unfinished ? 1 : 0, maxLive, maxKept]);
    if (reply === 'live') throw new TaskLimitError('live', maxLive);
    if (reply === 'kept') throw new TaskLimitError('kept', maxKept);
    if (reply === 'duplicate') throw duplicate();
    if (reply !== 'ok') fail(new Error('unexpected reply to the task reserve script'));
    const key = taskKey(taskId);
    const version = newVersion();
    let written: boolean;
    try {
      written = (await call(() => commands.set(key, version + json, 'PXAT', at, 'NX'))) === 'OK';
    } catch (error) {
      if (notWritten(error)) {
        await release(kept, live, member);
        throw error;
      }
      // Lost reply: the SET may have run. One GET on the key: this call's version → written; another → a
      // duplicate; nothing or no answer → unknown (the entry stays: the count is too high, never too low).
      const stored = await call(() => commands.get(key)).catch(() => fail(error));
      if (typeof stored !== 'string') fail(error);
      written = (stored as string).startsWith(version);
    }
    if (!written) {
      await release(kept, live, member);
      throw duplicate();
    }
  };

  const get = async (taskId: string): Promise<TaskRecord | undefined> => {
    if (typeof taskId !== 'string') throw new TypeError(`${LABEL}: get: taskId must be a string`);
    if (closed) fail(new Error('store is closed'));
    return (await read(taskId))?.record;
  };

  const update = async (taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined> => {
    if (typeof taskId !== 'string') throw new TypeError(`${LABEL}: update: taskId must be a string`);
    if (typeof change !== 'function') throw new TypeError(`${LABEL}: update: change must be a function`);
    if (closed) fail(new Error('store is closed'));
    const key = taskKey(taskId);
    const member = digest(taskId);
    for (let attempt = 0; attempt < maxUpdateAttempts; attempt++) {
      const current = await read(taskId);
      if (current === undefined) return undefined;
      const before = current.record;
      const next = change(structuredClone(before));
      if (next === undefined) return before;
      assertTaskChange(`${LABEL}: update`, before, next);
      const at = taskExpiresAt(next);
      if (!Number.isSafeInteger(at)) throw new TypeError(`${LABEL}: update: lastUpdatedAt + ttlMs must be a safe integer`);
      const json = JSON.stringify(next);
      const [kept, live] = principalKeys(before.principal);
      // The entries first: a set entry is never scored before its task's expiry.
      if (at > taskExpiresAt(before)) await script(BUMP_SCRIPT, BUMP_SHA, [kept, live], [member, at]);
      const version = newVersion();
      let reply: unknown;
      try {
        reply = await script(CAS_SCRIPT, CAS_SHA, [key], [current.version, version + json, at]);
      } catch (error) {
        if (notWritten(error)) throw error;
        // Lost reply: written only if the key now holds this call's version; else unknown (fail closed).
        const stored = await call(() => commands.get(key)).catch(() => fail(error));
        if (typeof stored !== 'string' || !stored.startsWith(version)) fail(error);
        reply = 2;
      }
      if (reply === 0) return undefined;
      if (reply === 2) {
        if (!isTerminalStatus(before.status) && isTerminalStatus(next.status)) {
          // Best effort: a leftover live entry only counts until its expiry.
          await call(() => commands.zrem(live, member)).catch(() => undefined);
        }
        return JSON.parse(json) as TaskRecord;
      }
      if (reply !== 1) fail(new Error('unexpected reply to the task compare-and-set script'));
      // Changed meanwhile: read it again. From the third try on, a short random pause spreads the contenders.
      if (attempt >= 2) await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(20, attempt * 2)));
    }
    return fail(new Error(`update: the task kept changing during ${maxUpdateAttempts} attempts`));
  };

  const ready = async (): Promise<void> => {
    if (closed) fail(new Error('store is closed'));
    if (owned) {
      await whenUsable();
      return;
    }
    await call(() => commands.ping());
  };

  const close = (): Promise<void> => {
    closed = true;
    connection.stop();
    closing ??= connection.end();
    return closing;
  };

  return { create, get, update, ready, close, client, keyPrefix };
}

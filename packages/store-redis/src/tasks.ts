/**
 * A `TaskStore` (`@mrtr/core`) on Redis: the tasks of `@mrtr/mcp-server` shared by every instance on one Redis
 * (or Redis Cluster).
 *
 * Keys (`<kp>` = `prefix + namespace + ":"`, `H(x)` = SHA-256 of `x` in base64url, 43 characters):
 * - `<kp>t:{H(taskId)}` — the task: a string `<version><json>`, where `<version>` is 22 random base64url
 *   characters written with every change (so a compare-and-set can never be fooled by an older value coming
 *   back), expiring (`PXAT`) at `lastUpdatedAt + ttlMs`. Tasks spread over a Cluster's slots.
 * - The bookkeeping, every key under one hash tag `<kp>r:{H(<kp>)}:` (so one slot, one master on a Cluster: the
 *   store-wide bound needs one atomic step over all of it): `…a`, every task of the store; `…k:<H(principal)>`,
 *   `…l:<H(principal)>` and `…f:<H(principal)>`, a principal's kept, unfinished ("live") and final tasks — sorted
 *   sets of `H(taskId)` scored by expiry; `…w`, the principals holding a final task, scored by how many tasks they
 *   hold (an upper bound: an expired task is taken off when its principal is looked at). Each key expires with its
 *   latest entry.
 *
 * Ids and principals are attacker-influenced: only their hashes reach key names (bounded length, no `{}`).
 *
 * A task's key and the bookkeeping are on different slots, so a create and an update are two steps each, ordered
 * so that a process dying between them can only make a count too high (tasks are refused a little earlier, until
 * the stale entry's expiry), never too low (the bounds always hold):
 * - create: the reserve script first (drop expired entries, check the principal's bounds, then the store's: a full
 *   store names a victim, the first-expiring final task of the principal holding the most tasks among those holding
 *   a final one when it keeps two more than the newcomer, else the newcomer's own (`TaskStoreLimits.maxTasks`),
 *   which stays counted in `…a` until it is gone), `DEL` of the victim, then `SET … NX PXAT` of the
 *   task, then the victim leaves `…a`. An id already present: its entries are taken back, the first record stays.
 * - update: read the task with its version, run `change`, raise the entries' scores (`ZADD XX GT`) to the new
 *   expiry first, then a compare-and-set script on the version; on a conflict read again and run `change` again
 *   (at most `maxUpdateAttempts` times). A task that became final then moves from the live set to the final one.
 * Each entry is thus always scored at or after its task's expiry.
 */
import { createHash } from 'node:crypto';
import { MrtrError } from '@mrtr/core';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { StoreUnavailableError, TaskLimitError } from '@mrtr/core/errors';
import { intOption, optionsObject, stringOption } from '@mrtr/core/options';
import type { BackgroundError } from '@mrtr/core/store';
import {
  assertTaskCreateArguments,
  assertTaskUpdateArguments,
  asTaskRecord,
  isTerminalStatus,
  parseTaskStoreLimits,
  parseTaskUpdateOptions,
  roomFromAtLeast,
  runTaskUpdate,
  TASK_STORE_LIMIT_OPTIONS,
  taskExpiresAt,
  type TaskRecord,
  type TaskStore,
  type TaskStoreLimits,
} from '@mrtr/core/tasks';
import { type Cluster, type Redis, type RedisOptions, ReplyError } from 'ioredis';
import { openConnection, type RedisConnection } from './connection.js';
import { DEFAULT_NAMESPACE, ledgerKeyPrefix, MAX_TIMER_MS, onErrorOption, redisOptionsOption } from './options.js';

const LABEL = 'createRedisTaskStore';

/**
 * Options of {@link createRedisTaskStore}: the bounds (16 unfinished and 256 kept per principal; `maxTasks`, 100,000 in
 * all, a full store making room from the heaviest holder's final tasks) and these. Give `url` or `client`, not both.
 */
export interface RedisTaskStoreOptions extends TaskStoreLimits {
  /**
   * Connection URL (`redis://`, `rediss://`, with user, password and db) for a client the store creates and
   * owns. Default `redis://127.0.0.1:6379` when no `client` is given.
   * @default `'redis://127.0.0.1:6379'` (when no `client` is given)
   */
  url?: string | undefined;
  /**
   * An existing ioredis `Redis` or `Cluster` instance. The store sends `GET`, `SET … NX PXAT`, `DEL`, `ZREM`
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
   * (`''`, the default of every `@mrtr/store-*` store) is keyed as `default`, this option's former
   * default: so `''` and `'default'` name the same store and existing keys stay in use.
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
   * Receives the problems the store survives in the background, as a `BackgroundError` (`@mrtr/core/store`:
   * an `Error` with a stable `code`, the underlying error as `cause`) — the hook every `@mrtr/store-*` store takes
   * under this name and shape: the owned client's start-up connection report, `STORE_UNREACHABLE` once when
   * Redis cannot be reached at start-up and `STORE_REACHABLE` once when it is reached after that.
   * Default: `console.warn` of the message.
   * @default (error) => console.warn(error.message)
   */
  onError?: ((error: BackgroundError) => void) | undefined;
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
  del(key: string): Promise<number>;
  evalsha(sha: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  ping(): Promise<unknown>;
}

/** Length of the version that starts every stored task (16 random bytes in base64url). */
const VERSION_LENGTH = 22;

/** Redis's clock (ms) and `tops(...)`: keeps each sorted set as long as its latest entry. */
const COMMON =
  "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) " +
  'local function tops(...) for _, k in ipairs({...}) do ' +
  "local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES') if top[2] then redis.call('PEXPIREAT', k, top[2]) end end end ";
/**
 * Create, on the bookkeeping's slot. KEYS: all, holders, kept, live, final (the principal's). ARGV: member, expiry
 * (ms), `1` when the task is unfinished, maxLive, maxKept, maxTasks, the bookkeeping's key prefix, H(principal),
 * the margin of `roomFromAtLeast` (the count another holder must exceed the newcomer's by).
 * Drops expired entries, refuses a member already kept (`duplicate`), then the live bound (`live`), then the kept
 * bound (`kept`); a full store (`…a` at maxTasks) makes room: the heaviest holder of final tasks (`…w`, its count
 * checked against its sets, at most 64 holders looked at), when it keeps at least `roomFromAtLeast` of the
 * newcomer's count, else the newcomer itself, gives up its first-expiring final task, which leaves its sets but
 * stays in `…a` until the caller has deleted it (reply `v<member>`); neither → `store`. Else adds the member
 * (`ok`). Bounded: each step is a sorted-set operation, the holder search at most 64 rounds.
 */
const RESERVE_BODY =
  COMMON +
  "for i = 1, 5 do if i ~= 2 then redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. now) end end " +
  "if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return 'duplicate' end " +
  "if ARGV[3] == '1' and redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[4]) then return 'live' end " +
  "if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then return 'kept' end " +
  "local victim = '' " +
  "if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[6]) then " +
  "  local least = redis.call('ZCARD', KEYS[3]) + tonumber(ARGV[9]) " +
  '  local function pop(holder, fk, kk, count) ' +
  "    local x = redis.call('ZPOPMIN', fk) redis.call('ZREM', kk, x[1]) " +
  "    if redis.call('ZCARD', fk) == 0 then redis.call('ZREM', KEYS[2], holder) else redis.call('ZADD', KEYS[2], count - 1, holder) end " +
  '    return x[1] end ' +
  '  for i = 1, 64 do ' +
  "    local top = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES') if not top[1] then break end " +
  "    local fk = ARGV[7] .. 'f:' .. top[1] local kk = ARGV[7] .. 'k:' .. top[1] " +
  "    redis.call('ZREMRANGEBYSCORE', fk, '-inf', '(' .. now) redis.call('ZREMRANGEBYSCORE', kk, '-inf', '(' .. now) " +
  "    local count = redis.call('ZCARD', kk) " +
  "    if redis.call('ZCARD', fk) == 0 then redis.call('ZREM', KEYS[2], top[1]) " +
  "    elseif count < tonumber(top[2]) and i < 64 then redis.call('ZADD', KEYS[2], count, top[1]) " +
  '    elseif top[1] ~= ARGV[8] and count < least then break ' +
  '    else victim = pop(top[1], fk, kk, count) break end ' +
  '  end ' +
  "  if victim == '' and redis.call('ZCARD', KEYS[5]) > 0 then victim = pop(ARGV[8], KEYS[5], KEYS[3], redis.call('ZCARD', KEYS[3])) end " +
  "  if victim == '' then return 'store' end " +
  'end ' +
  "redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1]) " +
  "if ARGV[3] == '1' then redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1]) " +
  "else redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1]) redis.call('ZADD', KEYS[2], redis.call('ZCARD', KEYS[3]), ARGV[8]) end " +
  "if redis.call('ZSCORE', KEYS[2], ARGV[8]) then redis.call('ZADD', KEYS[2], redis.call('ZCARD', KEYS[3]), ARGV[8]) end " +
  // The sets the member joined (and the holders) live at least until its expiry: an expiry only ever moves later
  // (PTTL, O(1), instead of reading each set's latest entry).
  "local at = tonumber(ARGV[2]) for _, k in ipairs({KEYS[1], KEYS[3], ARGV[3] == '1' and KEYS[4] or KEYS[5], KEYS[2]}) do " +
  "if redis.call('PTTL', k) < at - now then redis.call('PEXPIREAT', k, at) end end ";
const RESERVE_SCRIPT = `${RESERVE_BODY}if victim == '' then return 'ok' end return 'v' .. victim`;
/**
 * One Redis (not a Cluster, where the task and the bookkeeping are on different slots): a create's steps in one
 * script: an id already present (KEYS[6], the task) refuses first (`duplicate`: nothing changed, the first record
 * stays); then the reserve (as RESERVE_SCRIPT, same KEYS 1–5 and ARGV 1–9), the victim's deletion (its task key:
 * ARGV[10], the task keys' prefix) and its leaving `…a`, and `SET … PXAT` of the task (ARGV[11]: the value). One
 * atomic step: nothing is counted that is not written. Replies `ok` or a refusal as the reserve.
 */
const CREATE_BOOKS_SCRIPT =
  "if redis.call('EXISTS', KEYS[6]) == 1 then return 'duplicate' end " +
  RESERVE_BODY +
  "if victim ~= '' then redis.call('DEL', ARGV[10] .. 't:{' .. victim .. '}') redis.call('ZREM', KEYS[1], victim) end " +
  "redis.call('SET', KEYS[6], ARGV[11], 'PXAT', ARGV[2]) return 'ok'";
/**
 * Before an update's write, on the bookkeeping's slot. KEYS: all, holders, kept, live, final. ARGV: member, new
 * expiry. Raises the member's score where it is present (`XX GT`: never adds, never lowers) and keeps each set as
 * long as its latest entry (the holders as long as all).
 */
const BUMP_SCRIPT =
  COMMON +
  "for _, i in ipairs({1, 3, 4, 5}) do redis.call('ZADD', KEYS[i], 'XX', 'GT', ARGV[2], ARGV[1]) end " +
  'tops(KEYS[1], KEYS[3], KEYS[4], KEYS[5]) ' +
  "local all = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') if all[2] then redis.call('PEXPIREAT', KEYS[2], all[2]) end return 1";
/**
 * After an update made a task final, on the bookkeeping's slot. KEYS: all, holders, kept, live, final. ARGV:
 * member, H(principal). Moves the member from the live set to the final one (if still kept) and counts the
 * principal among the holders of final tasks.
 */
const FINAL_SCRIPT =
  COMMON +
  "redis.call('ZREM', KEYS[4], ARGV[1]) local s = redis.call('ZSCORE', KEYS[3], ARGV[1]) " +
  "if s then redis.call('ZADD', KEYS[5], s, ARGV[1]) redis.call('ZADD', KEYS[2], redis.call('ZCARD', KEYS[3]), ARGV[2]) end " +
  'tops(KEYS[5]) ' +
  "local all = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') if all[2] then redis.call('PEXPIREAT', KEYS[2], all[2]) end return 1";
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
const CREATE_BOOKS_SHA = sha1(CREATE_BOOKS_SCRIPT);
const BUMP_SHA = sha1(BUMP_SCRIPT);
const FINAL_SHA = sha1(FINAL_SCRIPT);
const CAS_SHA = sha1(CAS_SCRIPT);
/**
 * One Redis (not a Cluster, where the task and the bookkeeping are on different slots): the update's three steps
 * in one script, in the same order. KEYS: the task, then all, holders, kept, live, final. ARGV: the version read,
 * the new value, its expiry, member, H(principal), `1` to raise the entries' scores first, `1` when the task became
 * final. Replies as the compare-and-set.
 */
const CAS_BOOKS_SCRIPT =
  COMMON +
  `local v = redis.call('GETRANGE', KEYS[1], 0, ${VERSION_LENGTH - 1}) ` +
  "if v == '' then return 0 end if v ~= ARGV[1] then return 1 end " +
  // Raised scores: a set's expiry, at or after its latest entry, moves to the new expiry only when that is later.
  // A task that becomes final leaves the live set and joins the final one with its kept entry's score below: only
  // all, kept and the holders are raised then.
  "if ARGV[6] == '1' then local at = tonumber(ARGV[3]) for _, i in ipairs(ARGV[7] == '1' and {2, 4, 3} or {2, 4, 5, 6, 3}) do " +
  "if i == 3 or redis.call('ZADD', KEYS[i], 'XX', 'GT', 'CH', ARGV[3], ARGV[4]) == 1 then " +
  "if redis.call('PTTL', KEYS[i]) < at - now then redis.call('PEXPIREAT', KEYS[i], ARGV[3]) end end end end " +
  "redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) " +
  "if ARGV[7] == '1' then redis.call('ZREM', KEYS[5], ARGV[4]) local s = redis.call('ZSCORE', KEYS[4], ARGV[4]) " +
  "if s then redis.call('ZADD', KEYS[6], s, ARGV[4]) redis.call('ZADD', KEYS[3], redis.call('ZCARD', KEYS[4]), ARGV[5]) end tops(KEYS[6]) " +
  "local all = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES') if all[2] then redis.call('PEXPIREAT', KEYS[3], all[2]) end end return 2";
const CAS_BOOKS_SHA = sha1(CAS_BOOKS_SCRIPT);

const DEFAULT_PREFIX = 'mrtr:task:';

const digest = (value: string): string => createHash('sha256').update(value, 'utf8').digest('base64url');
/**
 * A new version: 22 base64url characters, unique — 10 random bytes drawn per 65,536 versions (one CSPRNG call) and a
 * counter — so that a compare-and-set never mistakes another write for its own (it is not a secret).
 */
const versionBytes = randomBytes(16);
let versionCount = 0;
const newVersion = (): string => {
  if ((versionCount & 0xffff) === 0) versionBytes.set(randomBytes(10));
  versionCount = (versionCount + 1) % 0x1_0000_0000_0000;
  let n = versionCount;
  for (let i = 15; i >= 10; i--) {
    versionBytes[i] = n % 256;
    n = Math.floor(n / 256);
  }
  return base64urlEncode(versionBytes);
};

/** A stored value that is not `<version><task record as JSON>` for this id (a foreign or damaged key). */
const corrupt = (taskId: string): StoreUnavailableError =>
  new StoreUnavailableError({
    cause: new Error(`${LABEL}: the value stored for a task is not a task record (id of ${taskId.length} characters)`),
  });

/** {@link RedisTaskStoreOptions} checked, with every default filled in. */
interface ParsedTaskStoreOptions {
  readonly url: string | undefined;
  readonly injected: Redis | Cluster | undefined;
  readonly keyPrefix: string;
  readonly maxLive: number;
  readonly maxKept: number;
  readonly maxTasks: number;
  readonly commandTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly maxReconnectDelayMs: number;
  readonly maxUpdateAttempts: number;
  readonly onError: (error: BackgroundError) => void;
  readonly redisOptions: RedisOptions;
}

/** Checks the options of {@link createRedisTaskStore} (a misuse throws `TypeError`/`RangeError`) and fills in the defaults. */
function parseTaskStoreOptions(options: RedisTaskStoreOptions): ParsedTaskStoreOptions {
  options = optionsObject(LABEL, options, {
    ...TASK_STORE_LIMIT_OPTIONS,
    url: true,
    client: true,
    prefix: true,
    namespace: true,
    commandTimeoutMs: true,
    connectTimeoutMs: true,
    maxReconnectDelayMs: true,
    redisOptions: true,
    onError: true,
    maxUpdateAttempts: true,
  });
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept, maxTasks } = parseTaskStoreLimits(LABEL, options);
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
  const { maxUpdateAttempts } = parseTaskUpdateOptions(LABEL, options);
  const onError = onErrorOption(LABEL, options);
  const redisOptions = redisOptionsOption(LABEL, options.redisOptions);
  return {
    url,
    injected,
    keyPrefix: ledgerKeyPrefix(prefix, namespace),
    maxLive,
    maxKept,
    maxTasks,
    commandTimeoutMs,
    connectTimeoutMs,
    maxReconnectDelayMs,
    maxUpdateAttempts,
    onError,
    redisOptions,
  };
}

/** How the operations reach Redis: every failure is `StoreUnavailableError`. */
interface TaskLink {
  readonly commands: Commands;
  /**
   * Sends one command once the store may (not closed; an owned client's start-up wait), bounded by
   * `commandTimeoutMs` (owned: ioredis's `commandTimeout`; injected: a deadline of its own). Every failure,
   * a synchronous throw of the client included, is `StoreUnavailableError`.
   */
  call<T>(send: () => Promise<T>): Promise<T>;
  /** `EVALSHA` of a script, `EVAL` when the server does not hold it yet. */
  script(source: string, sha: string, keys: string[], args: (string | number)[]): Promise<unknown>;
}

function taskLink(connection: RedisConnection, isClosed: () => boolean): TaskLink {
  const { client, owned, bounded } = connection;
  const commands = client as unknown as Commands;
  const whenUsable = (): Promise<void> | undefined => (owned ? connection.whenUsable() : undefined);

  const call = async <T>(send: () => Promise<T>): Promise<T> => {
    try {
      if (isClosed()) throw new Error('store is closed');
      const wait = whenUsable();
      if (wait !== undefined) await wait;
      if (isClosed()) throw new Error('store is closed');
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
  return { commands, call, script };
}

const fail = (cause: unknown): never => {
  if (cause instanceof StoreUnavailableError) throw cause;
  throw new StoreUnavailableError({ cause });
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

const duplicate = (): Error => new Error(`${LABEL}: create: a task with this id is already present`);

/** What `create` and `update` share: the parsed options, the link, the keys and the reads. */
interface Tasks {
  readonly options: ParsedTaskStoreOptions;
  readonly link: TaskLink;
  readonly isCluster: boolean;
  readonly taskKey: (taskId: string) => string;
  /** The bookkeeping's keys, one hash tag (see the module comment). */
  readonly books: string;
  /** The keys the bookkeeping scripts take for a principal: all, holders, kept, live, final; and H(principal). */
  readonly bookKeys: (principal: string) => { keys: string[]; who: string };
  /** The stored value of a task: its version and record; `undefined` when absent or expired (by this host's clock too). */
  readonly read: (taskId: string, key?: string) => Promise<{ version: string; record: TaskRecord; json: string } | undefined>;
}

function tasksOf(options: ParsedTaskStoreOptions, link: TaskLink, isCluster: boolean): Tasks {
  const { keyPrefix } = options;
  const taskKey = (taskId: string): string => `${keyPrefix}t:{${digest(taskId)}}`;
  const books = `${keyPrefix}r:{${digest(keyPrefix)}}:`;
  const bookKeys = (principal: string): { keys: string[]; who: string } => {
    const who = digest(principal);
    return { keys: [`${books}a`, `${books}w`, `${books}k:${who}`, `${books}l:${who}`, `${books}f:${who}`], who };
  };
  const read = async (
    taskId: string,
    key = taskKey(taskId),
  ): Promise<{ version: string; record: TaskRecord; json: string } | undefined> => {
    const value = await link.call(() => link.commands.get(key));
    if (value === null) return undefined;
    if (typeof value !== 'string' || value.length <= VERSION_LENGTH) throw corrupt(taskId);
    const json = value.slice(VERSION_LENGTH);
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch {
      throw corrupt(taskId);
    }
    const record = asTaskRecord(parsed);
    if (record === undefined || record.taskId !== taskId) throw corrupt(taskId);
    if (Date.now() >= taskExpiresAt(record)) return undefined;
    return { version: value.slice(0, VERSION_LENGTH), record, json };
  };
  return { options, link, isCluster, taskKey, books, bookKeys, read };
}

/** Takes back a create's entries (best effort: a leftover entry only counts until its expiry). */
async function release({ link }: Tasks, keys: string[], member: string): Promise<void> {
  await Promise.all([0, 2, 3, 4].map((i) => link.call(() => link.commands.zrem(keys[i] as string, member)).catch(() => undefined)));
}

/** `create`: the reserve script, the victim's deletion, then `SET … NX PXAT` of the task (see the module comment). */
async function createTask(tasks: Tasks, record: TaskRecord): Promise<void> {
  const { options, link, books, bookKeys } = tasks;
  const { keyPrefix, maxLive, maxKept, maxTasks } = options;
  const at = assertTaskCreateArguments(LABEL, record);
  const { taskId } = record;
  const json = JSON.stringify(record);
  const { keys, who } = bookKeys(record.principal);
  const member = digest(taskId);
  const unfinished = !isTerminalStatus(record.status);
  const args = [member, at, unfinished ? 1 : 0, maxLive, maxKept, maxTasks, books, who, roomFromAtLeast(0)];
  if (!tasks.isCluster) return createInOne(tasks, keys, args, record, json);
  const reply = await link.script(RESERVE_SCRIPT, RESERVE_SHA, keys, args);
  if (reply === 'live') throw new TaskLimitError('live', maxLive);
  if (reply === 'kept') throw new TaskLimitError('kept', maxKept);
  if (reply === 'store') throw new TaskLimitError('store', maxTasks);
  if (reply === 'duplicate') throw duplicate();
  if (reply !== 'ok' && !(typeof reply === 'string' && reply.startsWith('v')))
    fail(new Error('unexpected reply to the task reserve script'));
  const victim = reply === 'ok' ? undefined : (reply as string).slice(1);
  if (victim !== undefined) {
    // Room made: the victim goes before this task is written (it stays counted in `…a` until then), so the store
    // never holds more than maxTasks. Its deletion unknown → this create fails closed, the victim still counted.
    try {
      await link.call(() => link.commands.del(`${keyPrefix}t:{${victim}}`));
    } catch (error) {
      await release(tasks, keys, member);
      throw error;
    }
  }
  const takeBack = (): Promise<void> => release(tasks, keys, member);
  if (!(await writeNewTask(tasks, tasks.taskKey(taskId), json, at, takeBack))) {
    await takeBack();
    throw duplicate();
  }
  // Best effort: a victim left in `…a` only counts until its expiry.
  if (victim !== undefined) await link.call(() => link.commands.zrem(keys[0] as string, victim)).catch(() => undefined);
}

/** A refusal of the reserve as the error `create` rejects with (`ok` → none). */
function refusalOf(reply: unknown, options: ParsedTaskStoreOptions): Error | undefined {
  if (reply === 'live') return new TaskLimitError('live', options.maxLive);
  if (reply === 'kept') return new TaskLimitError('kept', options.maxKept);
  if (reply === 'store') return new TaskLimitError('store', options.maxTasks);
  if (reply === 'duplicate') return duplicate();
  if (reply === 'ok') return undefined;
  return fail(new Error('unexpected reply to the task create script'));
}

/**
 * `create` on one Redis: the whole create in one script (CREATE_BOOKS_SCRIPT), one round trip. A lost reply: one
 * `GET` of the task (this call's version → written; anything else or no answer → unknown, fail closed: its entries
 * may be counted, too high, never too low).
 */
async function createInOne(tasks: Tasks, keys: string[], args: (string | number)[], record: TaskRecord, json: string): Promise<void> {
  const { link, options } = tasks;
  const key = tasks.taskKey(record.taskId);
  const version = newVersion();
  let reply: unknown;
  try {
    reply = await link.script(CREATE_BOOKS_SCRIPT, CREATE_BOOKS_SHA, [...keys, key], [...args, options.keyPrefix, version + json]);
  } catch (error) {
    if (notWritten(error)) throw error;
    const stored = await link.call(() => link.commands.get(key)).catch(() => fail(error));
    if (typeof stored !== 'string' || !stored.startsWith(version)) fail(error);
    return;
  }
  const refusal = refusalOf(reply, options);
  if (refusal !== undefined) throw refusal;
}

/**
 * `SET … NX PXAT` of a new task: true when this call wrote it, false when the id is taken. A lost reply: one `GET` on
 * the key (this call's version → written; another → taken; nothing or no answer → unknown, fail closed: the entry
 * stays, the count too high, never too low). A command that cannot have run takes the entries back.
 */
async function writeNewTask(tasks: Tasks, key: string, json: string, at: number, takeBack: () => Promise<void>): Promise<boolean> {
  const { link } = tasks;
  const version = newVersion();
  try {
    return (await link.call(() => link.commands.set(key, version + json, 'PXAT', at, 'NX'))) === 'OK';
  } catch (error) {
    if (notWritten(error)) {
      await takeBack();
      throw error;
    }
    const stored = await link.call(() => link.commands.get(key)).catch(() => fail(error));
    if (typeof stored !== 'string') fail(error);
    return (stored as string).startsWith(version);
  }
}

/**
 * `update`: read the task with its version, run `change`, then the compare-and-set (with the entries' scores raised
 * first); on a conflict read again and run `change` again, at most `maxUpdateAttempts` times.
 */
async function updateTask(
  tasks: Tasks,
  taskId: string,
  change: (record: TaskRecord) => TaskRecord | undefined,
): Promise<TaskRecord | undefined> {
  const { options, link, isCluster, bookKeys, read } = tasks;
  const { keyPrefix, maxUpdateAttempts } = options;
  const member = digest(taskId);
  const key = `${keyPrefix}t:{${member}}`;
  return runTaskUpdate(LABEL, taskId, change, maxUpdateAttempts, {
    read: () => read(taskId, key),
    // `change` gets its own copy: a second parse of the stored JSON (cheaper than structuredClone).
    copy: (current) => JSON.parse(current.json) as TaskRecord,
    write: async (current, next) => {
      const at = taskExpiresAt(next);
      if (!Number.isSafeInteger(at)) throw new TypeError(`${LABEL}: update: lastUpdatedAt + ttlMs must be a safe integer`);
      const before = current.record;
      const json = JSON.stringify(next);
      const { keys, who } = bookKeys(before.principal);
      const bump = at > taskExpiresAt(before);
      const becameFinal = !isTerminalStatus(before.status) && isTerminalStatus(next.status);
      const version = newVersion();
      let reply: unknown;
      try {
        reply = isCluster
          ? await casInSteps(link, keys, key, member, current.version, version + json, at, bump)
          : await link.script(
              CAS_BOOKS_SCRIPT,
              CAS_BOOKS_SHA,
              [key, ...keys],
              [current.version, version + json, at, member, who, bump ? 1 : 0, becameFinal ? 1 : 0],
            );
      } catch (error) {
        if (notWritten(error)) throw error;
        // Lost reply: written only if the key now holds this call's version; else unknown (fail closed).
        const stored = await link.call(() => link.commands.get(key)).catch(() => fail(error));
        if (typeof stored !== 'string' || !stored.startsWith(version)) fail(error);
        reply = 2;
      }
      if (reply === 0) return undefined;
      if (reply === 2) {
        if (isCluster && becameFinal) {
          // Best effort: a leftover live entry only counts until its expiry (and the task cannot make room meanwhile).
          await link.script(FINAL_SCRIPT, FINAL_SHA, keys, [member, who]).catch(() => undefined);
        }
        return JSON.parse(json) as TaskRecord;
      }
      if (reply !== 1) fail(new Error('unexpected reply to the task compare-and-set script'));
      return 'conflict';
    },
  });
}

/** A Cluster: the entries' scores raised first (an entry is never scored before its task's expiry), then the compare-and-set. */
async function casInSteps(
  link: TaskLink,
  keys: string[],
  key: string,
  member: string,
  version: string,
  value: string,
  at: number,
  bump: boolean,
): Promise<unknown> {
  if (bump) await link.script(BUMP_SCRIPT, BUMP_SHA, keys, [member, at]);
  return link.script(CAS_SCRIPT, CAS_SHA, [key], [version, value, at]);
}

/**
 * Task store on Redis ≥ 6.2 (`PXAT`, `ZADD … GT`), on one server or a Cluster, shared by every instance that
 * uses the same prefix and namespace. See the module comment (and the README's "Task store") for the keys and
 * the order of writes. Fails closed: any Redis error, timeout or unexpected reply is `ERR_STORE_UNAVAILABLE`
 * (`StoreUnavailableError`, the original as `cause`), as is a stored value that is not a task record of the id
 * asked for (it is never treated as absent, so a create cannot replace it and an update never writes over it).
 */
export function createRedisTaskStore(options: RedisTaskStoreOptions = {}): RedisTaskStore {
  const parsed = parseTaskStoreOptions(options);
  const { keyPrefix, onError } = parsed;

  let closed = false;
  let closing: Promise<void> | undefined;
  const warn = (error: BackgroundError): void => {
    try {
      onError(error);
    } catch {
      // a throwing hook must not break the store
    }
  };
  const connection = openConnection({ ...parsed, subject: { store: 'task store', operation: 'task operation' } }, warn, () => closed);
  const { client, owned } = connection;
  const link = taskLink(connection, () => closed);
  const isCluster = (client as { isCluster?: unknown }).isCluster === true;
  const tasks = tasksOf(parsed, link, isCluster);

  const create = (record: TaskRecord): Promise<void> => createTask(tasks, record);

  const get = async (taskId: string): Promise<TaskRecord | undefined> => {
    if (typeof taskId !== 'string') throw new TypeError(`${LABEL}: get: taskId must be a string`);
    if (closed) fail(new Error('store is closed'));
    return (await tasks.read(taskId))?.record;
  };

  const update = async (taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined> => {
    assertTaskUpdateArguments(LABEL, taskId, change);
    if (closed) fail(new Error('store is closed'));
    return updateTask(tasks, taskId, change);
  };

  const ready = async (): Promise<void> => {
    if (closed) fail(new Error('store is closed'));
    if (owned) {
      await connection.whenUsable();
      return;
    }
    await link.call(() => link.commands.ping());
  };

  const close = (): Promise<void> => {
    closed = true;
    connection.stop();
    closing ??= connection.end();
    return closing;
  };

  return { create, get, update, ready, close, client, keyPrefix };
}

/**
 * A `TaskStore` (`@mrtr/core`) on Upstash Redis over REST.
 *
 * Keys (`<kp>` = `prefix + namespace + ":"`, `H(x)` = SHA-256 of `x` in base64url, 43 characters):
 * - `<kp>t:<H(taskId)>`: the task, `v<version><json>` (`<version>`: 22 random base64url characters written with every
 *   change), expiring (`PXAT`) at `lastUpdatedAt + ttlMs`;
 * - `<kp>k:<H(principal)>`, `…l:…`, `…f:…`: the principal's kept, unfinished ("live") and final tasks, sorted sets of
 *   `H(taskId)` scored by expiry;
 * - `<kp>all`: every task of the store (`H(taskId)` by expiry), for `maxTasks`;
 * - `<kp>heavy`: the principals that hold a final task, scored by how many tasks they keep: where a full store takes
 *   room from.
 *
 * A create and an update are each one script (Upstash runs a script atomically, on one database), so the bounds hold
 * under any concurrency and there is no order of writes to get wrong. The scripts derive the principal's and the
 * heaviest holder's keys from `<kp>` (not all of them are known before the script runs): they need one Redis
 * database, as Upstash gives, not a Redis Cluster. Reads are scripts too, so they are answered by the primary
 * (Upstash may serve a plain `GET` from a replica that has not seen the last write of another instance).
 */
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { StoreUnavailableError, TaskLimitError } from '@mrtr/core/errors';
import {
  assertTaskCreateArguments,
  asTaskRecord,
  isTerminalStatus,
  parseTaskStoreLimits,
  parseTaskUpdateOptions,
  roomFromAtLeast,
  runTaskUpdate,
  TASK_STORE_LIMIT_OPTIONS,
  TASK_UPDATE_OPTIONS,
  taskExpiresAt,
  type TaskRecord,
  type TaskStore,
  type TaskStoreLimits,
  type TaskUpdateOptions,
} from '@mrtr/core/tasks';
import type { Redis } from '@upstash/redis';
import { openLink, script, type UpstashConnectionOptions, CONNECTION_OPTIONS } from './link.js';

const LABEL = 'createUpstashTaskStore';
/** `v` and 22 random base64url characters. */
const VERSION_LENGTH = 23;

/** Options of {@link createUpstashTaskStore}: the connection, the bounds (16 unfinished and 256 kept per principal, 100,000 in all) and `maxUpdateAttempts`. */
export interface UpstashTaskStoreOptions extends UpstashConnectionOptions, TaskStoreLimits, TaskUpdateOptions {}

/** A {@link TaskStore} on Upstash Redis. */
export interface UpstashTaskStore extends TaskStore {
  readonly client: Redis;
  readonly keyPrefix: string;
  close(): Promise<void>;
}

// Shared Lua: `now` (Redis's clock, ms), and keeping a sorted set until its latest entry.
const NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) ";
const KEEP =
  "local function keep(k) local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES') " +
  "if top[2] then redis.call('PEXPIREAT', k, top[2]) end end " +
  "local function prune(k) redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. now) end ";

/**
 * KEYS: task, kept, live, final, all, heavy. ARGV: value, expiry, `1` if unfinished, maxLive, maxKept, maxTasks,
 * member H(taskId), H(principal), `<kp>`, the margin of `roomFromAtLeast` (how many more tasks than the newcomer
 * another holder must keep). Answers `ok` (also to its own caller asked again: the value's version), `duplicate`,
 * `live`, `kept` or `store`. A full store drops the oldest final task of the principal that keeps the most tasks
 * among those holding a final one when it keeps at least `roomFromAtLeast` of the newcomer's count, else the
 * newcomer's own, re-ranking at most 32 stale entries of `heavy` on the way.
 */
const CREATE = script(
  NOW +
    KEEP +
    `local cur = redis.call('GETRANGE', KEYS[1], 0, ${VERSION_LENGTH - 1}) ` +
    `if cur ~= '' then if cur == string.sub(ARGV[1], 1, ${VERSION_LENGTH}) then return 'ok' end return 'duplicate' end ` +
    'prune(KEYS[2]) prune(KEYS[3]) prune(KEYS[4]) ' +
    "if ARGV[3] == '1' and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return 'live' end " +
    "if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 'kept' end " +
    'prune(KEYS[5]) ' +
    "if redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[6]) then " +
    "local room = false local least = redis.call('ZCARD', KEYS[2]) + tonumber(ARGV[10]) " +
    'local function drop(hp, hk, hf, nf, nk) ' +
    "local victim = redis.call('ZRANGE', hf, 0, 0)[1] " +
    "redis.call('DEL', ARGV[9] .. 't:' .. victim) redis.call('ZREM', hf, victim) redis.call('ZREM', hk, victim) " +
    "redis.call('ZREM', KEYS[5], victim) " +
    "if nf == 1 then redis.call('ZREM', KEYS[6], hp) else redis.call('ZADD', KEYS[6], nk - 1, hp) end " +
    'room = true end ' +
    'for i = 1, 32 do ' +
    "local top = redis.call('ZREVRANGE', KEYS[6], 0, 0, 'WITHSCORES') if not top[1] then break end " +
    "local hp = top[1] local hk = ARGV[9] .. 'k:' .. hp local hl = ARGV[9] .. 'l:' .. hp local hf = ARGV[9] .. 'f:' .. hp " +
    "prune(hk) prune(hl) prune(hf) local nf = redis.call('ZCARD', hf) local nk = redis.call('ZCARD', hk) " +
    "if nf == 0 then redis.call('ZREM', KEYS[6], hp) " +
    "elseif nk ~= tonumber(top[2]) then redis.call('ZADD', KEYS[6], nk, hp) " +
    'elseif hp ~= ARGV[8] and nk < least then break ' +
    'else drop(hp, hk, hf, nf, nk) break end end ' +
    "local own = redis.call('ZCARD', KEYS[4]) " +
    "if not room and own > 0 then drop(ARGV[8], KEYS[2], KEYS[4], own, redis.call('ZCARD', KEYS[2])) end " +
    "if not room then return 'store' end end " +
    "redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2]) " +
    "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[7]) " +
    "if ARGV[3] == '1' then redis.call('ZADD', KEYS[3], ARGV[2], ARGV[7]) else redis.call('ZADD', KEYS[4], ARGV[2], ARGV[7]) end " +
    "redis.call('ZADD', KEYS[5], ARGV[2], ARGV[7]) " +
    "if redis.call('ZCARD', KEYS[4]) > 0 then redis.call('ZADD', KEYS[6], redis.call('ZCARD', KEYS[2]), ARGV[8]) end " +
    "keep(KEYS[2]) keep(KEYS[3]) keep(KEYS[4]) return 'ok'",
);

/**
 * Compare-and-set. KEYS: task, kept, live, final, all, heavy. ARGV: version read, new value, expiry, member, `1` when the
 * task becomes final, H(principal). 0: no task; 1: changed meanwhile; 2: written (also to its own caller asked again).
 */
const UPDATE = script(
  NOW +
    KEEP +
    `local cur = redis.call('GETRANGE', KEYS[1], 0, ${VERSION_LENGTH - 1}) ` +
    "if cur == '' then return 0 end " +
    `if cur == string.sub(ARGV[2], 1, ${VERSION_LENGTH}) then return 2 end ` +
    'if cur ~= ARGV[1] then return 1 end ' +
    "redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3]) " +
    "for i = 2, 5 do redis.call('ZADD', KEYS[i], 'XX', 'GT', ARGV[3], ARGV[4]) end " +
    "if ARGV[5] == '1' then redis.call('ZREM', KEYS[3], ARGV[4]) redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4]) " +
    "prune(KEYS[2]) redis.call('ZADD', KEYS[6], redis.call('ZCARD', KEYS[2]), ARGV[6]) end " +
    'keep(KEYS[2]) keep(KEYS[3]) keep(KEYS[4]) return 2',
);

/** KEYS: task. The stored value from the primary, or nil. */
const READ = script("return redis.call('GET', KEYS[1])");

const digest = async (value: string): Promise<string> =>
  base64urlEncode(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(value))));
const newVersion = (): string => `v${base64urlEncode(randomBytes(16))}`;

const corrupt = (taskId: string): StoreUnavailableError =>
  new StoreUnavailableError({
    cause: new Error(`${LABEL}: the value stored for a task is not a task record (id of ${taskId.length} characters)`),
  });

/**
 * Task store on Upstash Redis (REST), shared by every instance with the same prefix and namespace: bounded per
 * principal (`maxLivePerPrincipal`, `maxPerPrincipal`) and in all (`maxTasks`, making room from the heaviest holder's
 * final tasks), one atomic script per create and per update (optimistic, on a version), reads from the primary.
 * Fails closed: any error, timeout or unexpected reply is `ERR_STORE_UNAVAILABLE`, as is a stored value that is not a
 * task record of the id asked for.
 */
export function createUpstashTaskStore(options: UpstashTaskStoreOptions): UpstashTaskStore {
  if (options === undefined) throw new TypeError(`${LABEL}: options must be an object with url and token, or client`);
  const link = openLink(LABEL, options, { ...CONNECTION_OPTIONS, ...TASK_STORE_LIMIT_OPTIONS, ...TASK_UPDATE_OPTIONS });
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept, maxTasks } = parseTaskStoreLimits(LABEL, options);
  const { maxUpdateAttempts } = parseTaskUpdateOptions(LABEL, options);
  const { keyPrefix: kp } = link;

  const keysOf = async (taskId: string, principal: string): Promise<{ keys: string[]; member: string; holder: string }> => {
    const [member, holder] = await Promise.all([digest(taskId), digest(principal)]);
    return {
      member,
      holder,
      keys: [`${kp}t:${member}`, `${kp}k:${holder}`, `${kp}l:${holder}`, `${kp}f:${holder}`, `${kp}all`, `${kp}heavy`],
    };
  };

  const read = async (taskId: string): Promise<{ version: string; record: TaskRecord } | undefined> => {
    const value = await link.run(READ, [`${kp}t:${await digest(taskId)}`], []);
    if (value === null) return undefined;
    if (typeof value !== 'string' || value.length <= VERSION_LENGTH || value[0] !== 'v') throw corrupt(taskId);
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

  const create = async (record: TaskRecord): Promise<void> => {
    const at = assertTaskCreateArguments(LABEL, record);
    const { taskId } = record;
    if (link.closed) throw new StoreUnavailableError({ cause: new Error('store is closed') });
    const { keys, member, holder } = await keysOf(taskId, record.principal);
    const unfinished = !isTerminalStatus(record.status);
    const value = newVersion() + JSON.stringify(record);
    const reply = await link.run(CREATE, keys, [
      value,
      at,
      unfinished ? '1' : '0',
      maxLive,
      maxKept,
      maxTasks,
      member,
      holder,
      kp,
      roomFromAtLeast(0),
    ]);
    if (reply === 'ok') return;
    if (reply === 'live') throw new TaskLimitError('live', maxLive);
    if (reply === 'kept') throw new TaskLimitError('kept', maxKept);
    if (reply === 'store') throw new TaskLimitError('store', maxTasks);
    if (reply === 'duplicate') throw new Error(`${LABEL}: create: a task with this id is already present`);
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to the task create script') });
  };

  const get = async (taskId: string): Promise<TaskRecord | undefined> => {
    if (typeof taskId !== 'string') throw new TypeError(`${LABEL}: get: taskId must be a string`);
    return (await read(taskId))?.record;
  };

  const update = (taskId: string, change: (record: TaskRecord) => TaskRecord | undefined): Promise<TaskRecord | undefined> =>
    runTaskUpdate(LABEL, taskId, change, maxUpdateAttempts, {
      read: () => read(taskId),
      write: async (current, next) => {
        const at = taskExpiresAt(next);
        if (!Number.isSafeInteger(at)) throw new TypeError(`${LABEL}: update: lastUpdatedAt + ttlMs must be a safe integer`);
        const before = current.record;
        const json = JSON.stringify(next);
        const { keys, member, holder } = await keysOf(taskId, before.principal);
        const becameFinal = !isTerminalStatus(before.status) && isTerminalStatus(next.status);
        const reply = await link.run(UPDATE, keys, [current.version, newVersion() + json, at, member, becameFinal ? '1' : '0', holder]);
        if (reply === 0) return undefined;
        if (reply === 2) return JSON.parse(json) as TaskRecord;
        if (reply !== 1) throw new StoreUnavailableError({ cause: new Error('unexpected reply to the task update script') });
        return 'conflict';
      },
    });

  return {
    create,
    get,
    update,
    client: link.client,
    keyPrefix: kp,
    close: async () => link.close(),
  };
}

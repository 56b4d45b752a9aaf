import { createHash } from 'node:crypto';
import type { ClaimResult } from '@mrtr/core';
import { MrtrError } from '@mrtr/core';
import { type BatchEntry, createBatcher, ownerValues, StoreUnavailableError } from '@mrtr/core/authoring';
import { evalScript, runBySlot } from './batching.js';
import type { RedisConnection } from './connection.js';
import { FIRST, PENDING, REPLAYED, settleFromValues } from './lost-reply.js';

/**
 * Outcome recording (`claim`, `record`) on Redis: one Lua script runs a batch of claims and records, each on its
 * id's one key (the key `consume` uses), in queue order, each with its own answer.
 *
 * Values of an id's key: a `consume` owner (22 base64url characters, no `:`); `p<m>:<fp>:<owner>` claimed by
 * fingerprint `<fp>`, no outcome yet; `d<m>:<fp>:<outcome>` recorded (`d<m>:<fp>:` = done, not kept). `<m>` is the
 * number of claims with another fingerprint so far (empty for none, then `1`, `2`); the third
 * (`MAX_FINGERPRINT_MISSES`) turns the value into `d:<fp>:`, done, not kept, recorded or not yet.
 *
 * The outcome budget (`outcomeBudgetBytes`) is counted in two keys by expiry bucket: an outcome whose id expires at
 * `E` (Redis's clock: `TIME` + `PTTL`) adds its bytes to bucket `floor(E / W)` (`W` = {@link BUCKET_MS}); the bytes
 * held are the sum of the buckets that have not ended by Redis's clock (a bucket ends at `(b + 1) × W`, after every
 * id in it has expired): a hash `…:h` (field `t` = the running total, one field per bucket) and a sorted set `…:z`
 * of the buckets (ended ones are dropped, at most 16 per call, and taken off the total). An outcome is counted
 * until its bucket ends — up to `W` after its id expires — never less. A dropped outcome (the third miss) stays
 * counted until then too.
 * - One Redis (`'direct'`): the record script checks and takes the budget itself, in the step that writes the
 *   outcome (the budget keys are two more keys of the script).
 * - A Cluster (`'lease'`): a script touches one slot, and ids spread over every slot. The namespace's budget is
 *   kept whole in the two keys (one slot, by their hash tag) as bytes *leased*: a record first learns its id's
 *   bucket (reply `n<bucket>`), leases exactly its outcome's bytes for that bucket from the budget keys (one
 *   script), then records with that lease (the script checks the id's bucket is not later than the lease's).
 *   Leased ≥ kept at every moment (a lease a record could not use, or whose reply was lost, stays counted until
 *   its bucket ends), so the outcomes held never pass the budget; a kept outcome costs three calls.
 */
const OUTCOME_SCRIPT = `
local mode = ARGV[1]
local B = tonumber(ARGV[2])
local W = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local now, total, seen
local function clock()
  if not now then local t = redis.call('TIME') now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
  return now
end
local function take(b, len)
  local h, z = KEYS[1], KEYS[2]
  if total == nil then
    local ended = redis.call('ZRANGEBYSCORE', z, '-inf', '(' .. string.format('%.0f', math.floor(clock() / W)), 'LIMIT', 0, 16)
    for _, e in ipairs(ended) do
      local bytes = tonumber(redis.call('HGET', h, e) or '0')
      redis.call('HINCRBY', h, 't', string.format('%.0f', -bytes)) redis.call('HDEL', h, e) redis.call('ZREM', z, e)
    end
    total = tonumber(redis.call('HGET', h, 't') or '0')
    seen = {}
  end
  if total + len > B then return false end
  total = total + len
  local bytes = string.format('%.0f', len)
  redis.call('HINCRBY', h, b, bytes) redis.call('HINCRBY', h, 't', bytes)
  if not seen[b] then
    seen[b] = true
    redis.call('ZADD', z, b, b)
    local top = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
    local at = string.format('%.0f', (tonumber(top[2]) + 1) * W)
    redis.call('PEXPIREAT', h, at) redis.call('PEXPIREAT', z, at)
  end
  return true
end
if mode == 'lease' then
  if take(ARGV[5], tonumber(ARGV[6])) then return 1 end
  return 0
end
local base = 0
if mode == 'd' then base = 2 end
local r = {}
for i = 1, n do
  local a = 4 + 4 * (i - 1)
  local k, fp = KEYS[base + i], ARGV[a + 2]
  local v = redis.call('GET', k)
  if ARGV[a + 1] == 'c' then
    if not v then
      redis.call('SET', k, ARGV[a + 3], 'PXAT', ARGV[a + 4]) r[i] = 'first'
    else
      local kind, m = string.match(v, '^([pd])(%d?):')
      local stop = kind and string.find(v, ':', #m + 3, true)
      if not stop then r[i] = 'replayed'
      else
        local sfp = string.sub(v, #m + 3, stop - 1)
        if sfp == fp then
          if kind == 'p' then r[i] = 'pending'
          elseif #v > stop then r[i] = '=' .. string.sub(v, stop + 1)
          else r[i] = 'replayed' end
        else
          r[i] = 'replayed'
          if not (kind == 'd' and #v == stop) then
            local misses = (tonumber(m) or 0) + 1
            if misses >= 3 then redis.call('SET', k, 'd:' .. sfp .. ':', 'KEEPTTL')
            else redis.call('SET', k, kind .. misses .. string.sub(v, #m + 2), 'KEEPTTL') end
          end
        end
      end
    end
  else
    local m = v and string.match(v, '^p(%d?):')
    local pre = m and ('p' .. m .. ':' .. fp .. ':')
    if not pre or string.sub(v, 1, #pre) ~= pre then r[i] = 0
    else
      local out, lease, kept = ARGV[a + 3], ARGV[a + 4], 2
      if #out > 0 then
        local pttl = redis.call('PTTL', k)
        if pttl > 0 then
          local b = string.format('%.0f', math.floor((clock() + pttl) / W))
          if mode == 'd' then
            if take(b, #out) then kept = 1 end
          elseif lease == '' then
            kept = 'n' .. b
          elseif tonumber(b) <= tonumber(lease) then
            kept = 1
          end
        end
        if kept ~= 1 then out = '' end
      end
      if kept == 1 or kept == 2 then redis.call('SET', k, 'd' .. m .. ':' .. fp .. ':' .. out, 'KEEPTTL') end
      r[i] = kept
    end
  end
end
return r`;
const OUTCOME_SHA = createHash('sha1').update(OUTCOME_SCRIPT).digest('hex');

/** Width of the budget's expiry buckets, in ms: an outcome is counted until at most this long after its id expires. */
export const BUCKET_MS = 60_000;

/** One claim or record waiting for its batch. */
interface Op extends BatchEntry<unknown> {
  readonly type: 'c' | 'r';
  readonly key: string;
  readonly fp: string;
  /** claim: the value it writes (`p:<fp>:<owner>`, the owner drawn when its batch is sent); record: the outcome (`''`: not kept). */
  a: string;
  /** claim: the expiry (ms); record: the bucket leased for it (`''`: none). */
  readonly b: string;
}

/** Parses a stored value: `p`/`d`, the fingerprint and the rest (owner or outcome); `undefined` for a consume's value. */
function parse(value: string): { kind: 'p' | 'd'; fp: string; rest: string } | undefined {
  const match = /^([pd])\d?:/.exec(value);
  if (match === null) return undefined;
  const head = match[0].length;
  const stop = value.indexOf(':', head);
  if (stop < 0) return undefined;
  return { kind: match[1] as 'p' | 'd', fp: value.slice(head, stop), rest: value.slice(stop + 1) };
}

/** A claim's answer from the value its key holds, as the claim script would give it to another fingerprint's owner. */
function claimFromValue(stored: string, fp: string, mine: string): ClaimResult {
  const held = parse(stored);
  const own = parse(mine);
  if (held === undefined || held.fp !== fp) return REPLAYED;
  if (held.kind === 'p') return own !== undefined && held.rest === own.rest ? FIRST : PENDING;
  return held.rest === '' ? REPLAYED : { status: 'recorded', outcome: held.rest };
}

/** Settles one op from its entry of the outcome script's reply. */
function settle(op: Op, reply: unknown): void {
  if (op.type === 'c') {
    if (reply === 'first') op.resolve(FIRST);
    else if (reply === 'pending') op.resolve(PENDING);
    else if (reply === 'replayed') op.resolve(REPLAYED);
    else if (typeof reply === 'string' && reply.length > 1 && reply.startsWith('=')) {
      op.resolve({ status: 'recorded', outcome: reply.slice(1) });
    } else op.reject(new StoreUnavailableError({ cause: new Error('unexpected reply to the claim script') }));
    return;
  }
  if (reply === 1) op.resolve(true);
  else if (reply === 0 || reply === 2) op.resolve(false);
  else if (typeof reply === 'string' && /^n-?\d+$/.test(reply)) op.resolve(reply);
  else op.reject(new StoreUnavailableError({ cause: new Error('unexpected reply to the record script') }));
}

/**
 * A batch whose reply is lost, or that failed part-way (a script is not rolled back): one `MGET` of its keys (one
 * slot; on one connection Redis answers it after the script). A claim: its own owner value → `first`; another
 * value → what the script answers on it; none → unknown. A record: its own outcome → `true`; done otherwise
 * with its fingerprint → `false`; anything else → unknown. Unknown fails closed.
 */
function resolveLostOps(connection: RedisConnection, group: Op[], original: unknown): Promise<void> {
  const failure = original instanceof StoreUnavailableError ? original : new StoreUnavailableError({ cause: original });
  return settleFromValues(connection, group, failure, (op, value) => {
    const answer = outcomeFromValue(op, value);
    if (answer === undefined) return false;
    op.resolve(answer);
    return true;
  });
}

/** What a lost op answers from its key's value (see resolveLostOps); `undefined` when that cannot tell. */
function outcomeFromValue(op: Op, value: string | null | undefined): ClaimResult | boolean | undefined {
  if (typeof value !== 'string') return undefined;
  if (op.type === 'c') return claimFromValue(value, op.fp, op.a);
  const held = parse(value);
  if (held === undefined || held.fp !== op.fp) return false;
  if (held.kind === 'd') return op.a !== '' && held.rest === op.a;
  return undefined;
}

/** The outcome ops of one store: batched like consumes (one script call per batch, per hash slot on a Cluster). */
export interface OutcomeQueue {
  claim(key: string, at: number, fp: string): Promise<ClaimResult>;
  record(key: string, fp: string, outcome: string): Promise<boolean>;
  failAll(error: unknown): void;
}

export function createOutcomeQueue(
  connection: RedisConnection,
  options: {
    readonly maxBatchSize: number;
    readonly maxQueued: number;
    readonly outcomeBudgetBytes: number;
    /** The budget's two keys (`…:h`, `…:z`), one slot. */
    readonly budgetKeys: readonly [string, string];
  },
  isClosed: () => boolean,
): OutcomeQueue {
  const { maxBatchSize, maxQueued, outcomeBudgetBytes, budgetKeys } = options;
  const isCluster = (connection.client as { isCluster?: unknown }).isCluster === true;
  const mode = isCluster ? 'l' : 'd';
  const head = [mode, outcomeBudgetBytes, BUCKET_MS];

  const sendGroup = async (group: Op[]): Promise<void> => {
    const keys = isCluster ? group.map((op) => op.key) : [budgetKeys[0], budgetKeys[1], ...group.map((op) => op.key)];
    const args: (string | number)[] = [...keys, ...head, group.length];
    // One CSPRNG call per batch: each claim's owner value, known only to it (see ownerValues).
    const owners = ownerValues(group.length);
    group.forEach((op, i) => {
      if (op.type === 'c') op.a = `p:${op.fp}:${owners[i]}`;
      args.push(op.type, op.fp, op.a, op.b);
    });
    let reply: unknown;
    try {
      reply = await evalScript(connection, OUTCOME_SCRIPT, OUTCOME_SHA, args, keys.length);
    } catch (error) {
      // Never sent: nothing ran. Anything else (a timeout, a lost connection, an error part-way) is read back.
      if (MrtrError.is(error) || (error instanceof Error && error.message.includes("Stream isn't writeable"))) {
        const failure = error instanceof StoreUnavailableError ? error : new StoreUnavailableError({ cause: error });
        for (const op of group) op.reject(failure);
        return;
      }
      return resolveLostOps(connection, group, error);
    }
    if (!Array.isArray(reply) || reply.length !== group.length) {
      return resolveLostOps(connection, group, new Error('unexpected reply to the outcome script'));
    }
    group.forEach((op, i) => {
      settle(op, reply[i]);
    });
  };

  const run = (batch: Op[]): Promise<void> => runBySlot(batch, isCluster, isClosed, sendGroup);

  const batcher = createBatcher<Op, unknown>({
    maxBatchSize,
    maxQueued,
    maxInFlight: 2,
    runLoneAtOnce: true,
    run,
    batchError: (error) => (MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error })),
  });
  const add = (type: 'c' | 'r', key: string, fp: string, a: string, b: string): Promise<unknown> =>
    batcher.add((resolve, reject) => ({ type, key, fp, a, b, resolve, reject }));

  /** Cluster: leases `bytes` for `bucket` from the namespace's budget; a lost or failed reply is no lease (over-counted at most). */
  const lease = async (bucket: string, bytes: number): Promise<boolean> => {
    try {
      const reply = await evalScript(
        connection,
        OUTCOME_SCRIPT,
        OUTCOME_SHA,
        [budgetKeys[0], budgetKeys[1], 'lease', outcomeBudgetBytes, BUCKET_MS, 0, bucket, bytes],
        2,
      );
      return reply === 1;
    } catch {
      return false;
    }
  };

  const claim = (key: string, at: number, fp: string): Promise<ClaimResult> => add('c', key, fp, '', String(at)) as Promise<ClaimResult>;

  const record = (key: string, fp: string, outcome: string): Promise<boolean> =>
    add('r', key, fp, outcome, '').then((first) => (typeof first === 'boolean' ? first : withLease(key, fp, outcome, first as string)));

  /** A Cluster: the script named the id's bucket (`n<bucket>`); lease the bytes, then record with the lease. */
  const withLease = async (key: string, fp: string, outcome: string, need: string): Promise<boolean> => {
    const bucket = need.slice(1);
    const leased = outcome !== '' && (await lease(bucket, Buffer.byteLength(outcome, 'utf8')));
    const second = await add('r', key, fp, leased ? outcome : '', leased ? bucket : '');
    if (typeof second === 'boolean') return second;
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to the record script') });
  };

  return { claim, record, failAll: (error) => batcher.failAll(() => error) };
}

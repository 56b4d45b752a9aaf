import { createHash } from 'node:crypto';
import { MrtrError } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { type BatchEntry, type ClaimResult, createBatcher, ownerValues } from '@mrtr/core/store';
import { evalScript, runBySlot } from './batching.js';
import type { RedisConnection } from './connection.js';
import { expiredError, ledgerLostError } from './scripts.js';
import { FIRST, PENDING, REPLAYED, settleFromValues } from './lost-reply.js';

/**
 * Outcome recording (`claim`, `record`) on Redis: one Lua script runs a batch of claims and records, each on its
 * id's one key (the key `consume` uses), in queue order, each with its own answer.
 *
 * Values of an id's key (`<m>`: misses, below; `<fp>`: the fingerprint, `<owner>`: base64url, neither holds `:`):
 * - a `consume` owner (22 base64url characters, no `:`);
 * - `p<m>:<fp>:<owner>`: claimed without an owner of the caller's (`<owner>` drawn by the store), no outcome yet, no
 *   lease (never lapses);
 * - `L<m>:<fp>:<owner>:<fence>:<till>`: claimed by the caller's `owner` (or taken over by a reclaim), no outcome yet;
 *   its lease runs until `<till>` (epoch ms, Redis's clock; empty: no lease). `<fence>`: 0, one more per reclaim;
 * - `d<m>:<fp>:<outcome>`: recorded without an owner (`d<m>:<fp>:` = done, not kept);
 * - `R<m>:<fp>:<owner>:<outcome>`: recorded by `owner`, so that its second `record` answers as its first (`R3:` with an
 *   empty outcome: it was kept, then dropped by the third miss).
 * `<m>` is the number of claims with another fingerprint so far (empty for none, then `1`, `2`); the third
 * (`MAX_FINGERPRINT_MISSES`) makes the value done, not kept (`d:<fp>:`, or `R:<fp>:<owner>:` / `R3:…` for an owner's),
 * recorded or not yet. Every claim reads Redis's `TIME`: an `expiresAtMs` at or before it is refused (nothing written),
 * a lease is judged by it, and the ledger epoch (see `epoch.ts`, a key of the same slot) is read or written in the same
 * step (and answered after the ops' answers, for a Cluster's master key).
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
local now, total, seen, owned
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
local base, epoch, es = 1, nil, nil
if mode == 'd' then base = 3 end
local function ledger()
  if not epoch then
    es = redis.call('GET', KEYS[base])
    if not es then es = string.format('%.0f', clock()) redis.call('SET', KEYS[base], es) end
    epoch = tonumber(es)
  end
  return epoch
end
ledger()
local function claim(k, v, fp, owner, at, exp, leaseMs, flags, minted)
  if minted ~= '' and tonumber(minted) < ledger() then return 'lost' end
  if tonumber(exp) <= clock() then return 'expired' end
  local till = ''
  if leaseMs ~= '' then till = string.format('%.0f', clock() + tonumber(leaseMs)) end
  owned = string.find(flags, 'o', 1, true)
  local function mine(m, fence)
    if owned or fence > 0 then return 'L' .. m .. ':' .. fp .. ':' .. owner .. ':' .. fence .. ':' .. till end
    return 'p' .. m .. ':' .. fp .. ':' .. owner
  end
  if not v then redis.call('SET', k, mine('', 0), 'PXAT', at) return 'f0' end
  local kind, m = string.match(v, '^([pdLR])(%d?):')
  local stop = kind and string.find(v, ':', #m + 3, true)
  if not stop then return 'replayed' end
  local sfp, rest = string.sub(v, #m + 3, stop - 1), string.sub(v, stop + 1)
  if sfp == fp then
    if kind == 'p' then return 'p' end
    if kind == 'd' then if #rest > 0 then return '=' .. rest end return 'replayed' end
    local o, tail = string.match(rest, '^([^:]*):(.*)$')
    if kind == 'R' then if #tail > 0 then return '=' .. tail end return 'replayed' end
    local fence, held = string.match(tail, '^(%d+):(%d*)$')
    if o == owner then return 'f' .. fence end
    if held == '' then return 'p' end
    if tonumber(held) > clock() then return 'p' .. string.format('%.0f', tonumber(held) - clock()) end
    if not string.find(flags, 'r', 1, true) then return 'u' end
    redis.call('SET', k, mine(m, tonumber(fence) + 1), 'KEEPTTL')
    return 'f' .. (tonumber(fence) + 1)
  end
  local o, tail = string.match(rest, '^([^:]*):(.*)$')
  local done = (kind == 'd' and #rest == 0) or (kind == 'R' and #tail == 0)
  if not done then
    local misses = (tonumber(m) or 0) + 1
    if misses < 3 then redis.call('SET', k, kind .. misses .. string.sub(v, #m + 2), 'KEEPTTL')
    elseif kind == 'p' or kind == 'd' then redis.call('SET', k, 'd:' .. sfp .. ':', 'KEEPTTL')
    elseif kind == 'L' then redis.call('SET', k, 'R:' .. sfp .. ':' .. o .. ':', 'KEEPTTL')
    else redis.call('SET', k, 'R3:' .. sfp .. ':' .. o .. ':', 'KEEPTTL') end
  end
  return 'replayed'
end
local function record(k, v, fp, out, lease, owner)
  if not v then return 0 end
  local kind, m = string.match(v, '^([pdLR])(%d?):')
  local pre = kind and (kind .. m .. ':' .. fp .. ':')
  if not pre or string.sub(v, 1, #pre) ~= pre then return 0 end
  local o, tail = string.match(string.sub(v, #pre + 1), '^([^:]*):?(.*)$')
  if kind == 'd' then return 0 end
  if kind == 'R' then
    if owner ~= '' and o == owner and (#tail > 0 or m == '3') then return 1 end
    return 0
  end
  if kind == 'L' and o ~= owner then return 0 end
  local kept = 2
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
  if kept == 1 or kept == 2 then
    if owner ~= '' then redis.call('SET', k, 'R' .. m .. ':' .. fp .. ':' .. owner .. ':' .. out, 'KEEPTTL')
    else redis.call('SET', k, 'd' .. m .. ':' .. fp .. ':' .. out, 'KEEPTTL') end
  end
  return kept
end
local r = {}
for i = 1, n do
  local a = 4 + 8 * (i - 1)
  local k = KEYS[base + i]
  local v = redis.call('GET', k)
  if ARGV[a + 1] == 'c' then
    r[i] = claim(k, v, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8])
  else
    r[i] = record(k, v, ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
  end
end
r[n + 1] = es
return r`;
const OUTCOME_SHA = createHash('sha1').update(OUTCOME_SCRIPT).digest('hex');

/** Width of the budget's expiry buckets, in ms: an outcome is counted until at most this long after its id expires. */
export const BUCKET_MS = 60_000;

/** One claim or record waiting for its batch. */
interface Op extends BatchEntry<unknown> {
  readonly type: 'c' | 'r';
  readonly key: string;
  readonly fp: string;
  /** claim: its owner (the caller's, or drawn when its batch is sent); record: the outcome (`''`: not kept). */
  a: string;
  /** claim: the key's expiry (ms); record: the bucket leased for it (`''`: none). */
  readonly b: string;
  /** claim: `expiresAtMs`, rounded up; record: the owner (`''`: none). */
  readonly c: string;
  /** claim: the lease (ms, `''`: none). */
  readonly d: string;
  /** claim: flags, `o` the owner is the caller's, `r` reclaim a lapsed lease. */
  readonly e: string;
  /** claim: `mintedAtMs` (`''`: none). */
  readonly f: string;
}

/** What a claim takes besides its key and fingerprint. */
export interface ClaimArgs {
  /** The key's expiry (ms): `expiresAtMs` plus the extra retention. */
  readonly at: number;
  /** `expiresAtMs`, rounded up. */
  readonly exp: number;
  readonly owner: string | undefined;
  readonly leaseMs: number | undefined;
  readonly reclaim: boolean;
  readonly minted: number | undefined;
}

/** A stored value: its kind, fingerprint, misses, owner (p, L, R), fence and lease end (L), outcome (d, R). */
interface Held {
  readonly kind: 'p' | 'd' | 'L' | 'R';
  readonly misses: string;
  readonly fp: string;
  readonly owner: string;
  readonly fence: number;
  readonly till: number | undefined;
  readonly outcome: string;
}

/** Parses a stored value (see the value formats above); `undefined` for a consume's value. */
function parse(value: string): Held | undefined {
  const match = /^([pdLR])(\d?):([^:]*):/.exec(value);
  if (match === null) return undefined;
  const kind = match[1] as Held['kind'];
  const rest = value.slice(match[0].length);
  const base = { kind, misses: match[2] as string, fp: match[3] as string, owner: '', fence: 0, till: undefined, outcome: '' };
  if (kind === 'd') return { ...base, outcome: rest };
  const colon = rest.indexOf(':');
  const owner = colon < 0 ? rest : rest.slice(0, colon);
  const tail = colon < 0 ? '' : rest.slice(colon + 1);
  if (kind === 'p') return { ...base, owner };
  if (kind === 'R') return { ...base, owner, outcome: tail };
  const lease = /^(\d+):(\d*)$/.exec(tail);
  if (lease === null) return undefined;
  return { ...base, owner, fence: Number(lease[1]), till: lease[2] === '' ? undefined : Number(lease[2]) };
}

const first = (fence: number): ClaimResult => (fence === 0 ? FIRST : Object.freeze({ status: 'first', fence }));
const UNKNOWN: ClaimResult = Object.freeze({ status: 'unknown' });

/**
 * A claim's answer from the value its key holds and Redis's time, as the claim script would give it (its own owner's
 * unrecorded claim: `first`); `undefined` when that cannot tell (a lapsed lease this claim may have reclaimed).
 */
function claimFromValue(stored: string, op: Op, now: number): ClaimResult | undefined {
  const held = parse(stored);
  if (held === undefined || held.fp !== op.fp) return REPLAYED;
  if (held.kind === 'd' || held.kind === 'R') return held.outcome === '' ? REPLAYED : { status: 'recorded', outcome: held.outcome };
  if (held.owner === op.a) return first(held.fence);
  if (held.kind === 'p' || held.till === undefined) return PENDING;
  if (held.till > now) return { status: 'pending', leaseLeftMs: held.till - now };
  return op.e.includes('r') ? undefined : UNKNOWN;
}

/** Settles one op from its entry of the outcome script's reply. */
function settle(op: Op, reply: unknown): void {
  if (op.type === 'c') {
    const answer = typeof reply === 'string' ? claimAnswer(reply) : undefined;
    if (answer instanceof Error) op.reject(answer);
    else if (answer !== undefined) op.resolve(answer);
    else op.reject(new StoreUnavailableError({ cause: new Error('unexpected reply to the claim script') }));
    return;
  }
  if (reply === 1) op.resolve(true);
  else if (reply === 0 || reply === 2) op.resolve(false);
  else if (typeof reply === 'string' && /^n-?\d+$/.test(reply)) op.resolve(reply);
  else op.reject(new StoreUnavailableError({ cause: new Error('unexpected reply to the record script') }));
}

/** The claim script's answer (see the script), a refusal as an error, `undefined` when it is not one. */
function claimAnswer(reply: string): ClaimResult | Error | undefined {
  if (reply === 'replayed') return REPLAYED;
  if (reply === 'u') return UNKNOWN;
  if (reply === 'p') return PENDING;
  if (reply === 'expired') return expiredError();
  if (reply === 'lost') return ledgerLostError();
  if (reply.length > 1 && reply.startsWith('=')) return { status: 'recorded', outcome: reply.slice(1) };
  const number = /^([fp])(\d+)$/.exec(reply);
  if (number === null) return undefined;
  const value = Number(number[2]);
  return number[1] === 'f' ? first(value) : { status: 'pending', leaseLeftMs: value };
}

/**
 * A batch whose reply is lost, or that failed part-way (a script is not rolled back): one read of its keys and of
 * Redis's clock (a read-only script, one slot; on one connection Redis answers it after the batch). A claim: its own
 * owner's unrecorded claim → `first` (with its fence); another value → what the script answers on it; none → unknown.
 * A record: its own outcome (or, with an owner, its own record) → `true`; done otherwise with its fingerprint →
 * `false`; anything else → unknown. Unknown fails closed.
 */
function resolveLostOps(connection: RedisConnection, group: Op[], original: unknown): Promise<void> {
  const failure = original instanceof StoreUnavailableError ? original : new StoreUnavailableError({ cause: original });
  let now = 0;
  const read = async (keys: string[]): Promise<(string | null)[]> => {
    const reply = (await evalScript(connection, PEEK_SCRIPT, PEEK_SHA, keys, keys.length)) as [number, ...(string | null)[]];
    now = Number(reply[0]);
    return reply.slice(1) as (string | null)[];
  };
  return settleFromValues(
    connection,
    group,
    failure,
    (op, value) => {
      const answer = outcomeFromValue(op, value, now);
      if (answer === undefined) return false;
      op.resolve(answer);
      return true;
    },
    read,
  );
}

/** Redis's clock (ms), then the value of each key (nil when none). */
const PEEK_SCRIPT =
  "local t = redis.call('TIME') local r = { tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) } " +
  "for i = 1, #KEYS do r[i + 1] = redis.call('GET', KEYS[i]) end return r";
const PEEK_SHA = createHash('sha1').update(PEEK_SCRIPT).digest('hex');

/** What a lost op answers from its key's value (see resolveLostOps); `undefined` when that cannot tell. */
function outcomeFromValue(op: Op, value: string | null | undefined, now: number): ClaimResult | boolean | undefined {
  if (typeof value !== 'string') return undefined;
  if (op.type === 'c') return claimFromValue(value, op, now);
  const held = parse(value);
  if (held === undefined || held.fp !== op.fp) return false;
  if (held.kind === 'd') return op.a !== '' && held.outcome === op.a;
  if (held.kind === 'R') return op.c !== '' && held.owner === op.c && (held.outcome !== '' || held.misses === '3');
  return undefined;
}

/** The outcome ops of one store: batched like consumes (one script call per batch, per hash slot on a Cluster). */
export interface OutcomeQueue {
  claim(key: string, fp: string, args: ClaimArgs): Promise<ClaimResult>;
  record(key: string, fp: string, outcome: string, owner: string | undefined): Promise<boolean>;
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
    /** The epoch key of the ledger for a key (one per hash slot on a Cluster: see `epoch.ts`). */
    epochKey(key: string): string;
    /** The epoch the script answered for its slot (see `EpochKeeper.saw`); settles before the ops are answered. */
    sawEpoch(epoch: unknown): Promise<void>;
  },
  isClosed: () => boolean,
): OutcomeQueue {
  const { maxBatchSize, maxQueued, outcomeBudgetBytes, budgetKeys, epochKey, sawEpoch } = options;
  const isCluster = (connection.client as { isCluster?: unknown }).isCluster === true;
  const mode = isCluster ? 'l' : 'd';
  const head = [mode, outcomeBudgetBytes, BUCKET_MS];

  const sendGroup = async (group: Op[]): Promise<void> => {
    const ids = group.map((op) => op.key);
    const epoch = epochKey(ids[0] as string);
    const keys = isCluster ? [epoch, ...ids] : [budgetKeys[0], budgetKeys[1], epoch, ...ids];
    const args: (string | number)[] = [...keys, ...head, group.length];
    // One CSPRNG call per batch: each owner-less claim's owner value, known only to it (see ownerValues).
    const owners = ownerValues(group.length);
    group.forEach((op, i) => {
      if (op.type === 'c' && op.a === '') op.a = owners[i] as string;
      args.push(op.type, op.fp, op.a, op.b, op.c, op.d, op.e, op.f);
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
    if (!Array.isArray(reply) || reply.length !== group.length + 1) {
      return resolveLostOps(connection, group, new Error('unexpected reply to the outcome script'));
    }
    await sawEpoch(reply[group.length]);
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
  const add = (fields: Omit<Op, 'resolve' | 'reject'>): Promise<unknown> =>
    batcher.add((resolve, reject) => ({ ...fields, resolve, reject }));

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

  const claim = (key: string, fp: string, c: ClaimArgs): Promise<ClaimResult> =>
    add({
      type: 'c',
      key,
      fp,
      a: c.owner ?? '',
      b: String(c.at),
      c: String(c.exp),
      d: c.owner === undefined || c.leaseMs === undefined ? '' : String(c.leaseMs),
      e: `${c.owner === undefined ? '' : 'o'}${c.reclaim ? 'r' : ''}`,
      f: c.minted === undefined ? '' : String(c.minted),
    }) as Promise<ClaimResult>;

  const recordOp = (key: string, fp: string, outcome: string, bucket: string, owner: string): Promise<unknown> =>
    add({ type: 'r', key, fp, a: outcome, b: bucket, c: owner, d: '', e: '', f: '' });

  const record = (key: string, fp: string, outcome: string, owner: string | undefined): Promise<boolean> =>
    recordOp(key, fp, outcome, '', owner ?? '').then((answer) =>
      typeof answer === 'boolean' ? answer : withLease(key, fp, outcome, answer as string, owner ?? ''),
    );

  /** A Cluster: the script named the id's bucket (`n<bucket>`); lease the bytes, then record with the lease. */
  const withLease = async (key: string, fp: string, outcome: string, need: string, owner: string): Promise<boolean> => {
    const bucket = need.slice(1);
    const leased = outcome !== '' && (await lease(bucket, Buffer.byteLength(outcome, 'utf8')));
    const second = await recordOp(key, fp, leased ? outcome : '', leased ? bucket : '', owner);
    if (typeof second === 'boolean') return second;
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to the record script') });
  };

  return { claim, record, failAll: (error) => batcher.failAll(() => error) };
}

import { type AttributeValue, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { ReplayStore } from '@mrtr/core';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { LedgerLostError, StateExpiredError, StoreUnavailableError } from '@mrtr/core/errors';
import { intOption } from '@mrtr/core/options';
import {
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  checkLeaseMs,
  checkOwner,
  fullStoreCapabilities,
  parseOutcomeStoreLimits,
  type ClaimOptions,
  type ClaimResult,
  type KeyFingerprint,
  type OutcomeStoreLimits,
  type RecordingReplayStore,
  type SpendOptions,
} from '@mrtr/core/store';
import type { ClockOffset } from './clock.js';
import { keyFingerprintsOf } from './keys.js';
import { epochOf, reclaim, releaseItem, renewItem, twice, unrecordedStatus } from './leases.js';
import type { BucketCounter, Table } from './table.js';
import { bucketCounter, type DynamoConnectionOptions, hash, num, openTable, readItem, str, ttlOf } from './table.js';
import { CONNECTION_OPTIONS } from './table.js';

// One item per id, `r#<namespace>#<H(id)>`: `exp` (ms), `ttl` (s, for DynamoDB's TTL), `o` (an owner value only the
// call that wrote the item knows), `k` (`c` consume, `p` claimed, `d` recorded, `x` done, not kept), and for a claim
// `fp`, `m` (misses), `out`, `ob` (its bytes), `w` (present: claimed with an owner, so only that owner records). The outcome budget is the bucket counter `b#<namespace>#budget`.

const LABEL = 'createDynamoStore';
const MAX_FINGERPRINT_LENGTH = 256;
/** Buckets of the outcome budget: an outcome counts until the end of the 5-minute bucket of its id's expiry. */
const BUDGET_BUCKET_MS = 300_000;
/** An allowance is taken in a bucket at most this many ahead of the current one (ids expiring later take exact bytes). */
const ALLOWANCE_BUCKETS_AHEAD = 4;
/** Largest allowance chunk, and its share of the budget (1/4096 of it: 16 KiB of the default 64 MiB). */
const MAX_ALLOWANCE_CHUNK = 16_384;
const ALLOWANCE_SHARE = 4096;

/** Options of {@link createDynamoStore}: the table, the outcome bounds and these. */
export interface DynamoStoreOptions extends DynamoConnectionOptions, OutcomeStoreLimits {
  /**
   * How far apart the instances sharing this ledger may read DynamoDB's clock, in ms: every id is kept that much past
   * its expiry, because each instance puts its own reading of that clock (`now` plus the offset it measured from the
   * `Date` headers, within about a second) into the conditions (DynamoDB's have no clock).
   * @default 5000
   */
  clockSkewMs?: number | undefined;
}

/** A {@link ReplayStore} on DynamoDB. */
export interface DynamoReplayStore extends RecordingReplayStore {
  /**
   * DynamoDB's clock, as this store reads it: `now()` plus the offset measured from the `Date` headers of its replies
   * (`clockOffset()`), after one cheap request of its own (an eventually consistent `GetItem`).
   */
  time(): Promise<number>;
  renew(id: string, owner: string, leaseMs: number): Promise<boolean>;
  release(id: string, owner: string): Promise<boolean>;
  /**
   * The namespace's epoch item (`e#<ns>#epoch`, ms by the measured service clock): read, written with a conditional
   * put when missing, read again. One item per namespace, so every id shares it; an existing epoch is never moved.
   */
  ledgerEpoch(): Promise<number>;
  /**
   * DynamoDB's clock as measured from the `Date` headers of this store's replies (whole seconds, timed by `now`):
   * add `offsetMs` to `now()` to read it, within ± `uncertaintyMs`. `undefined` before the first reply.
   */
  clockOffset(): ClockOffset | undefined;
  /**
   * The fleet check's exchange (see `ReplayStore.keyFingerprints`): one item per namespace (`f#<ns>#keys`), written
   * with a put conditioned on its version, judged by the measured service clock.
   */
  keyFingerprints(offer: readonly KeyFingerprint[]): Promise<readonly KeyFingerprint[]>;
  /** How long past its expiry an id is kept (the `clockSkewMs` option). */
  readonly clockSkewMs: number;
  readonly namespace: string;
  readonly tableName: string;
  /** Stops the store (later calls reject `ERR_STORE_UNAVAILABLE`); the client stays open for its owner. */
  close(): Promise<void>;
}

const REPLAYED: ClaimResult = Object.freeze({ status: 'replayed' });

const checkId = (method: string, id: unknown, expiresAtMs: unknown): Error | undefined => {
  if (typeof id !== 'string' || id.length === 0) return new TypeError(`${method}: id must be a non-empty string`);
  if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs))
    return new TypeError(`${method}: expiresAtMs must be a finite number`);
  return undefined;
};
const checkFingerprint = (method: string, fingerprint: unknown): Error | undefined => {
  if (typeof fingerprint !== 'string' || fingerprint.length === 0)
    return new TypeError(`${method}: fingerprint must be a non-empty string`);
  if (fingerprint.length > MAX_FINGERPRINT_LENGTH) {
    return new RangeError(`${method}: fingerprint must be at most ${MAX_FINGERPRINT_LENGTH} characters`);
  }
  return undefined;
};
const utf8Bytes = (outcome: string): number => new TextEncoder().encode(outcome).length;

type Key = Record<string, AttributeValue>;
type Item = Record<string, AttributeValue>;
const idKey = (table: Table, id: string): Key => table.key('r', hash(id));

/** Writes the id if it is free (absent or expired by this store's clock): true when this call wrote it. */
async function putIfFree(table: Table, key: Key, item: Record<string, AttributeValue>, at: number): Promise<boolean> {
  const reply = await table.send(
    new PutItemCommand({
      TableName: table.tableName,
      Item: { ...key, ...item },
      ConditionExpression: 'attribute_not_exists(pk) OR #exp < :now',
      ExpressionAttributeNames: { '#exp': 'exp' },
      ExpressionAttributeValues: { ':now': { N: String(at) } },
    }),
  );
  return reply !== 'condition';
}

/** The live item of an id (`undefined`: absent or expired), read from the leader. */
async function liveItem(table: Table, key: Key, at: number): Promise<Record<string, AttributeValue> | undefined> {
  const item = await readItem(table, key);
  if (item === undefined) return undefined;
  const exp = num(item.exp);
  if (exp === undefined || str(item.o) === undefined || str(item.k) === undefined) {
    throw new StoreUnavailableError({ cause: new Error(`${LABEL}: an item of the ledger is not one this store wrote`) });
  }
  return exp < at ? undefined : item;
}

/** Counts a miss on the item of `owner`; the MAX_FINGERPRINT_MISSES-th marks it done, not kept (and gives back its bytes). */
async function countMiss(table: Table, budget: BucketCounter, key: Key, owner: string): Promise<void> {
  const counted = await table.send<{ Attributes?: Record<string, AttributeValue> }>(
    new UpdateItemCommand({
      TableName: table.tableName,
      Key: key,
      UpdateExpression: 'ADD #m :one',
      ConditionExpression: '#o = :o AND (#k = :p OR #k = :d)',
      ExpressionAttributeNames: { '#m': 'm', '#o': 'o', '#k': 'k' },
      ExpressionAttributeValues: { ':one': { N: '1' }, ':o': { S: owner }, ':p': { S: 'p' }, ':d': { S: 'd' } },
      ReturnValues: 'ALL_NEW',
    }),
  );
  if (counted === 'condition' || (num(counted.Attributes?.m) ?? 0) < MAX_FINGERPRINT_MISSES) return;
  const dropped = await table.send<{ Attributes?: Record<string, AttributeValue> }>(
    new UpdateItemCommand({
      TableName: table.tableName,
      Key: key,
      UpdateExpression: 'SET #k = :x REMOVE #out, #ob, #bk',
      ConditionExpression: '#o = :o AND (#k = :p OR #k = :d)',
      ExpressionAttributeNames: { '#k': 'k', '#o': 'o', '#out': 'out', '#ob': 'ob', '#bk': 'bk' },
      ExpressionAttributeValues: { ':x': { S: 'x' }, ':o': { S: owner }, ':p': { S: 'p' }, ':d': { S: 'd' } },
      ReturnValues: 'ALL_OLD',
    }),
  );
  // Exactly one drop succeeds (the condition), and it alone gives the recorded bytes back.
  if (dropped !== 'condition' && str(dropped.Attributes?.k) === 'd') {
    // Bytes taken from an allowance were counted in its bucket (`bk`), the others in the bucket of the expiry.
    const bk = num(dropped.Attributes?.bk);
    const counted = bk === undefined ? (num(dropped.Attributes?.exp) ?? 0) : bk * BUDGET_BUCKET_MS;
    await table.release('outcome bytes', () => budget.give(num(dropped.Attributes?.ob) ?? 0, counted));
  }
}

/**
 * The condition and values of a record of `fingerprint` at `at`: the claim unrecorded and live, and with `by` (the
 * record's owner) held by it, without one claimed without owner; `by` is then written as `ro`, with `rk` (1: kept), so
 * that its second record answers as the first.
 */
function recordWrite(fingerprint: string, at: number, by: string | null, kept: boolean) {
  return {
    condition: `#k = :p AND #fp = :fp AND #exp >= :now AND ${by === null ? 'attribute_not_exists(#w)' : '#o = :by'}`,
    set: by === null ? '' : ', #ro = :by, #rk = :rk',
    names: { '#k': 'k', '#fp': 'fp', '#exp': 'exp', ...(by === null ? { '#w': 'w' } : { '#o': 'o', '#ro': 'ro', '#rk': 'rk' }) },
    values: {
      ':p': { S: 'p' },
      ':fp': { S: fingerprint },
      ':now': { N: String(at) },
      ...(by === null ? {} : { ':by': { S: by }, ':rk': { N: kept ? '1' : '0' } }),
    } as Record<string, AttributeValue>,
  };
}

/** Marks a pending claim of `fingerprint` done, not kept. */
function markUnkept(table: Table, key: Key, fingerprint: string, at: number, by: string | null): Promise<unknown> {
  const w = recordWrite(fingerprint, at, by, false);
  return twice(() =>
    table.send(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: `SET #k = :x${w.set}`,
        ConditionExpression: w.condition,
        ExpressionAttributeNames: w.names,
        ExpressionAttributeValues: { ...w.values, ':x': { S: 'x' } },
      }),
    ),
  );
}

/**
 * Writes the outcome of a pending claim of `fingerprint` in one `UpdateItem`, conditioned on the claim (unrecorded,
 * live, held by `by` or without owner). With `allowance`, its bytes were already taken from the allowance of bucket
 * `allowance.bucket`: the write is also conditioned on the id's expiry ending before that bucket does (so the bytes
 * count at least until the id expires) and writes that bucket as `bk` and `rt`, a token of this call, so that when
 * the SDK resent the update after a lost reply the read that follows knows the write as its own. Without, the bytes
 * were taken exactly, in the bucket of the expiry. `true`: written; otherwise the item as read afterwards
 * (`undefined`: absent or expired).
 */
async function writeOutcome(
  table: Table,
  key: Key,
  record: { fingerprint: string; outcome: string; size: number; at: number; by: string | null },
  allowance?: { token: string; bucket: number },
): Promise<true | { item: Item | undefined }> {
  const { fingerprint, outcome, size, at, by } = record;
  const w = recordWrite(fingerprint, at, by, true);
  const names: Record<string, string> = { ...w.names, '#out': 'out', '#ob': 'ob' };
  const values: Record<string, AttributeValue> = { ...w.values, ':d': { S: 'd' }, ':out': { S: outcome }, ':ob': { N: String(size) } };
  let set = '';
  let condition = w.condition;
  if (allowance !== undefined) {
    set = ', #bk = :bk, #rt = :rt';
    condition += ' AND #exp < :end';
    Object.assign(names, { '#bk': 'bk', '#rt': 'rt' });
    Object.assign(values, {
      ':bk': { N: String(allowance.bucket) },
      ':rt': { S: allowance.token },
      ':end': { N: String((allowance.bucket + 1) * BUDGET_BUCKET_MS) },
    });
  }
  const written = await twice(() =>
    table.send(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: `SET #k = :d, #out = :out, #ob = :ob${set}${w.set}`,
        ConditionExpression: condition,
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
      }),
    ),
  );
  if (written !== 'condition') return true;
  return { item: await liveItem(table, key, at) };
}

/** True when `item` is the record this call wrote: done, with its fingerprint, outcome and claim owner. */
function isOwnRecord(item: Item | undefined, fingerprint: string, outcome: string, owner: string): boolean {
  return item !== undefined && str(item.k) === 'd' && str(item.fp) === fingerprint && str(item.out) === outcome && str(item.o) === owner;
}

interface Context {
  table: Table;
  budget: BucketCounter;
  /** Bytes one reservation of the allowance takes (0: every record takes its bytes exactly). */
  chunk: number;
  allowance: Allowance | undefined;
  /** The reservation in flight, shared by the records that wait for it. */
  reserving: { bucket: number; done: Promise<boolean> } | undefined;
  skewMs: number;
  maxOutcomeBytes: number;
  outcomeBudgetBytes: number;
  /** Runs a spend alongside the epoch check (see {@link createDynamoStore}). */
  withEpoch<T>(mintedAtMs: number | undefined, work: () => Promise<T>): Promise<T>;
  open(): void;
}

const newOwner = (): string => base64urlEncode(randomBytes(16));
const firstOf = (item: Item): ClaimResult => ({ status: 'first', fence: num(item.f) ?? 0 });
const checkMinted = (method: string, mintedAtMs: unknown): Error | undefined =>
  mintedAtMs === undefined || (typeof mintedAtMs === 'number' && Number.isFinite(mintedAtMs))
    ? undefined
    : new TypeError(`${method}: mintedAtMs must be a finite number`);

/** The item a spend writes: kept `skewMs` past its expiry, with its owner (and for a claim fingerprint, fence, lease). */
function spendItem(
  ctx: Context,
  expiresAtMs: number,
  owner: string,
  claim?: { fingerprint: string; leaseMs: number | null; owned: boolean },
): Item {
  const exp = Math.ceil(expiresAtMs) + ctx.skewMs;
  const item: Item = { exp: { N: String(exp) }, ttl: { N: ttlOf(exp) }, o: { S: owner }, k: { S: claim ? 'p' : 'c' } };
  if (claim === undefined) return item;
  Object.assign(item, { fp: { S: claim.fingerprint }, m: { N: '0' }, f: { N: '0' } });
  if (claim.owned) item.w = { N: '1' };
  if (claim.leaseMs !== null) item.le = { N: String(Math.ceil(ctx.table.serviceNow() + claim.leaseMs)) };
  return item;
}

/**
 * Refuses an expiry at or before the service's clock (measured first when this store has no reply yet), before
 * anything is written: `ERR_STATE_EXPIRED`, whether the id is free or held.
 */
async function refuseExpired(table: Table, expiresAtMs: number): Promise<void> {
  await table.measure(false);
  liveAt(table, expiresAtMs);
}

/**
 * The service's clock now, for the conditions of a write of `expiresAtMs`: `ERR_STATE_EXPIRED` when it has passed it
 * (checked again after the epoch read, before the write).
 */
function liveAt(table: Table, expiresAtMs: number): number {
  const at = table.serviceNow();
  if (expiresAtMs <= at) throw new StateExpiredError();
  return at;
}

function consumeOp(ctx: Context) {
  return async (id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean> => {
    const misuse = checkId('consume', id, expiresAtMs) ?? checkMinted('consume', options?.mintedAtMs);
    if (misuse !== undefined) throw misuse;
    ctx.open();
    const { table } = ctx;
    await refuseExpired(table, expiresAtMs);
    return ctx.withEpoch(options?.mintedAtMs, async () => {
      const at = liveAt(table, expiresAtMs);
      const key = idKey(table, id);
      const owner = newOwner();
      if (await putIfFree(table, key, spendItem(ctx, expiresAtMs, owner), at)) return true;
      // Held: by someone else, or by this very call (the SDK retried a put whose reply was lost).
      const item = await liveItem(table, key, at);
      if (item === undefined) throw new StoreUnavailableError({ cause: new Error('the id was held, then gone: ask again') });
      return str(item.o) === owner;
    });
  };
}

/** How a live item answers a claim by `owner` with `fingerprint`; a lapsed lease is taken over once when `take`. */
async function heldStatus(
  ctx: Context,
  key: Key,
  held: Item,
  claim: { owner: string; fingerprint: string; take: boolean; leaseMs: number | null },
): Promise<ClaimResult> {
  const { table, budget } = ctx;
  const kind = str(held.k);
  if (str(held.o) === claim.owner) return kind === 'p' ? firstOf(held) : REPLAYED;
  if (kind !== 'p' && kind !== 'd') return REPLAYED;
  if (str(held.fp) !== claim.fingerprint) {
    await countMiss(table, budget, key, str(held.o) as string);
    return REPLAYED;
  }
  if (kind === 'd') {
    const outcome = str(held.out);
    return outcome === undefined || outcome === '' ? REPLAYED : { status: 'recorded', outcome };
  }
  const status = unrecordedStatus(held, table.serviceNow());
  if (status.status !== 'unknown' || !claim.take) return status;
  const taken = await reclaim(table, key, held, claim.owner, claim.leaseMs);
  if (taken !== undefined) return taken;
  const again = await liveItem(table, key, table.serviceNow());
  if (again === undefined) throw new StoreUnavailableError({ cause: new Error('the id was held, then gone: ask again') });
  return heldStatus(ctx, key, again, { ...claim, take: false });
}

function claimOp(ctx: Context) {
  return async (id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult> => {
    const misuse = checkId('claim', id, expiresAtMs) ?? checkFingerprint('claim', fingerprint) ?? checkMinted('claim', options?.mintedAtMs);
    if (misuse !== undefined) throw misuse;
    const owner = options?.owner === undefined ? newOwner() : checkOwner('claim', options.owner);
    const leaseMs = options?.leaseMs === undefined ? null : checkLeaseMs('claim', options.leaseMs);
    ctx.open();
    const { table } = ctx;
    // No owner: no lease.
    const owned = options?.owner !== undefined;
    const claim = { owner, fingerprint, leaseMs: owned ? leaseMs : null, owned, take: false };
    await refuseExpired(table, expiresAtMs);
    return ctx.withEpoch(options?.mintedAtMs, async () => {
      const at = liveAt(table, expiresAtMs);
      const key = idKey(table, id);
      if (await putIfFree(table, key, spendItem(ctx, expiresAtMs, owner, claim), at)) return { status: 'first', fence: 0 };
      const held = await liveItem(table, key, at);
      if (held === undefined) throw new StoreUnavailableError({ cause: new Error('the id was held, then gone: ask again') });
      return heldStatus(ctx, key, held, { ...claim, take: options?.reclaim === true });
    });
  };
}

/**
 * The outcome bytes this store instance has taken from the budget ahead of its records (see {@link createDynamoStore}):
 * `left` bytes counted in bucket `bucket` of the budget counter. A record whose id expires before that bucket ends
 * takes its bytes from here (no request); when they run out, one `UpdateItem` on the budget item takes another
 * `chunk`. Bytes left unused stay counted until the bucket ends (never too few).
 */
interface Allowance {
  bucket: number;
  left: number;
}

/** Takes `size` bytes for an id expiring at `exp` from the allowance, reserving another chunk when needed: the bucket, or `undefined` (not from the allowance). */
async function fromAllowance(ctx: Context, size: number, exp: number | undefined): Promise<number | undefined> {
  const { chunk } = ctx;
  if (chunk < 2 * size) return undefined;
  const held = ctx.allowance;
  if (held !== undefined && held.left >= size && (exp === undefined || exp < (held.bucket + 1) * BUDGET_BUCKET_MS)) {
    held.left -= size;
    return held.bucket;
  }
  const current = Math.floor(ctx.table.serviceNow() / BUDGET_BUCKET_MS);
  let wanted: number;
  if (exp === undefined) {
    // Topping up, without the id's expiry: the same bucket while it lies ahead (the write's condition then checks the
    // id's expiry against it); otherwise the slow path reads the expiry first.
    if (held === undefined || held.bucket <= current + 1) return undefined;
    wanted = held.bucket;
  } else {
    wanted = Math.floor(exp / BUDGET_BUCKET_MS) + 1;
  }
  // A long-lived id would keep the whole chunk counted long past its own expiry: its bytes are taken exactly.
  if (wanted > current + ALLOWANCE_BUCKETS_AHEAD) return undefined;
  const bucket = Math.max(wanted, held?.bucket ?? wanted);
  // Records that find the allowance empty at once share one reservation, then take from it.
  const pending = ctx.reserving;
  if (pending !== undefined && pending.bucket === bucket) {
    await pending.done;
    const after = ctx.allowance;
    if (after !== undefined && after.bucket === bucket && after.left >= size) {
      after.left -= size;
      return bucket;
    }
  }
  const reservation = { bucket, done: ctx.budget.take(chunk, bucket * BUDGET_BUCKET_MS, ctx.outcomeBudgetBytes) };
  ctx.reserving = reservation;
  let taken: boolean;
  try {
    taken = await reservation.done;
  } finally {
    if (ctx.reserving === reservation) ctx.reserving = undefined;
  }
  if (!taken) return undefined;
  const now = ctx.allowance;
  if (now !== undefined && now.bucket === bucket) now.left += chunk - size;
  else ctx.allowance = { bucket, left: chunk - size }; // what a replaced allowance had left stays counted until its bucket ends
  return bucket;
}

/** Gives `size` bytes back to the allowance of `bucket` (a write that did not land: no request). */
function giveToAllowance(ctx: Context, size: number, bucket: number): void {
  if (ctx.allowance !== undefined && ctx.allowance.bucket === bucket) ctx.allowance.left += size;
}

function recordOp(ctx: Context) {
  return async (id: string, fingerprint: string, outcome: string, options?: { readonly owner?: string | undefined }): Promise<boolean> => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('record: id must be a non-empty string');
    const misuse = checkFingerprint('record', fingerprint);
    if (misuse !== undefined) throw misuse;
    if (typeof outcome !== 'string') throw new TypeError('record: outcome must be a string');
    const by = options?.owner === undefined ? null : checkOwner('record', options.owner);
    ctx.open();
    const { table, budget, maxOutcomeBytes, outcomeBudgetBytes } = ctx;
    await table.measure(false);
    const at = table.serviceNow();
    const key = idKey(table, id);
    const size = outcome.length > maxOutcomeBytes ? maxOutcomeBytes + 1 : utf8Bytes(outcome);
    if (size === 0 || size > maxOutcomeBytes) {
      // Not kept, whatever the budget: one conditional update marks a pending claim done (a repeat by its owner
      // finds `ro` and answers false again).
      await markUnkept(table, key, fingerprint, at, by);
      return false;
    }
    const token = newOwner();
    // The fast path: bytes from this instance's allowance, one conditional UpdateItem.
    let read: Item | undefined;
    const bucket = await fromAllowance(ctx, size, undefined);
    if (bucket !== undefined) {
      const fast = await writeOutcome(table, key, { fingerprint, outcome, size, at, by }, { token, bucket });
      if (fast === true) return true;
      giveToAllowance(ctx, size, bucket);
      read = fast.item;
      if (read === undefined) return false;
      if (str(read.rt) === token) return true; // this call's write landed; the SDK's resend found it done
    } else {
      read = await liveItem(table, key, at);
    }
    // The slow path: the claim as read (a first record, an id past the allowance's bucket, a repeat, a refusal).
    const held = read;
    if (held === undefined || str(held.fp) !== fingerprint) return false;
    // By its owner, a record answers as the first did (a retry after a lost reply).
    if (by !== null && str(held.ro) === by) return num(held.rk) === 1;
    // An owned claim is recorded only by its owner; one without owner by anyone.
    if (str(held.k) !== 'p' || (by === null ? held.w !== undefined : str(held.o) !== by)) return false;
    const exp = num(held.exp) as number;
    const allowed = await fromAllowance(ctx, size, exp);
    if (allowed !== undefined) {
      const fast = await writeOutcome(table, key, { fingerprint, outcome, size, at, by }, { token, bucket: allowed });
      if (fast === true || str(fast.item?.rt) === token) return true;
      giveToAllowance(ctx, size, allowed);
      return false;
    }
    if (!(await budget.take(size, exp, outcomeBudgetBytes))) {
      await markUnkept(table, key, fingerprint, at, by);
      return false;
    }
    // No answer (rejects): the bytes stay taken — counted too long, never too little.
    // Refused when someone changed the item (three misses), unless this call's own write landed and the SDK retried it.
    const exact = await writeOutcome(table, key, { fingerprint, outcome, size, at, by });
    if (exact === true || isOwnRecord(exact.item, fingerprint, outcome, str(held.o) as string)) return true;
    await table.release('outcome bytes', () => budget.give(size, exp));
    return false;
  };
}

function leaseOps(ctx: Context) {
  const checkIdOnly = (method: string, id: unknown): void => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError(`${method}: id must be a non-empty string`);
  };
  return {
    async renew(id: string, owner: string, leaseMs: number): Promise<boolean> {
      checkIdOnly('renew', id);
      const [o, ms] = [checkOwner('renew', owner), checkLeaseMs('renew', leaseMs)];
      ctx.open();
      await ctx.table.measure(false);
      return renewItem(ctx.table, idKey(ctx.table, id), o, ms);
    },
    async release(id: string, owner: string): Promise<boolean> {
      checkIdOnly('release', id);
      const o = checkOwner('release', owner);
      ctx.open();
      await ctx.table.measure(false);
      return releaseItem(ctx.table, idKey(ctx.table, id), o);
    },
  };
}

/**
 * Runs `work` after the epoch read: a `mintedAtMs` before the namespace's epoch rejects `ERR_LEDGER_LOST` and writes
 * nothing. Without `mintedAtMs` there is nothing to judge: the first spend writes the epoch beside its work.
 */
function epochGuard(table: Table): Context['withEpoch'] {
  let seen = false;
  return async (mintedAtMs, work) => {
    if (mintedAtMs !== undefined) {
      const epoch = await epochOf(table); // nothing to judge by: it rejects, fail closed
      seen = true;
      if (mintedAtMs < epoch) throw new LedgerLostError();
      return work();
    }
    if (seen) return work();
    // The epoch must date the ledger: written by its first spend (ledgerEpoch writes it ahead of the first mint).
    const [epoch, result] = await Promise.allSettled([epochOf(table), work()]);
    if (epoch.status === 'fulfilled') seen = true;
    if (result.status === 'rejected') throw result.reason;
    return result.value;
  };
}

/**
 * Replay store on Amazon DynamoDB, for AWS Lambda. `consume` and `claim` are one `PutItem` conditioned on
 * `attribute_not_exists(pk) OR exp < :now` (the expiry is in the condition: DynamoDB's TTL deletes late); a
 * conditional failure is followed by one strongly consistent `GetItem`, which also tells this call's own write (an SDK
 * retry after a lost reply) from someone else's by its owner value. `record` is one `UpdateItem` conditioned on the
 * claim, its bytes taken from this instance's allowance of the budget (chunks of 1/4096 of it, at most 16 KiB, taken
 * ahead from the budget counter: never over the budget, unused bytes counted until their bucket ends); the first record
 * of an instance, an id expiring past the allowance's bucket or a large outcome reads the claim, then takes exact bytes
 * from the counter and writes (a failed write gives the bytes back). Misses are counted by a conditional `ADD`; the
 * third drops the outcome.
 *
 * DynamoDB has no clock in its conditions; the store's clock (`clock: true`, `time()`) is the service's as measured
 * from its replies' `Date` headers (`clockOffset()`, one cheap read before the first reply): expiry, retention, leases
 * and the epoch are judged by it, an expiry it has passed is refused `ERR_STATE_EXPIRED` before anything is written,
 * and an id is kept `clockSkewMs` past its expiry. `renew` is a conditional update on owner, `release` a conditional
 * delete, a reclaim a conditional update on owner and lease; the epoch is one item per namespace (`ledgerEpoch`), read
 * before every spend with `mintedAtMs`; so are the fleet check's key fingerprints (`keyFingerprints`). Every failure, timeout and unexpected item is `ERR_STORE_UNAVAILABLE`, never a first use.
 */
export function createDynamoStore(options: DynamoStoreOptions): DynamoReplayStore {
  if (options === undefined) throw new TypeError(`${LABEL}: options must be an object with client and tableName`);
  const table = openTable(LABEL, options, { ...CONNECTION_OPTIONS, ...OUTCOME_STORE_LIMIT_OPTIONS, clockSkewMs: true });
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(LABEL, options);
  const skewMs = intOption(`${LABEL}: clockSkewMs`, options.clockSkewMs, 5_000, 0, 600_000);
  const ctx: Context = {
    table,
    budget: bucketCounter(table, table.key('b', 'budget'), BUDGET_BUCKET_MS, table.serviceNow),
    chunk: Math.min(MAX_ALLOWANCE_CHUNK, Math.floor(outcomeBudgetBytes / ALLOWANCE_SHARE)),
    allowance: undefined,
    reserving: undefined,
    skewMs,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    withEpoch: epochGuard(table),
    open: () => {
      if (table.closed) throw new StoreUnavailableError({ cause: new Error('store is closed') });
    },
  };
  return {
    capabilities: fullStoreCapabilities({ maxOutcomeBytes, outcomeBudgetBytes }),
    async time(): Promise<number> {
      ctx.open();
      await table.measure(true);
      return table.serviceNow();
    },
    consume: consumeOp(ctx),
    claim: claimOp(ctx),
    record: recordOp(ctx),
    ...leaseOps(ctx),
    async ledgerEpoch(): Promise<number> {
      ctx.open();
      return epochOf(table);
    },
    keyFingerprints: keyFingerprintsOf(table, ctx.open),
    clockOffset: () => table.clock.offset(),
    maxOutcomeBytes,
    outcomeBudgetBytes,
    clockSkewMs: skewMs,
    namespace: table.namespace,
    tableName: table.tableName,
    close: async () => {
      table.closed = true;
    },
  };
}

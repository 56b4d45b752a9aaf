import { type AttributeValue, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { ClaimResult, OutcomeStoreLimits, RecordingReplayStore, ReplayStore } from '@mrtr/core';
import { base64urlEncode, MAX_FINGERPRINT_MISSES, parseOutcomeStoreLimits, randomBytes, StoreUnavailableError } from '@mrtr/core/authoring';
import type { BucketCounter, Table } from './table.js';
import { bucketCounter, type DynamoConnectionOptions, hash, num, openTable, readItem, str, ttlOf } from './table.js';

// One item per id, `r#<namespace>#<H(id)>`: `exp` (ms), `ttl` (s, for DynamoDB's TTL), `o` (an owner value only the
// call that wrote the item knows), `k` (`c` consume, `p` claimed, `d` recorded, `x` done, not kept), and for a claim
// `fp`, `m` (misses), `out`, `ob` (its bytes). The outcome budget is the bucket counter `b#<namespace>#budget`.

const LABEL = 'createDynamoStore';
const MAX_FINGERPRINT_LENGTH = 256;
/** Buckets of the outcome budget: an outcome counts until the end of the 5-minute bucket of its id's expiry. */
const BUDGET_BUCKET_MS = 300_000;

/** Options of {@link createDynamoStore}: the table, the outcome bounds and these. */
export interface DynamoStoreOptions extends DynamoConnectionOptions, OutcomeStoreLimits {}

/** A {@link ReplayStore} on DynamoDB. */
export interface DynamoReplayStore extends RecordingReplayStore {
  readonly namespace: string;
  readonly tableName: string;
  /** Stops the store (later calls reject `ERR_STORE_UNAVAILABLE`); the client stays open for its owner. */
  close(): Promise<void>;
}

const FIRST: ClaimResult = Object.freeze({ status: 'first' });
const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
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
      UpdateExpression: 'SET #k = :x REMOVE #out, #ob',
      ConditionExpression: '#o = :o AND (#k = :p OR #k = :d)',
      ExpressionAttributeNames: { '#k': 'k', '#o': 'o', '#out': 'out', '#ob': 'ob' },
      ExpressionAttributeValues: { ':x': { S: 'x' }, ':o': { S: owner }, ':p': { S: 'p' }, ':d': { S: 'd' } },
      ReturnValues: 'ALL_OLD',
    }),
  );
  // Exactly one drop succeeds (the condition), and it alone gives the recorded bytes back.
  if (dropped !== 'condition' && str(dropped.Attributes?.k) === 'd') {
    await table.release('outcome bytes', () => budget.give(num(dropped.Attributes?.ob) ?? 0, num(dropped.Attributes?.exp) ?? 0));
  }
}

/** Marks a pending claim of `fingerprint` done, not kept. */
function markUnkept(table: Table, key: Key, fingerprint: string, at: number): Promise<unknown> {
  return table.send(
    new UpdateItemCommand({
      TableName: table.tableName,
      Key: key,
      UpdateExpression: 'SET #k = :x',
      ConditionExpression: '#k = :p AND #fp = :fp AND #exp >= :now',
      ExpressionAttributeNames: { '#k': 'k', '#fp': 'fp', '#exp': 'exp' },
      ExpressionAttributeValues: { ':x': { S: 'x' }, ':p': { S: 'p' }, ':fp': { S: fingerprint }, ':now': { N: String(at) } },
    }),
  );
}

/**
 * Writes the outcome of a pending claim of `fingerprint` (held by `owner`): true when it is this call's. Refused when
 * someone changed the item (three misses), unless this call's own write landed and the SDK retried it.
 */
async function writeOutcome(
  table: Table,
  key: Key,
  fingerprint: string,
  outcome: string,
  size: number,
  at: number,
  owner: string,
): Promise<boolean> {
  const written = await table.send(
    new UpdateItemCommand({
      TableName: table.tableName,
      Key: key,
      UpdateExpression: 'SET #k = :d, #out = :out, #ob = :ob',
      ConditionExpression: '#k = :p AND #fp = :fp AND #exp >= :now',
      ExpressionAttributeNames: { '#k': 'k', '#out': 'out', '#ob': 'ob', '#fp': 'fp', '#exp': 'exp' },
      ExpressionAttributeValues: {
        ':d': { S: 'd' },
        ':p': { S: 'p' },
        ':out': { S: outcome },
        ':ob': { N: String(size) },
        ':fp': { S: fingerprint },
        ':now': { N: String(at) },
      },
    }),
  );
  if (written !== 'condition') return true;
  const after = await liveItem(table, key, at);
  return (
    after !== undefined && str(after.k) === 'd' && str(after.fp) === fingerprint && str(after.out) === outcome && str(after.o) === owner
  );
}

/**
 * Replay store on Amazon DynamoDB, for AWS Lambda. `consume` and `claim` are one `PutItem` conditioned on
 * `attribute_not_exists(pk) OR exp < :now` (the expiry is in the condition: DynamoDB's TTL deletes late); a
 * conditional failure is followed by one strongly consistent `GetItem`, which also tells this call's own write (an SDK
 * retry after a lost reply) from someone else's by its owner value. `record` takes the outcome's bytes from the budget
 * counter first, then writes the outcome with an `UpdateItem` conditioned on the fingerprint and no outcome yet (a
 * failed write gives the bytes back). Misses are counted by a conditional `ADD`; the third drops the outcome.
 * Every failure, timeout and unexpected item is `ERR_STORE_UNAVAILABLE`, never a first use.
 */
export function createDynamoStore(options: DynamoStoreOptions): DynamoReplayStore {
  if (options === undefined) throw new TypeError(`${LABEL}: options must be an object with client and tableName`);
  const table = openTable(LABEL, options);
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits(LABEL, options);
  const { tableName, now } = table;
  const budget = bucketCounter(table, table.key('b', 'budget'), BUDGET_BUCKET_MS);
  const idKey = (id: string) => table.key('r', hash(id));
  const newOwner = (): string => base64urlEncode(randomBytes(16));
  const closed = (): StoreUnavailableError => new StoreUnavailableError({ cause: new Error('store is closed') });

  const consume = async (id: string, expiresAtMs: number): Promise<boolean> => {
    const misuse = checkId('consume', id, expiresAtMs);
    if (misuse !== undefined) throw misuse;
    if (table.closed) throw closed();
    const at = now();
    if (expiresAtMs <= at) return false;
    const key = idKey(id);
    const owner = newOwner();
    const exp = Math.ceil(expiresAtMs);
    if (await putIfFree(table, key, { exp: { N: String(exp) }, ttl: { N: ttlOf(exp) }, o: { S: owner }, k: { S: 'c' } }, at)) return true;
    // Held: by someone else, or by this very call (the SDK retried a put whose reply was lost).
    const item = await liveItem(table, key, at);
    if (item === undefined) throw new StoreUnavailableError({ cause: new Error('the id was held, then gone: ask again') });
    return str(item.o) === owner;
  };

  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    const misuse = checkId('claim', id, expiresAtMs) ?? checkFingerprint('claim', fingerprint);
    if (misuse !== undefined) throw misuse;
    if (table.closed) throw closed();
    const at = now();
    const key = idKey(id);
    const owner = newOwner();
    const exp = Math.ceil(expiresAtMs);
    const item: Record<string, AttributeValue> = {
      exp: { N: String(exp) },
      ttl: { N: ttlOf(exp) },
      o: { S: owner },
      k: { S: 'p' },
      fp: { S: fingerprint },
      m: { N: '0' },
    };
    // An expiry not in the future is never a first use (it could not be remembered); the id may still be held.
    const fresh = expiresAtMs > at;
    if (fresh && (await putIfFree(table, key, item, at))) return FIRST;
    const held = await liveItem(table, key, at);
    if (held === undefined) {
      if (!fresh) return REPLAYED;
      throw new StoreUnavailableError({ cause: new Error('the id was held, then gone: ask again') });
    }
    const kind = str(held.k);
    if (str(held.o) === owner) return kind === 'p' ? FIRST : REPLAYED;
    if (kind !== 'p' && kind !== 'd') return REPLAYED;
    if (str(held.fp) !== fingerprint) {
      await countMiss(table, budget, key, str(held.o) as string);
      return REPLAYED;
    }
    if (kind === 'p') return PENDING;
    const outcome = str(held.out);
    if (outcome === undefined || outcome === '') return REPLAYED;
    return { status: 'recorded', outcome };
  };

  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('record: id must be a non-empty string');
    const misuse = checkFingerprint('record', fingerprint);
    if (misuse !== undefined) throw misuse;
    if (typeof outcome !== 'string') throw new TypeError('record: outcome must be a string');
    if (table.closed) throw closed();
    const at = now();
    const key = idKey(id);
    const held = await liveItem(table, key, at);
    if (held === undefined || str(held.k) !== 'p' || str(held.fp) !== fingerprint) return false;
    const exp = num(held.exp) as number;
    const size = outcome.length > maxOutcomeBytes ? maxOutcomeBytes + 1 : utf8Bytes(outcome);
    if (size === 0 || size > maxOutcomeBytes || !(await budget.take(size, exp, outcomeBudgetBytes))) {
      await markUnkept(table, key, fingerprint, at);
      return false;
    }
    // No answer (rejects): the bytes stay taken — counted too long, never too little.
    if (await writeOutcome(table, key, fingerprint, outcome, size, at, str(held.o) as string)) return true;
    await table.release('outcome bytes', () => budget.give(size, exp));
    return false;
  };

  return {
    capabilities: {
      shared: true,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: false,
      clock: false,
      leases: false,
      epoch: false,
    },
    consume,
    claim,
    record,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    namespace: table.namespace,
    tableName,
    close: async () => {
      table.closed = true;
    },
  };
}

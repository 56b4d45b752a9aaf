// Leases and the epoch of the DynamoDB replay store: conditional updates on the id's item, judged by the service's
// clock as this process measures it (`table.serviceNow()`), and one epoch item per namespace.
import { type AttributeValue, DeleteItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { StoreUnavailableError } from '@mrtr/core/errors';
import type { ClaimResult } from '@mrtr/core/store';
import { num, readItem, type Table } from './table.js';

type Item = Record<string, AttributeValue>;
type Key = Record<string, AttributeValue>;

/**
 * Runs a conditional write that is safe to repeat once more when it failed without an answer (a lost reply: its
 * condition then tells whether the first landed), whatever retries the caller's client is configured with.
 */
export async function twice<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (!(error instanceof StoreUnavailableError)) throw error;
    return write();
  }
}

const PENDING: ClaimResult = Object.freeze({ status: 'pending' });
const UNKNOWN: ClaimResult = Object.freeze({ status: 'unknown' });

/** What an unrecorded claim answers at service time `at`: `pending` while its lease runs (or with none), else `unknown`. */
export function unrecordedStatus(item: Item, at: number): ClaimResult {
  const lease = num(item.le);
  if (lease === undefined) return PENDING;
  return lease > at ? { status: 'pending', leaseLeftMs: Math.ceil(lease - at) } : UNKNOWN;
}

/**
 * Takes over the lapsed claim `held` for `owner` (one conditional update on its owner and lease): `first` with the
 * next fence, or `undefined` when the condition failed (someone changed it first, or an SDK retry of this very
 * update found it done): the caller reads the item again and judges it by its owner.
 */
export async function reclaim(table: Table, key: Key, held: Item, owner: string, leaseMs: number | null): Promise<ClaimResult | undefined> {
  const at = table.serviceNow();
  const updated = await twice(() =>
    table.send<{ Attributes?: Item }>(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: leaseMs === null ? 'SET #o = :o ADD #f :one REMOVE #le' : 'SET #o = :o, #le = :le ADD #f :one',
        ConditionExpression: '#o = :old AND #k = :p AND #le = :oldle',
        ExpressionAttributeNames: { '#o': 'o', '#le': 'le', '#f': 'f', '#k': 'k' },
        ExpressionAttributeValues: {
          ':o': { S: owner },
          ':old': held.o as AttributeValue,
          ':oldle': held.le as AttributeValue,
          ':p': { S: 'p' },
          ':one': { N: '1' },
          ...(leaseMs === null ? {} : { ':le': { N: String(Math.ceil(at + leaseMs)) } }),
        },
        ReturnValues: 'ALL_NEW',
      }),
    ),
  );
  if (updated !== 'condition') return { status: 'first', fence: num(updated.Attributes?.f) ?? 0 };
  return undefined; // the caller reads the item again
}

/** Extends the lease of `owner`'s unrecorded claim (safe to repeat: an SDK retry sets it again). */
export async function renewItem(table: Table, key: Key, owner: string, leaseMs: number): Promise<boolean> {
  const reply = await twice(() =>
    table.send(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: 'SET #le = :le',
        ConditionExpression: '#o = :o AND #k = :p AND #exp >= :now',
        ExpressionAttributeNames: { '#le': 'le', '#o': 'o', '#k': 'k', '#exp': 'exp' },
        ExpressionAttributeValues: {
          ':le': { N: String(Math.ceil(table.serviceNow() + leaseMs)) },
          ':o': { S: owner },
          ':p': { S: 'p' },
          ':now': { N: String(table.serviceNow()) },
        },
      }),
    ),
  );
  return reply !== 'condition';
}

/**
 * Compare-and-delete of `owner`'s unrecorded claim: true when the owner holds no claim afterwards (deleted now, or
 * already gone — an SDK retry after a lost reply finds it gone), false when another owner or an outcome holds it.
 */
export async function releaseItem(table: Table, key: Key, owner: string): Promise<boolean> {
  const reply = await twice(() =>
    table.send(
      new DeleteItemCommand({
        TableName: table.tableName,
        Key: key,
        ConditionExpression: '#o = :o AND #k = :p AND #exp >= :now',
        ExpressionAttributeNames: { '#o': 'o', '#k': 'k', '#exp': 'exp' },
        ExpressionAttributeValues: { ':o': { S: owner }, ':p': { S: 'p' }, ':now': { N: String(table.serviceNow()) } },
      }),
    ),
  );
  if (reply !== 'condition') return true;
  const item = await readItem(table, key);
  const exp = num(item?.exp);
  return item === undefined || exp === undefined || exp < table.serviceNow();
}

/**
 * When this namespace's ledger began: its epoch item `e#<ns>#epoch` (`at`, ms by the service's clock as measured),
 * written with a conditional put when missing (a new namespace, a deleted table or namespace), then read back. It is
 * dated by the earliest the service's clock may read (`serviceFloor`: the read before the put measured it), so an epoch
 * is never in the service's future: a state minted on a brand-new ledger is never refused by the fallback `iat − skew`.
 * Safe to run again, and after a lost reply: the put is conditional (an existing epoch never moves) and the read
 * answers whichever put landed.
 */
export async function epochOf(table: Table): Promise<number> {
  const key = table.key('e', 'epoch');
  for (let attempt = 0; attempt < 2; attempt++) {
    const item = await readItem(table, key);
    const at = num(item?.at);
    if (at !== undefined) return at;
    const written = Math.max(0, Math.floor(table.serviceFloor()));
    const reply = await twice(() =>
      table.send(
        new PutItemCommand({
          TableName: table.tableName,
          Item: { ...key, at: { N: String(written) } },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      ),
    );
    if (reply !== 'condition') return written;
  }
  throw new StoreUnavailableError({ cause: new Error('the epoch item is there but unreadable') });
}

import { createHash } from 'node:crypto';
import {
  type AttributeValue,
  ConditionalCheckFailedException,
  CreateTableCommand,
  DescribeTableCommand,
  type DynamoDBClient,
  GetItemCommand,
  UpdateItemCommand,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { fnOption, intOption, type OptionNames, optionsObject, stringOption } from '@mrtr/core/options';
import { BackgroundError } from '@mrtr/core/store';
import { ServiceClock } from './clock.js';

/** The connection options every store of this package takes. */
export interface DynamoConnectionOptions {
  /**
   * A `DynamoDBClient` from `@aws-sdk/client-dynamodb` (its region, credentials, endpoint and retries are yours).
   * The store never destroys it: its owner does.
   */
  client: DynamoDBClient;
  /** The table (see `createTable` for its layout: a string partition key `pk`, TTL on `ttl`, the `heavy` index). */
  tableName: string;
  /**
   * Ledger name: stores with the same table and namespace share their ids and tasks; others never meet.
   * @default ''
   */
  namespace?: string | undefined;
  /**
   * Longest wait for one DynamoDB call (the SDK's own retries included), in ms (1–600000); then the operation
   * rejects `ERR_STORE_UNAVAILABLE`.
   * @default 5000
   */
  commandTimeoutMs?: number | undefined;
  /** The clock (ms) the store judges expiry by: DynamoDB's TTL deletes late, so expiry lives in the conditions. @default Date.now */
  now?: (() => number) | undefined;
  /**
   * Receives what the store survives after an operation has its answer, as a `BackgroundError` with the cause:
   * `STORE_RELEASE_FAILED` when giving back counted bytes or a task slot failed (they stay counted until their
   * bucket ends: too many, never too few).
   * @default (error) => console.warn(error.message)
   */
  onError?: ((error: BackgroundError) => void) | undefined;
}

export interface Table {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  readonly namespace: string;
  readonly now: () => number;
  /** DynamoDB's clock as measured from its replies' `Date` headers (see {@link ServiceClock}). */
  readonly clock: ServiceClock;
  /** `now()` corrected by the measured offset (no correction before the first reply): the clock the replay store judges by. */
  serviceNow(): number;
  /**
   * Measures the service's clock with one cheap request (an eventually consistent `GetItem` of the epoch item, half a
   * read unit): always with `fresh`, else only before the first reply. Concurrent calls share one request.
   */
  measure(fresh: boolean): Promise<void>;
  /** The earliest the service's clock may read now: `serviceNow()` less the measurement's `uncertaintyMs` (epochs are dated by it). */
  serviceFloor(): number;
  /** Runs a give-back; its failure goes to `onError` (the operation's answer does not depend on it). */
  release(what: string, work: () => Promise<unknown>): Promise<void>;
  /** `<kind>#<namespace>#<rest>`, the namespace with `%` and `#` percent-encoded. */
  key(kind: string, rest: string): Record<string, AttributeValue>;
  /** Sends a command bounded by `commandTimeoutMs`; a conditional failure resolves `'condition'`, any other failure rejects `StoreUnavailableError`. */
  send<T>(command: { input: unknown }): Promise<T | 'condition'>;
  closed: boolean;
}

/** SHA-256 in base64url (43 characters): ids and principals are attacker-influenced, only their hashes become keys. */
export const hash = (value: string): string => createHash('sha256').update(value, 'utf8').digest('base64url');

/** `ttl` (seconds) for DynamoDB's TTL: an hour after the expiry (ms), so TTL never deletes an item the conditions still count. */
export const ttlOf = (expiresAtMs: number): string => String(Math.ceil(expiresAtMs / 1000) + 3600);

/** Opens the table of a store whose options are `options`, refusing any option outside `known` (the store's own). */
export function openTable<O extends DynamoConnectionOptions>(label: string, options: O, known: OptionNames<O>): Table {
  options = optionsObject(label, options, known);
  const { client } = options;
  if (client === null || typeof client !== 'object' || typeof (client as Partial<DynamoDBClient>).send !== 'function') {
    throw new TypeError(`${label}: client must be a DynamoDBClient from @aws-sdk/client-dynamodb`);
  }
  const tableName = stringOption(`${label}: tableName`, options.tableName, '');
  if (tableName.length < 3 || tableName.length > 255) throw new TypeError(`${label}: tableName must have 3 to 255 characters`);
  const namespace = stringOption(`${label}: namespace`, options.namespace, '');
  const commandTimeoutMs = intOption(`${label}: commandTimeoutMs`, options.commandTimeoutMs, 5000, 1, 600_000);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption(`${label}: onError`, options.onError, (error: BackgroundError) => console.warn(error.message));
  const ns = namespace.replace(/%/g, '%25').replace(/#/g, '%23');
  const clock = new ServiceClock();
  let probing: Promise<void> | undefined;
  const probe = async (): Promise<void> => {
    const reply = await table.send(new GetItemCommand({ TableName: tableName, Key: table.key('e', 'epoch') }));
    if (reply === 'condition') throw new StoreUnavailableError({ cause: new Error('unexpected conditional failure of a read') });
    if (clock.offset() === undefined) throw new StoreUnavailableError({ cause: new Error("DynamoDB's reply had no Date header") });
  };
  const table: Table = {
    client,
    tableName,
    namespace,
    now,
    clock,
    serviceNow: () => now() + (clock.offset()?.offsetMs ?? 0),
    serviceFloor: () => {
      const offset = clock.offset();
      return now() + (offset === undefined ? 0 : offset.offsetMs - offset.uncertaintyMs);
    },
    measure(fresh) {
      if (!fresh && clock.offset() !== undefined) return Promise.resolve();
      probing ??= probe().finally(() => {
        probing = undefined;
      });
      return probing;
    },
    closed: false,
    async release(what, work) {
      try {
        await work();
      } catch (cause) {
        try {
          onError(
            new BackgroundError('STORE_RELEASE_FAILED', `${label}: giving back ${what} failed; it stays counted until its bucket ends`, {
              cause,
            }),
          );
        } catch {
          // a throwing hook must not break the store
        }
      }
    },
    key: (kind, rest) => ({ pk: { S: `${kind}#${ns}#${rest}` } }),
    async send<T>(command: { input: unknown }): Promise<T | 'condition'> {
      if (table.closed) throw new StoreUnavailableError({ cause: new Error('store is closed') });
      probeClock(command, clock, now);
      try {
        // biome-ignore lint/suspicious/noExplicitAny: one send for every command type
        return (await client.send(command as any, { abortSignal: AbortSignal.timeout(commandTimeoutMs) })) as T;
      } catch (error) {
        if (error instanceof ConditionalCheckFailedException || (error as { name?: unknown })?.name === 'ConditionalCheckFailedException') {
          return 'condition';
        }
        throw new StoreUnavailableError({ cause: error });
      }
    },
  };
  return table;
}

interface MiddlewareStackLike {
  add(middleware: (next: (args: unknown) => Promise<{ response?: unknown }>) => (args: unknown) => Promise<unknown>, options: object): void;
}

/** Times every attempt of `command` and hands the reply's `Date` header to `clock` (this command only: the client is not touched). */
function probeClock(command: { input: unknown }, clock: ServiceClock, now: () => number): void {
  const stack = (command as { middlewareStack?: MiddlewareStackLike }).middlewareStack;
  if (stack === undefined || typeof stack.add !== 'function') return;
  stack.add(
    (next) => async (args) => {
      const sentAt = now();
      const result = await next(args);
      const headers = (result.response as { headers?: Record<string, unknown> } | undefined)?.headers;
      clock.sample(headers?.date, sentAt, now());
      return result;
    },
    { step: 'deserialize', name: 'mrtrServiceClock', override: true },
  );
}

/** A consistent read of one item (`undefined` when absent). */
export async function readItem(table: Table, key: Record<string, AttributeValue>): Promise<Record<string, AttributeValue> | undefined> {
  const reply = await table.send<{ Item?: Record<string, AttributeValue> }>(
    new GetItemCommand({ TableName: table.tableName, Key: key, ConsistentRead: true }),
  );
  if (reply === 'condition') throw new StoreUnavailableError({ cause: new Error('unexpected conditional failure of a read') });
  return reply.Item;
}

export const num = (value: AttributeValue | undefined): number | undefined => {
  const n = value?.N === undefined ? Number.NaN : Number(value.N);
  return Number.isFinite(n) ? n : undefined;
};
export const str = (value: AttributeValue | undefined): string | undefined => value?.S;

/**
 * A counter held in one item, by expiry bucket: attribute `t` is the sum, `b<N>` what expires in bucket `N` (the
 * bucket ends at `(N + 1) × bucketMs`). `take` adds `amount` to the bucket of `expiresAtMs` when the sum stays within
 * `limit` (one conditional `UpdateItem`); past the limit it first gives back the buckets that have ended (one read, one
 * conditional update), then tries once more. An amount is thus counted from `take` until its bucket ends (by `now`, the
 * clock its expiries are on): at most `bucketMs` after its expiry, never less.
 *
 * `give` subtracts once, even when the SDK sends it again after its reply was lost: it carries a give-back id of its
 * own, added to the bucket's set `g<N>` by the same update, which is conditioned on the id not being there yet (a
 * resend finds it and changes nothing). Once answered, the id is taken out of the set again (one more `UpdateItem`),
 * so that the item does not grow with every give-back; ids left behind go with their bucket.
 */
export interface BucketCounter {
  take(amount: number, expiresAtMs: number, limit: number): Promise<boolean>;
  give(amount: number, expiresAtMs: number): Promise<void>;
}

export function bucketCounter(
  table: Table,
  key: Record<string, AttributeValue>,
  bucketMs: number,
  now: () => number = table.now,
): BucketCounter {
  const bucket = (expiresAtMs: number): string => `b${Math.floor(expiresAtMs / bucketMs)}`;
  /** Subtracts `amount` unless the give-back `id` did already (its id is in the bucket's set `g<N>`); then forgets the id. */
  const subtract = async (amount: number, expiresAtMs: number, id: string): Promise<void> => {
    const b = bucket(expiresAtMs);
    const names = { '#t': 't', '#b': b, '#g': `g${b.slice(1)}` };
    const ids = { SS: [id] };
    await table.send(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: 'SET #t = if_not_exists(#t, :zero) + :n, #b = if_not_exists(#b, :zero) + :n ADD #g :ids',
        ConditionExpression: 'NOT contains(#g, :id)',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ':n': { N: String(-amount) }, ':zero': { N: '0' }, ':ids': ids, ':id': { S: id } },
      }),
    ); // 'condition': this give-back landed already (the SDK sent it again after its reply was lost)
    // Tidying only: the bytes are given back either way, and an id left behind goes with its bucket.
    await table
      .send(
        new UpdateItemCommand({
          TableName: table.tableName,
          Key: key,
          UpdateExpression: 'DELETE #g :ids',
          ExpressionAttributeNames: { '#g': names['#g'] },
          ExpressionAttributeValues: { ':ids': ids },
        }),
      )
      .catch(() => undefined);
  };
  const add = (amount: number, expiresAtMs: number, limit: number) =>
    table.send(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: 'SET #t = if_not_exists(#t, :zero) + :n, #b = if_not_exists(#b, :zero) + :n',
        ConditionExpression: 'attribute_not_exists(#t) OR #t <= :room',
        ExpressionAttributeNames: { '#t': 't', '#b': bucket(expiresAtMs) },
        ExpressionAttributeValues: { ':n': { N: String(amount) }, ':zero': { N: '0' }, ':room': { N: String(limit - amount) } },
      }),
    );
  /** Gives back up to 64 ended buckets (and drops the give-back ids left in their sets); true when something was given back. */
  const reclaim = async (): Promise<boolean> => {
    const item = await readItem(table, key);
    if (item === undefined) return false;
    const current = Math.floor(now() / bucketMs);
    const ended = Object.keys(item)
      .filter((name) => /^b-?\d+$/.test(name) && Number(name.slice(1)) < current)
      .slice(0, 64);
    if (ended.length === 0) return false;
    const names: Record<string, string> = { '#t': 't' };
    const values: Record<string, AttributeValue> = {};
    let sum = 0;
    ended.forEach((name, i) => {
      names[`#b${i}`] = name;
      names[`#g${i}`] = `g${name.slice(1)}`;
      values[`:v${i}`] = item[name]!;
      sum += num(item[name]) ?? 0;
    });
    values[':sum'] = { N: String(sum) };
    const reply = await table.send(
      new UpdateItemCommand({
        TableName: table.tableName,
        Key: key,
        UpdateExpression: `SET #t = #t - :sum REMOVE ${ended.map((_, i) => `#b${i}, #g${i}`).join(', ')}`,
        ConditionExpression: ended.map((_, i) => `#b${i} = :v${i}`).join(' AND '),
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
      }),
    );
    return reply !== 'condition';
  };
  return {
    async take(amount, expiresAtMs, limit) {
      if (amount > limit) return false;
      if ((await add(amount, expiresAtMs, limit)) !== 'condition') return true;
      if (!(await reclaim())) return false;
      return (await add(amount, expiresAtMs, limit)) !== 'condition';
    },
    async give(amount, expiresAtMs) {
      await subtract(amount, expiresAtMs, base64urlEncode(randomBytes(16)));
    },
  };
}

/** The names of {@link DynamoConnectionOptions}, for a store's list of known options. */
export const CONNECTION_OPTIONS: OptionNames<DynamoConnectionOptions> = {
  client: true,
  tableName: true,
  namespace: true,
  commandTimeoutMs: true,
  now: true,
  onError: true,
};

/** Options of {@link createTable}. */
export interface CreateTableOptions {
  /**
   * Turn on DynamoDB's TTL on the `ttl` attribute (it deletes expired items, late: the stores never rely on it).
   * `false` for emulators without `UpdateTimeToLive` (dynalite).
   * @default true
   */
  timeToLive?: boolean | undefined;
}

/**
 * Creates the table the stores of this package use, for tests and development (in production, declare the same in
 * your infrastructure code): partition key `pk` (string), on-demand billing, the global secondary index `heavy`
 * (`hv` string, `hk` number, keys only) and TTL on `ttl`. Waits until the table is active. An existing table is left
 * as it is.
 */
export async function createTable(client: DynamoDBClient, tableName: string, options?: CreateTableOptions): Promise<void> {
  options = optionsObject('createTable', options, { timeToLive: true });
  try {
    await client.send(
      new CreateTableCommand({
        TableName: tableName,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'hv', AttributeType: 'S' },
          { AttributeName: 'hk', AttributeType: 'N' },
        ],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        GlobalSecondaryIndexes: [
          {
            IndexName: 'heavy',
            KeySchema: [
              { AttributeName: 'hv', KeyType: 'HASH' },
              { AttributeName: 'hk', KeyType: 'RANGE' },
            ],
            Projection: { ProjectionType: 'KEYS_ONLY' },
          },
        ],
      }),
    );
  } catch (error) {
    if ((error as { name?: string }).name !== 'ResourceInUseException') throw error;
  }
  for (let i = 0; i < 600; i++) {
    const { Table: described } = await client.send(new DescribeTableCommand({ TableName: tableName }));
    const indexes = described?.GlobalSecondaryIndexes ?? [];
    if (described?.TableStatus === 'ACTIVE' && indexes.every((index) => index.IndexStatus === 'ACTIVE')) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (options.timeToLive !== false) {
    await client.send(
      new UpdateTimeToLiveCommand({ TableName: tableName, TimeToLiveSpecification: { AttributeName: 'ttl', Enabled: true } }),
    );
  }
}

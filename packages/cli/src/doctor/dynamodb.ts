// The DynamoDB backend: the table's layout, the replay store with the service's clock and the ledger epoch, the task
// store on the same table.
import { redactUrl } from '@mrtr/core/store';
import { loadOptional, STORE_PACKAGES } from '../optional.js';
import type { Backend, Settings, TaskSession } from './backend.js';
import { type Check, DOCTOR_NAMESPACE, sha256, withTimeout } from './common.js';
import { noTaskStore } from './task-probe.js';

const WHAT = 'doctor --store dynamodb';
type Sdk = typeof import('@aws-sdk/client-dynamodb');
type Client = import('@aws-sdk/client-dynamodb').DynamoDBClient;
type Described = import('@aws-sdk/client-dynamodb').TableDescription;

/** Where the table is: the endpoint the SDK uses (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL`) or the region. */
function place(s: Settings): string {
  const endpoint = s.env.AWS_ENDPOINT_URL_DYNAMODB || s.env.AWS_ENDPOINT_URL;
  const region = s.env.AWS_REGION || s.env.AWS_DEFAULT_REGION;
  const at = endpoint ? ` at ${redactUrl(endpoint)}` : region ? ` in ${region}` : '';
  return `table "${s.dynamoTable}"${at}`;
}

/** The `dynamodb table` line: the layout `createTable` makes (partition key `pk` only, the `heavy` index). */
function tableLine(table: Described, ttl: string | undefined): Check {
  const name = 'dynamodb table';
  const keys = table.KeySchema ?? [];
  const pkType = table.AttributeDefinitions?.find((a) => a.AttributeName === 'pk')?.AttributeType;
  if (keys.length !== 1 || keys[0]?.AttributeName !== 'pk' || keys[0].KeyType !== 'HASH' || pkType !== 'S')
    return { name, status: 'fail', detail: `table "${table.TableName}": the key must be partition key pk (string) and no sort key` };
  const heavy = table.GlobalSecondaryIndexes?.find((i) => i.IndexName === 'heavy');
  const parts = heavy?.KeySchema?.map((k) => `${k.AttributeName}:${k.KeyType}`).join(',');
  const ttlText =
    ttl === 'ENABLED'
      ? 'TTL on (it tidies up expired items; the stores never rely on it)'
      : `TTL ${ttl === undefined ? 'unknown' : ttl.toLowerCase()} (expired items stay until deleted: TTL on attribute ttl tidies them up)`;
  if (parts !== 'hv:HASH,hk:RANGE') {
    const detail = `table "${table.TableName}": partition key pk; no index heavy (hv, hk): the task store finds the principal that keeps the most there when maxTasks is reached (create the table as createTable does)`;
    return { name, status: 'warn', detail };
  }
  return {
    name,
    status: 'ok',
    detail: `table "${table.TableName}": partition key pk, index heavy (hv, hk), ${ttlText}`,
  };
}

/** Describes the table; a missing one is a failed line, not an error (the consume then fails on it too). */
async function describe(sdk: Sdk, client: Client, s: Settings): Promise<Check> {
  const name = 'dynamodb table';
  try {
    const bounded = () => ({ abortSignal: AbortSignal.timeout(s.timeoutMs) });
    const { Table } = await withTimeout(
      client.send(new sdk.DescribeTableCommand({ TableName: s.dynamoTable }), bounded()),
      s.timeoutMs,
      'dynamodb',
    );
    const ttl = await withTimeout(
      client.send(new sdk.DescribeTimeToLiveCommand({ TableName: s.dynamoTable }), bounded()),
      s.timeoutMs,
      'dynamodb',
    )
      .then((answer) => answer.TimeToLiveDescription?.TimeToLiveStatus)
      .catch(() => undefined);
    return tableLine(Table ?? {}, ttl);
  } catch (error) {
    if ((error as { name?: unknown }).name !== 'ResourceNotFoundException') throw error;
    const detail = `table "${s.dynamoTable}" does not exist: create it in your infrastructure code (partition key pk, string; index heavy on hv, hk; TTL on ttl), or with createTable for development`;
    return { name, status: 'fail', detail };
  }
}

function dynamoTasks(mod: typeof import('@mrtr/store-dynamodb'), sdk: Sdk, client: Client, s: Settings): TaskSession {
  const name = 'dynamodb tasks';
  let store: import('@mrtr/store-dynamodb').DynamoTaskStore | undefined;
  const key = (kind: string, hashed: string) => ({ pk: { S: `${kind}#${DOCTOR_NAMESPACE}#${hashed}` } });
  return {
    name,
    where: `in ${place(s)}`,
    place: place(s),
    async open(add) {
      if (typeof mod.createDynamoTaskStore !== 'function') {
        add(noTaskStore(name, '@mrtr/store-dynamodb', 'createDynamoTaskStore'));
        return undefined;
      }
      store = mod.createDynamoTaskStore({ client, tableName: s.dynamoTable!, namespace: DOCTOR_NAMESPACE, commandTimeoutMs: s.timeoutMs });
      return store;
    },
    async forget(taskId, principal) {
      // The task and its principal's item (a random principal: nothing else is in it); the task count ends with its bucket.
      for (const Key of [key('t', sha256(taskId)), key('p', sha256(principal))])
        await client.send(new sdk.DeleteItemCommand({ TableName: s.dynamoTable, Key }), { abortSignal: AbortSignal.timeout(s.timeoutMs) });
    },
    close: async () => store?.close(),
  };
}

/** Amazon DynamoDB (`--dynamodb-table` or `MRTR_DYNAMODB_TABLE`; region, credentials and endpoint as the AWS SDK reads them). */
export const dynamodb: Backend = {
  packages: STORE_PACKAGES.dynamodb,
  byDefault: (s) => s.dynamoTable !== undefined,
  unconfigured: (s) => (s.dynamoTable === undefined ? 'no table: pass --dynamodb-table NAME (or set MRTR_DYNAMODB_TABLE)' : undefined),
  place,
  async open(s) {
    const sdk = await loadOptional(() => import('@aws-sdk/client-dynamodb'), STORE_PACKAGES.dynamodb, WHAT);
    const mod = await loadOptional(() => import('@mrtr/store-dynamodb'), STORE_PACKAGES.dynamodb, WHAT);
    // Every request ends by itself within the timeout (a silent endpoint would otherwise hold the process open).
    const requestHandler = { requestTimeout: s.timeoutMs, connectionTimeout: s.timeoutMs };
    const client = new sdk.DynamoDBClient({ requestHandler });
    const options = { client, tableName: s.dynamoTable!, namespace: DOCTOR_NAMESPACE, commandTimeoutMs: s.timeoutMs };
    const store = mod.createDynamoStore({ ...options, onError: () => {} });
    return {
      store,
      where: `in ${place(s)}`,
      before: async (add) => add(await describe(sdk, client, s)),
      forget: (id) =>
        client.send(new sdk.DeleteItemCommand({ TableName: s.dynamoTable, Key: { pk: { S: `r#${DOCTOR_NAMESPACE}#${sha256(id)}` } } })),
      clock: {
        name: 'dynamodb clock',
        note: "the store reads DynamoDB's clock from its replies' Date headers and judges expiry by it; past the guard's clockSkewMs it refuses every state (ERR_CLOCK_SKEW): fix NTP on this host",
        unreadable: 'cannot read the Date of a reply',
      },
      epoch: 'dynamodb epoch',
      tasks: dynamoTasks(mod, sdk, client, s),
      close: async () => {
        await store.close().catch(() => {});
        client.destroy();
      },
    };
  },
};

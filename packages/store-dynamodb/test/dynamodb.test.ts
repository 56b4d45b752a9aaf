import { GetItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { BackgroundError } from '@mrtr/core/store';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDynamoStore, createDynamoTaskStore, createTable } from '../src/index.js';
import { dynamoClient, freshTable, startDynalite, startLossyProxy } from './helpers.js';

describe('DynamoDB store: options, table, foreign items', () => {
  let dynamo: Awaited<ReturnType<typeof startDynalite>>;
  let client: ReturnType<typeof dynamoClient>;
  let tableName: string;
  beforeAll(async () => {
    dynamo = await startDynalite();
    client = dynamoClient(dynamo.endpoint);
    tableName = await freshTable(dynamo.endpoint);
  });
  afterAll(async () => {
    client?.destroy();
    await dynamo?.close();
  });

  it('misuse of the options is a labelled TypeError or RangeError', async () => {
    expect(() => createDynamoStore({ client: {} as never, tableName })).toThrow(/createDynamoStore: client/);
    expect(() => createDynamoStore({ client, tableName: '' })).toThrow(/createDynamoStore: tableName/);
    expect(() => createDynamoStore({ client, tableName, commandTimeoutMs: 0 })).toThrow(RangeError);
    expect(() => createDynamoStore({ client, tableName, outcomeBudgetBytes: -1 })).toThrow(/outcomeBudgetBytes/);
    expect(() => createDynamoStore({ client, tableName, clockSkew: 1 } as never)).toThrow(
      new TypeError('createDynamoStore: unknown option "clockSkew"; did you mean "clockSkewMs"?'),
    );
    expect(() => createDynamoTaskStore({ client, tableName, maxUpdateAttemps: 2 } as never)).toThrow(
      new TypeError('createDynamoTaskStore: unknown option "maxUpdateAttemps"; did you mean "maxUpdateAttempts"?'),
    );
    await expect(createTable(client, tableName, { timeToLiv: false } as never)).rejects.toThrow(
      new TypeError('createTable: unknown option "timeToLiv"; did you mean "timeToLive"?'),
    );
    expect(() => createDynamoTaskStore({ client, tableName, maxLivePerPrincipal: 9, maxPerPrincipal: 3 })).toThrow(RangeError);
    expect(() => createDynamoTaskStore({ client, tableName, maxUpdateAttempts: 0 })).toThrow(/maxUpdateAttempts/);
  });

  it('createTable leaves an existing table as it is', async () => {
    await expect(createTable(client, tableName, { timeToLive: false })).resolves.toBeUndefined();
    const store = createDynamoStore({ client, tableName, namespace: 'again' });
    expect(await store.consume('x', Date.now() + 60_000)).toBe(true);
  });

  it('an item this store did not write fails closed: never a first use, never a record', async () => {
    const store = createDynamoStore({ client, tableName, namespace: 'foreign' });
    const id = 'foreign-id';
    const { createHash } = await import('node:crypto');
    const pk = `r#foreign#${createHash('sha256').update(id).digest('base64url')}`;
    await client.send(new PutItemCommand({ TableName: tableName, Item: { pk: { S: pk }, something: { S: 'else' } } }));
    await expect(store.consume(id, Date.now() + 60_000)).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(store.claim(id, Date.now() + 60_000, 'fp')).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(store.record(id, 'fp', 'out')).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
  });

  it('claim and record whose replies are lost (the SDK retries them) still give first and stored', async () => {
    const proxy = await startLossyProxy(dynamo.endpoint);
    const lossyClient = dynamoClient(proxy.endpoint);
    try {
      const store = createDynamoStore({ client: lossyClient, tableName, namespace: 'lost-outcomes' });
      const exp = Date.now() + 60_000;
      proxy.loseNextReply('late');
      expect(await store.claim('id', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
      proxy.loseNextReply('late');
      expect(await store.record('id', 'fp', 'the-outcome')).toBe(true);
      expect(await store.claim('id', exp, 'fp')).toEqual({ status: 'recorded', outcome: 'the-outcome' });
      expect(await store.claim('id', exp, 'other')).toEqual({ status: 'replayed' });
    } finally {
      lossyClient.destroy();
      await proxy.close();
    }
  });

  it('a failed give-back of outcome bytes goes to onError, and the answers stay right', async () => {
    const errors: BackgroundError[] = [];
    // The real client, except that giving bytes back to the budget fails.
    const failing = {
      send: (command: unknown, options?: unknown) => {
        const input = (command as { input?: { Key?: { pk?: { S?: string } }; ExpressionAttributeValues?: Record<string, { N?: string }> } })
          .input;
        if (
          command instanceof UpdateItemCommand &&
          input?.Key?.pk?.S?.startsWith('b#') &&
          Number(input.ExpressionAttributeValues?.[':n']?.N) < 0
        ) {
          return Promise.reject(new Error('budget item unavailable'));
        }
        return client.send(command as never, options as never);
      },
    } as unknown as typeof client;
    const store = createDynamoStore({ client: failing, tableName, namespace: 'give-back', onError: (e) => errors.push(e) });
    const exp = Date.now() + 60_000;
    expect(await store.claim('id', exp, 'owner')).toEqual({ status: 'first', fence: 0 });
    expect(await store.record('id', 'owner', 'outcome')).toBe(true);
    for (let i = 0; i < 3; i++) expect(await store.claim('id', exp, `guess-${i}`)).toEqual({ status: 'replayed' });
    expect(await store.claim('id', exp, 'owner')).toEqual({ status: 'replayed' }); // the third miss dropped it
    expect(errors.map((e) => e.code)).toEqual(['STORE_RELEASE_FAILED']);
  });

  it('a give-back of outcome bytes whose reply is lost (the SDK sends it again) is subtracted once: the budget holds', async () => {
    const proxy = await startLossyProxy(dynamo.endpoint);
    const lossyClient = dynamoClient(proxy.endpoint);
    const namespace = 'lost-give-back';
    /** The budget's count; the give-back ids are forgotten once answered (the item does not grow with them). */
    const budgetBytes = async (): Promise<number> => {
      const { Item } = await client.send(
        new GetItemCommand({ TableName: tableName, Key: { pk: { S: `b#${namespace}#budget` } }, ConsistentRead: true }),
      );
      expect(Object.keys(Item ?? {}).filter((name) => name.startsWith('g'))).toEqual([]);
      return Number(Item?.t?.N);
    };
    /** The give-back: an update of the budget item that adds a negative amount. */
    const giveBack = (target: string, body: string) =>
      target.endsWith('.UpdateItem') && body.includes(`"b#${namespace}#budget"`) && /":n":\{"N":"-\d+"\}/.test(body);
    try {
      const store = createDynamoStore({ client: lossyClient, tableName, namespace, maxOutcomeBytes: 20, outcomeBudgetBytes: 20 });
      const exp = Date.now() + 60_000;
      expect(await store.claim('dropped', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record('dropped', 'fp', 'x'.repeat(10))).toBe(true);
      expect(await budgetBytes()).toBe(10);
      // Three misses drop the outcome and give its 10 bytes back; that reply is lost, and the SDK sends it again.
      proxy.loseNextReply('late', giveBack);
      for (let i = 0; i < 3; i++) expect(await store.claim('dropped', exp, `guess-${i}`)).toEqual({ status: 'replayed' });
      expect(() => proxy.loseNextReply('late', () => false)).not.toThrow(); // the give-back's reply was the one lost
      proxy.restore();
      expect(await budgetBytes()).toBe(0);
      // The budget still holds 20 bytes, not 30.
      expect(await store.claim('full', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record('full', 'fp', 'y'.repeat(20))).toBe(true);
      expect(await store.claim('over', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
      expect(await store.record('over', 'fp', 'z'.repeat(10))).toBe(false);
      expect(await budgetBytes()).toBe(20);
    } finally {
      lossyClient.destroy();
      await proxy.close();
    }
  });

  it('the namespace is encoded: "a#b" and "a%23b" are two ledgers', async () => {
    const a = createDynamoStore({ client, tableName, namespace: 'a#b' });
    const b = createDynamoStore({ client, tableName, namespace: 'a%23b' });
    const exp = Date.now() + 60_000;
    expect(await a.consume('same', exp)).toBe(true);
    expect(await b.consume('same', exp)).toBe(true);
  });
});

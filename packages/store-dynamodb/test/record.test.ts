// The record path: one conditional UpdateItem once this instance holds an allowance of the outcome budget, the budget
// never passed by what the instances reserve, and a lost reply of that one update still answered as this call's.
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDynamoStore } from '../src/index.js';
import { dynamoClient, freshTable, startDynalite, startLossyProxy } from './helpers.js';

describe('DynamoDB store: record in one request', () => {
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

  /** The real client, counting the commands sent through it by name. */
  const counting = () => {
    const sent: string[] = [];
    const wrapped = {
      send: (command: unknown, options?: unknown) => {
        sent.push((command as object).constructor.name);
        return client.send(command as never, options as never);
      },
    } as unknown as typeof client;
    return { client: wrapped, sent };
  };
  const budgetBytes = async (namespace: string): Promise<number> => {
    const { Item } = await client.send(
      new GetItemCommand({ TableName: tableName, Key: { pk: { S: `b#${namespace}#budget` } }, ConsistentRead: true }),
    );
    return Number(Item?.t?.N ?? 0);
  };

  it('claim + record are two requests (a PutItem and one UpdateItem) once the instance holds an allowance', async () => {
    const { client: wrapped, sent } = counting();
    const store = createDynamoStore({ client: wrapped, tableName, namespace: 'two-requests' });
    const exp = Date.now() + 60_000;
    // The first record reads the id and reserves an allowance (16 KiB of the 64 MiB budget).
    expect(await store.claim('warm', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
    expect(await store.record('warm', 'fp', 'outcome')).toBe(true);
    for (let i = 0; i < 5; i++) {
      sent.length = 0;
      expect(await store.claim(`id-${i}`, exp, 'fp', { owner: `owner-${'x'.repeat(16)}-${i}` })).toEqual({ status: 'first', fence: 0 });
      expect(await store.record(`id-${i}`, 'fp', `outcome-${i}`, { owner: `owner-${'x'.repeat(16)}-${i}` })).toBe(true);
      expect(sent).toEqual(['PutItemCommand', 'UpdateItemCommand']);
    }
    // What was written is what a claim finds, and a record by the same owner answers as the first.
    expect(await store.claim('id-3', exp, 'fp')).toEqual({ status: 'recorded', outcome: 'outcome-3' });
    expect(await store.record('id-3', 'fp', 'outcome-3', { owner: `owner-${'x'.repeat(16)}-3` })).toBe(true);
    expect(await store.record('id-3', 'fp', 'outcome-3')).toBe(false); // recorded already: not by someone else
    expect(await store.record('never-claimed', 'fp', 'outcome')).toBe(false);
    // The budget counts the reservation (16 KiB), never less than the bytes kept.
    expect(await budgetBytes('two-requests')).toBe(16_384);
  });

  it('reservations never pass the budget: instances whose chunks no longer fit take exact bytes, then refuse', async () => {
    const namespace = 'tight';
    // 4096 × 16 bytes: a chunk is 16 bytes, so an outcome of 8 bytes or less comes from an allowance.
    const budget = 4096 * 16;
    const stores = Array.from({ length: 3 }, () => createDynamoStore({ client, tableName, namespace, outcomeBudgetBytes: budget }));
    const exp = Date.now() + 60_000;
    let kept = 0;
    for (let i = 0; i < 40; i++) {
      const store = stores[i % 3] as (typeof stores)[number];
      expect((await store.claim(`small-${i}`, exp, 'fp')).status).toBe('first');
      if (await store.record(`small-${i}`, 'fp', `${i}`.padEnd(8, 's'))) kept++;
    }
    expect(kept).toBe(40);
    // Three allowances of 16 bytes held (some used), far below the budget.
    expect(await budgetBytes(namespace)).toBeLessThanOrEqual(40 * 8 + 3 * 16);
    // Fill the rest with large outcomes (exact takes): the count stops at the budget, never past it.
    const big = 'b'.repeat(16_000);
    for (let i = 0; i < 6; i++) {
      await stores[0]?.claim(`big-${i}`, exp, 'fp');
      await stores[0]?.record(`big-${i}`, 'fp', big);
    }
    const held = await budgetBytes(namespace);
    expect(held).toBeLessThanOrEqual(budget);
    // A store with nothing reserved now gets no chunk: an outcome that does not fit is done, not kept.
    const fresh = createDynamoStore({ client, tableName, namespace, outcomeBudgetBytes: budget });
    await fresh.claim('late', exp, 'fp');
    const room = budget - held;
    expect(await fresh.record('late', 'fp', 'l'.repeat(Math.min(room + 1, 16_384)))).toBe(false);
    expect(await fresh.claim('late', exp, 'fp')).toEqual({ status: 'replayed' });
    expect(await budgetBytes(namespace)).toBeLessThanOrEqual(budget);
  });

  it('the one update whose reply is lost (the SDK sends it again) is still this call’s: stored, true', async () => {
    const proxy = await startLossyProxy(dynamo.endpoint);
    const lossyClient = dynamoClient(proxy.endpoint);
    try {
      const store = createDynamoStore({ client: lossyClient, tableName, namespace: 'lost-fast' });
      const exp = Date.now() + 60_000;
      await store.claim('warm', exp, 'fp');
      expect(await store.record('warm', 'fp', 'w')).toBe(true);
      expect(await store.claim('id', exp, 'fp')).toEqual({ status: 'first', fence: 0 });
      proxy.loseNextReply('late', (target, body) => target.endsWith('.UpdateItem') && body.includes('"r#lost-fast#'));
      expect(await store.record('id', 'fp', 'the-outcome')).toBe(true);
      expect(() => proxy.loseNextReply('late', () => false)).not.toThrow(); // the update's reply was the one lost
      proxy.restore();
      expect(await store.claim('id', exp, 'fp')).toEqual({ status: 'recorded', outcome: 'the-outcome' });
      expect(await store.record('id', 'fp', 'the-outcome')).toBe(false);
    } finally {
      lossyClient.destroy();
      await proxy.close();
    }
  });
});

import { storeCompliance, taskStoreCompliance } from '@mrtr/test-suite';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { createDynamoStore, createDynamoTaskStore } from '../src/index.js';
import { dynamoClient, freshTable, startDynalite, startLossyProxy } from './helpers.js';

// dynalite has no TTL and the replay store judges expiry in its conditions by the service's clock as it measures it
// from replies' `Date` headers: the replies reach the store through a proxy that dates them by the suite's fake clock,
// which is also the stores' `now` (the task store judges by it). The suite's exact-expiry tests need ids kept exactly to their expiry: clockSkewMs 0.
let time = 1_700_000_000_000; // the suite's clock: its state guards mint on it too
const clock = { now: () => time, advance: (ms: number) => void (time += ms) };
const clockSkewMs = 0;
// dynalite runs the 64 conditional puts on one item one after another, slowly on a loaded machine: the suite is about
// outcomes, not timeouts (the unreachable store keeps a short one).
const commandTimeoutMs = 60_000;

describe('DynamoDB stores on dynalite', () => {
  let dynamo: Awaited<ReturnType<typeof startDynalite>>;
  let tableName: string;
  let client: ReturnType<typeof dynamoClient>;
  let dated: Awaited<ReturnType<typeof startLossyProxy>>;
  beforeAll(async () => {
    dynamo = await startDynalite();
    tableName = await freshTable(dynamo.endpoint);
    dated = await startLossyProxy(dynamo.endpoint, { serviceClock: clock.now });
    client = dynamoClient(dated.endpoint);
  });
  afterAll(async () => {
    client?.destroy();
    await dated?.close();
    await dynamo?.close();
  });

  storeCompliance(it, (o) => createDynamoStore({ ...o, client, tableName, now: clock.now, commandTimeoutMs, clockSkewMs }), {
    name: 'dynamodb',
    outcomes: true,
    keyFingerprints: true,
    declares: { clock: true, leases: true, epoch: true },
    clock,
    timeoutMs: 120_000,
    unreachable: () =>
      createDynamoStore({ client: dynamoClient('http://127.0.0.1:1', 1), tableName: 'nowhere', commandTimeoutMs: 500, now: clock.now }),
    lostReply: async ({ namespace }) => {
      const proxy = await startLossyProxy(dynamo.endpoint, { serviceClock: clock.now });
      const lossyClient = dynamoClient(proxy.endpoint);
      const store = createDynamoStore({ client: lossyClient, tableName, namespace, commandTimeoutMs, now: clock.now, clockSkewMs });
      return {
        store,
        loseNextReply: (mode) => proxy.loseNextReply(mode),
        restore: () => proxy.restore(),
        close: async () => {
          await store.close();
          lossyClient.destroy();
          await proxy.close();
        },
      };
    },
  });

  taskStoreCompliance(it, (o) => createDynamoTaskStore({ ...o, client, tableName, now: clock.now, commandTimeoutMs }), {
    name: 'dynamodb tasks',
    clock,
    timeoutMs: 120_000,
  });
});

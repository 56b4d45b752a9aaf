// A state guard over the DynamoDB store learns the service's clock through `time()`: on dynalite behind a proxy that
// dates every reply 60 s ahead of this process, it reports the offset and refuses to serve (ERR_CLOCK_SKEW).
import { createHmacCodec } from '@mrtr/codec-hmac';
import { createStateGuard, generateKey, KeyRing, MrtrError } from '@mrtr/core';
import type { MrtrEvent } from '@mrtr/core/events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDynamoStore } from '../src/index.js';
import { dynamoClient, freshTable, startDynalite, startLossyProxy } from './helpers.js';

const AHEAD = 60_000;
const code = (promise: Promise<unknown>) =>
  promise.then(
    () => 'resolved',
    (error: unknown) => (MrtrError.is(error) ? error.code : String(error)),
  );

describe('DynamoDB store: a guard measures the service clock', () => {
  let dynamo: Awaited<ReturnType<typeof startDynalite>>;
  let ahead: Awaited<ReturnType<typeof startLossyProxy>>;
  let client: ReturnType<typeof dynamoClient>;
  let direct: ReturnType<typeof dynamoClient>;
  let tableName: string;
  beforeAll(async () => {
    dynamo = await startDynalite();
    tableName = await freshTable(dynamo.endpoint);
    ahead = await startLossyProxy(dynamo.endpoint, { serviceClock: () => Date.now() + AHEAD });
    client = dynamoClient(ahead.endpoint);
    direct = dynamoClient(dynamo.endpoint);
  });
  afterAll(async () => {
    client?.destroy();
    direct?.destroy();
    await ahead?.close();
    await dynamo?.close();
  });

  it('a service 60 s ahead: checkClock reports skewed with an offset near 60 s, and spends and mints refuse ERR_CLOCK_SKEW', async () => {
    const keys = new KeyRing([{ kid: 'k1', secret: generateKey() }]);
    const store = createDynamoStore({ client, tableName, namespace: 'ahead' });
    const events: MrtrEvent[] = [];
    const guard = createStateGuard({
      keys,
      codec: createHmacCodec,
      store,
      audience: 'aud',
      clockSkewMs: 5_000,
      onEvent: (event) => events.push(event),
    });
    const request = { method: 'tools/call', target: 't', arguments: {}, principal: 'p' };
    const sample = await guard.checkClock();
    expect(sample.skewed).toBe(true);
    // The Date header has whole seconds: the offset is known to within a second and the round trip.
    expect(Math.abs(sample.offsetMs - AHEAD)).toBeLessThanOrEqual(1_000 + sample.uncertaintyMs + store.clockOffset()!.uncertaintyMs);
    expect(events.filter((e) => e.type === 'store.clock').at(-1)).toMatchObject({ skewed: true, toleranceMs: 5_000 });
    expect(await code(guard.mint(null, request))).toBe('ERR_CLOCK_SKEW');

    // The same guard's keys over a service on time: the state is served; then through the skewed store it is refused.
    const onTimeStore = createDynamoStore({ client: direct, tableName, namespace: 'ahead' });
    const onTime = createStateGuard({ keys, codec: createHmacCodec, store: onTimeStore, audience: 'aud', clockSkewMs: 5_000 });
    expect((await onTime.checkClock()).skewed).toBe(false);
    const token = await onTime.mint(null, request);
    expect(await code(guard.open(token, request))).toBe('ERR_CLOCK_SKEW');
    expect(await code(guard.admit(token, request, null))).toBe('ERR_CLOCK_SKEW');
    expect(await code(onTime.open(token, request))).toBe('resolved');
  });
});

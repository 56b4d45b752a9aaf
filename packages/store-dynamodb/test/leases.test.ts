// Leases, the epoch and the measured service clock of the DynamoDB store, on dynalite behind a proxy that dates
// every reply by a service clock the test sets (30 s ahead of the stores' clock) and loses replies on command.
import { DeleteItemCommand, DeleteTableCommand, DescribeTableCommand, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { MrtrError } from '@mrtr/core';
import { ownerValues } from '@mrtr/core/store';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDynamoStore, createTable, type DynamoStoreOptions } from '../src/index.js';
import { dynamoClient, freshTable, startDynalite, startLossyProxy } from './helpers.js';

const SKEW = 30_000;
let time = 1_700_000_000_000; // whole seconds: advanced by whole seconds, the service's Date headers stay exact
const clock = { now: () => time, advance: (ms: number) => void (time += ms) };
const service = () => time + SKEW;
const owner = (): string => ownerValues(1)[0] as string;
const code = (promise: Promise<unknown>) =>
  promise.then(
    (value) => `resolved ${JSON.stringify(value)}`,
    (error: unknown) => (MrtrError.is(error) ? error.code : String(error)),
  );
const updates = (part: string) => (target: string, body: string) => target.endsWith('.UpdateItem') && body.includes(part);

describe('DynamoDB store: leases, epoch, service clock', () => {
  let dynamo: Awaited<ReturnType<typeof startDynalite>>;
  let proxy: Awaited<ReturnType<typeof startLossyProxy>>;
  let client: ReturnType<typeof dynamoClient>;
  let tableName: string;
  let plainClient: ReturnType<typeof dynamoClient>;
  let n = 0;
  const store = (extra: Partial<DynamoStoreOptions> = {}) =>
    createDynamoStore({ client, tableName, namespace: `ns-${n++}`, now: clock.now, clockSkewMs: 0, ...extra });
  beforeAll(async () => {
    dynamo = await startDynalite();
    tableName = await freshTable(dynamo.endpoint);
    proxy = await startLossyProxy(dynamo.endpoint, { serviceClock: service });
    client = dynamoClient(proxy.endpoint);
    plainClient = dynamoClient(dynamo.endpoint);
  });
  afterAll(async () => {
    client?.destroy();
    plainClient?.destroy();
    await proxy?.close();
    await dynamo?.close();
  });

  it('measures the service clock from Date headers: the true offset within the bound, narrowing with samples', async () => {
    const s = store();
    expect(s.capabilities).toMatchObject({ clock: true, leases: true, epoch: true });
    expect(s.clockOffset()).toBeUndefined();
    await s.consume('a', time + 60_000);
    const first = s.clockOffset()!;
    expect(Math.abs(first.offsetMs - SKEW)).toBeLessThanOrEqual(first.uncertaintyMs);
    expect(first.uncertaintyMs).toBe(500); // one sample: the Date header's whole second
    clock.advance(400); // off the second: the next sample cuts the interval
    await s.consume('b', time + 60_000);
    const second = s.clockOffset()!;
    expect(Math.abs(second.offsetMs - SKEW)).toBeLessThanOrEqual(second.uncertaintyMs);
    expect(second.uncertaintyMs).toBe(300);
    clock.advance(600);
    const behind = store({ now: () => time - 20_000 });
    await behind.consume('c', time + 60_000);
    const far = behind.clockOffset()!;
    expect(Math.abs(far.offsetMs - (SKEW + 20_000))).toBeLessThanOrEqual(far.uncertaintyMs);
    // time() is that clock: the service's within the bound, read after a request of its own.
    const read = await behind.time();
    expect(Math.abs(read - service())).toBeLessThanOrEqual(behind.clockOffset()!.uncertaintyMs);
    // A process whose clock agrees with every reply keeps its own milliseconds (offset 0, the bound the whole second).
    const synced = createDynamoStore({ client: plainClient, tableName, now: Date.now });
    const t = await synced.time();
    expect(synced.clockOffset()).toMatchObject({ offsetMs: 0 });
    expect(synced.clockOffset()!.uncertaintyMs).toBeLessThanOrEqual(1_000 + 5_000);
    expect(Math.abs(t - Date.now())).toBeLessThan(5_000);
  });

  it('expiry is judged by the service clock: an expiry it has passed is refused ERR_STATE_EXPIRED and nothing written', async () => {
    const s = store(); // its process clock 30 s behind the service's
    for (const op of [(id: string, exp: number) => s.consume(id, exp), (id: string, exp: number) => s.claim(id, exp, 'fp')]) {
      const id = `late-${n++}`;
      // Live by this process's clock, expired by the service's (before its first reply: it measures first).
      expect(await code(op(id, time + 10_000))).toBe('ERR_STATE_EXPIRED');
      expect(await code(op(id, service()))).toBe('ERR_STATE_EXPIRED');
      expect(await code(op(id, service() + 1_500))).toMatch(/^resolved (true|\{"status":"first")/);
      expect(await code(op(id, service() + 1_500))).toMatch(/^resolved (false|\{"status":"(pending|replayed)")/);
    }
    // Held ids are freed by the service's clock too: once it passes the item's expiry, the id is free again.
    const id = `freed-${n++}`;
    expect(await s.consume(id, service() + 2_000)).toBe(true);
    clock.advance(3_000);
    expect(await s.consume(id, service() + 60_000)).toBe(true);
  });

  it('leases: pending with leaseLeftMs, renew, unknown once lapsed, reclaim with the next fence', async () => {
    const s = store();
    const [a, b, c] = [owner(), owner(), owner()];
    const exp = time + 600_000;
    expect(await s.claim('id', exp, 'fp', { owner: a, leaseMs: 3_000 })).toEqual({ status: 'first', fence: 0 });
    expect(await s.claim('id', exp, 'fp', { owner: b, leaseMs: 3_000 })).toEqual({ status: 'pending', leaseLeftMs: 3_000 });
    clock.advance(1_000);
    expect(await s.claim('id', exp, 'fp', { owner: b, leaseMs: 3_000, reclaim: true })).toEqual({ status: 'pending', leaseLeftMs: 2_000 });
    expect(await s.renew('id', a, 3_000)).toBe(true);
    expect(await s.renew('id', b, 3_000)).toBe(false);
    expect(await s.claim('id', exp, 'fp')).toEqual({ status: 'pending', leaseLeftMs: 3_000 });
    clock.advance(3_000);
    expect(await s.claim('id', exp, 'fp', { owner: b, leaseMs: 3_000 })).toEqual({ status: 'unknown' });
    expect(await s.claim('id', exp, 'other')).toEqual({ status: 'replayed' });
    expect(await s.renew('id', a, 3_000)).toBe(true); // lapsed, nobody took it over: its owner was only slow
    clock.advance(3_000);
    expect(await s.claim('id', exp, 'fp', { owner: b, leaseMs: 3_000, reclaim: true })).toEqual({ status: 'first', fence: 1 });
    expect(await s.renew('id', a, 3_000)).toBe(false);
    expect(await s.record('id', 'fp', 'late', { owner: a })).toBe(false);
    expect(await s.release('id', a)).toBe(false);
    clock.advance(3_000);
    expect(await s.claim('id', exp, 'fp', { owner: c, leaseMs: 3_000, reclaim: true })).toEqual({ status: 'first', fence: 2 });
    expect(await s.record('id', 'fp', 'done', { owner: c })).toBe(true);
    expect(await s.claim('id', exp, 'fp', { owner: b, leaseMs: 1, reclaim: true })).toEqual({ status: 'recorded', outcome: 'done' });
  });

  it('a lease is judged by the service clock: stores 20 s apart agree on it, and a first claim is written on it', async () => {
    const namespace = `agree-${n++}`;
    const on = (offset: number) => createDynamoStore({ client, tableName, namespace, now: () => time + offset, clockSkewMs: 0 });
    const [right, slow, fast] = [on(0), on(-20_000), on(20_000)];
    await slow.consume('warm', time + 600_000);
    await fast.consume('warm2', time + 600_000);
    // `right` has no reply yet: its first claim measures the service's clock before it writes the lease.
    expect(await right.claim('id', time + 600_000, 'fp', { owner: owner(), leaseMs: 5_000 })).toMatchObject({ status: 'first' });
    const left = (await slow.claim('id', time + 600_000, 'fp')) as { leaseLeftMs?: number };
    expect(Math.abs((left.leaseLeftMs ?? 0) - 5_000)).toBeLessThanOrEqual(1_000);
    expect(await fast.claim('id', time + 600_000, 'fp')).toMatchObject({ status: 'pending' });
    clock.advance(6_000);
    expect(await slow.claim('id', time + 600_000, 'fp')).toEqual({ status: 'unknown' });
  });

  it('record only by the owner and twice by it as once; release compare-and-delete; no owner or leaseMs: no lease', async () => {
    const s = store();
    const [a, b] = [owner(), owner()];
    const exp = time + 600_000;
    await s.claim('id', exp, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await s.record('id', 'fp', 'theirs', { owner: b })).toBe(false);
    expect(await s.record('id', 'fp', 'out', { owner: a })).toBe(true);
    expect(await s.record('id', 'fp', 'out', { owner: a })).toBe(true);
    expect(await s.record('id', 'fp', 'out', { owner: b })).toBe(false);
    expect(await s.release('id', a)).toBe(false);
    await s.claim('owned-nr', exp, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await s.record('owned-nr', 'fp', 'nobody')).toBe(false); // a claim with an owner: only it records
    await s.claim('plain-nr', exp, 'fp');
    expect(await s.record('plain-nr', 'fp', 'anyone')).toBe(true); // one without: anyone with the fingerprint
    await s.claim('big', exp, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await s.record('big', 'fp', 'x'.repeat(s.maxOutcomeBytes + 1), { owner: a })).toBe(false);
    expect(await s.record('big', 'fp', 'small', { owner: a })).toBe(false);
    await s.claim('free', exp, 'fp', { owner: a, leaseMs: 60_000 });
    expect(await s.release('free', b)).toBe(false);
    expect(await s.release('free', a)).toBe(true);
    expect(await s.release('free', a)).toBe(true);
    expect(await s.claim('free', exp, 'fp', { owner: b, leaseMs: 60_000 })).toEqual({ status: 'first', fence: 0 });
    expect(await s.release('free', a)).toBe(false);
    await s.claim('plain', exp, 'fp');
    await s.claim('owned', exp, 'fp', { owner: a });
    clock.advance(100_000);
    for (const id of ['plain', 'owned']) {
      expect(await s.claim(id, exp, 'fp', { owner: b, leaseMs: 10, reclaim: true })).toEqual({ status: 'pending' });
    }
    await expect(s.renew('id', 'short', 10)).rejects.toThrow(RangeError);
    await expect(s.claim('x', exp, 'fp', { owner: a, leaseMs: 0 })).rejects.toThrow(RangeError);
  });

  it('lost replies: a reclaim, renew, release and record by owner whose replies are lost answer as if they arrived', async () => {
    const s = store();
    const [a, b] = [owner(), owner()];
    const exp = time + 600_000;
    await s.claim('id', exp, 'fp', { owner: a, leaseMs: 1_000 });
    clock.advance(1_000);
    proxy.loseNextReply('late', updates('"#f"'));
    expect(await s.claim('id', exp, 'fp', { owner: b, leaseMs: 5_000, reclaim: true })).toEqual({ status: 'first', fence: 1 });
    proxy.loseNextReply('late', updates('SET #le = :le'));
    expect(await s.renew('id', b, 5_000)).toBe(true);
    proxy.loseNextReply('late', updates('"#out"'));
    expect(await s.record('id', 'fp', 'out', { owner: b })).toBe(true);
    expect(await s.claim('id', exp, 'fp')).toEqual({ status: 'recorded', outcome: 'out' });
    await s.claim('other', exp, 'fp', { owner: a, leaseMs: 1_000 });
    proxy.loseNextReply('late', (target) => target.endsWith('.DeleteItem'));
    expect(await s.release('other', a)).toBe(true);
    expect(await s.claim('other', exp, 'fp', { owner: b, leaseMs: 1_000 })).toEqual({ status: 'first', fence: 0 });
    proxy.loseNextReply('lost');
    expect(await code(s.renew('other', b, 1_000))).toBe('ERR_STORE_UNAVAILABLE');
    expect(await code(s.release('other', b))).toBe('ERR_STORE_UNAVAILABLE');
    proxy.restore();
  });

  it('epoch: a deleted epoch item or table starts a new epoch; an older mintedAtMs is refused, a newer accepted', async () => {
    const namespace = `epoch-${n++}`;
    const s = createDynamoStore({ client, tableName, namespace, now: clock.now, clockSkewMs: 0 });
    const exp = time + 600_000;
    expect(await s.consume('spent', exp), 'step 1').toBe(true); // the first spend writes the epoch
    clock.advance(60_000);
    const older = service() - 10_000; // after that epoch, before the loss
    expect(await s.consume('a', exp, { mintedAtMs: older }), 'step 2').toBe(true);
    await client.send(new DeleteItemCommand({ TableName: tableName, Key: { pk: { S: `e#${namespace}#epoch` } } }));
    clock.advance(1_000);
    proxy.loseNextReply('late', (target, body) => target.endsWith('.PutItem') && body.includes('#epoch'));
    expect(await code(s.consume('b', exp, { mintedAtMs: older })), 'step 3').toBe('ERR_LEDGER_LOST');
    expect(await code(s.claim('c', exp, 'fp', { mintedAtMs: older })), 'step 4').toBe('ERR_LEDGER_LOST');
    const since = await s.ledgerEpoch(); // the epoch the refused spends wrote (its put's reply lost, then read)
    expect(since, 'step 5').toBeGreaterThan(older);
    expect(since, 'step 5').toBeLessThanOrEqual(service());
    expect(await s.consume('d', exp, { mintedAtMs: since }), 'step 5').toBe(true);

    const other = await freshTable(dynamo.endpoint);
    const t = createDynamoStore({ client, tableName: other, namespace, now: clock.now, clockSkewMs: 0 });
    expect(await t.consume('spent', exp, { mintedAtMs: service() + 1_000 }), 'step 6').toBe(true);
    clock.advance(60_000);
    const before = service() - 10_000;
    await client.send(new DeleteTableCommand({ TableName: other }));
    for (let i = 0; i < 200; i++) {
      // dynalite drops a table's items after it answered: wait until the table is gone (bounded: 200 × 50 ms)
      const gone = await client.send(new DescribeTableCommand({ TableName: other })).then(
        () => false,
        (error: { name?: string }) => error.name === 'ResourceNotFoundException',
      );
      if (gone) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await createTable(client, other, { timeToLive: false });
    expect(await code(t.consume('spent', exp, { mintedAtMs: before })), 'step 7').toBe('ERR_LEDGER_LOST');
    // The refused spend ran after the epoch read and wrote nothing: a state minted on the new ledger takes the id.
    const begun = await t.ledgerEpoch();
    expect(begun, 'step 8').toBeGreaterThan(before);
    expect(await t.consume('spent', exp, { mintedAtMs: begun }), 'step 8').toBe(true);
    expect(await t.consume('spent', exp, { mintedAtMs: begun }), 'step 9').toBe(false);
  });

  it('ledgerEpoch: writes the namespace epoch item where missing, never after the service clock, and answers it ever after', async () => {
    const namespace = `ledger-${n++}`;
    const on = () => createDynamoStore({ client, tableName, namespace, now: clock.now, clockSkewMs: 0 });
    const s = on();
    const read = async () =>
      (await client.send(new GetItemCommand({ TableName: tableName, Key: { pk: { S: `e#${namespace}#epoch` } }, ConsistentRead: true })))
        .Item;
    expect(await read(), 'a fresh namespace has no epoch').toBeUndefined();
    proxy.loseNextReply('late', (target, body) => target.endsWith('.PutItem') && body.includes('#epoch'));
    const epoch = await s.ledgerEpoch(); // its put's reply lost: settled by reading the item that landed
    expect(Number((await read())?.at?.N)).toBe(epoch);
    // Dated by the earliest the service clock may read (one sample: the Date header's whole second), never after it.
    expect(epoch).toBeLessThanOrEqual(service());
    expect(epoch).toBeGreaterThan(service() - 1_000);
    clock.advance(60_000);
    expect(await s.ledgerEpoch(), 'again: the epoch never moves').toBe(epoch);
    expect(await on().ledgerEpoch(), 'another store of the namespace').toBe(epoch);
    const exp = time + 600_000;
    expect(await s.consume('a', exp, { mintedAtMs: epoch }), 'a state minted on it').toBe(true);
    expect(await s.claim('b', exp, 'fp', { mintedAtMs: epoch })).toEqual({ status: 'first', fence: 0 });
    expect(await code(s.consume('c', exp, { mintedAtMs: epoch - 1 }))).toBe('ERR_LEDGER_LOST');
    expect(await s.consume('c', exp, { mintedAtMs: epoch }), 'the refused spend wrote nothing').toBe(true);
    proxy.loseNextReply('lost');
    expect(await code(on().ledgerEpoch()), 'every reply lost').toBe('ERR_STORE_UNAVAILABLE');
    proxy.restore();
    await s.close();
    expect(await code(s.ledgerEpoch()), 'closed').toBe('ERR_STORE_UNAVAILABLE');
  });
});

import { createHash } from 'node:crypto';
import { MrtrError } from '@mrtr/core';
import { StoreUnavailableError } from '@mrtr/core/errors';
import { createBatcher, ownerValues } from '@mrtr/core/store';
import { ReplyError } from 'ioredis';
import type { RedisConnection } from './connection.js';
import { expiredError, ledgerLostError } from './scripts.js';
import { hashSlot } from './hash-slot.js';
import { resolveLostBatch } from './lost-reply.js';
import type { Waiter } from './waiter.js';

/**
 * The consume script, judged by Redis's clock (`TIME`). KEYS: the ledger's epoch key (of these ids' hash slot), then
 * the ids. ARGV: the extra retention (ms), then per id its owner value, its `expiresAtMs` and its `mintedAtMs` (`''`:
 * none). The epoch key is written with `TIME` when missing (a ledger that began now). Per id the reply is `-2` (minted
 * before the epoch: the ledger may have lost it), `-1` (`expiresAtMs` at or before Redis's clock: nothing written,
 * never a `PXAT` in Redis's past), `1` (`SET … PXAT expiresAtMs + retention NX` set it: this consume won) or `0` (a live
 * key); after them, the epoch (so that a Cluster's store raises the ledger's master key to a slot's epoch begun
 * again: see `epoch.ts`). A repeated key in one call is 1 at most once. Scripts are not rolled back: when a `SET` fails (OOM, READONLY)
 * the keys before it stay written, so a failed call is resolved key by key from the owners (see resolveLostBatch).
 */
const BATCH_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local es = redis.call('GET', KEYS[1])
if not es then es = string.format('%.0f', now) redis.call('SET', KEYS[1], es) end
local e = tonumber(es)
local keep = tonumber(ARGV[1])
local r = {}
for i = 2, #KEYS do
  local a = 3 * (i - 2) + 2
  local exp, minted = tonumber(ARGV[a + 1]), ARGV[a + 2]
  if minted ~= '' and tonumber(minted) < e then r[i - 1] = -2
  elseif exp <= now then r[i - 1] = -1
  elseif redis.call('SET', KEYS[i], ARGV[a], 'PXAT', string.format('%.0f', exp + keep), 'NX') then r[i - 1] = 1
  else r[i - 1] = 0 end
end
r[#KEYS] = es
return r`;
const BATCH_SHA = createHash('sha1').update(BATCH_SCRIPT).digest('hex');

/** Batches one store keeps in flight at once. */
const MAX_IN_FLIGHT = 2;

/** `EVALSHA` of a script, `EVAL` when the server does not have it cached; every call bounded. */
export async function evalScript(
  connection: RedisConnection,
  script: string,
  sha: string,
  args: (string | number)[],
  count: number,
): Promise<unknown> {
  try {
    return await connection.bounded(connection.commands.evalsha(sha, count, ...args));
  } catch (error) {
    // Not cached on this server (first use, a restart, SCRIPT FLUSH): nothing ran; EVAL loads it.
    if (error instanceof ReplyError && String((error as Error).message).startsWith('NOSCRIPT')) {
      return connection.bounded(connection.commands.eval(script, count, ...args));
    }
    throw error;
  }
}

/**
 * Runs one batch with `sendGroup`: as one group on one Redis (or for a lone entry), grouped by hash slot on a Cluster
 * (one call per slot, in parallel). A closed store fails every entry closed instead.
 */
export async function runBySlot<E extends { readonly key: string; reject(error: unknown): void }>(
  batch: E[],
  isCluster: boolean,
  isClosed: () => boolean,
  sendGroup: (group: E[]) => Promise<void>,
): Promise<void> {
  if (isClosed()) {
    const failure = new StoreUnavailableError({ cause: new Error('store is closed') });
    for (const entry of batch) entry.reject(failure);
    return;
  }
  if (!isCluster || batch.length === 1) return sendGroup(batch);
  const slots = new Map<number, E[]>();
  for (const entry of batch) {
    const slot = hashSlot(entry.key);
    const group = slots.get(slot);
    if (group === undefined) slots.set(slot, [entry]);
    else group.push(entry);
  }
  await Promise.all([...slots.values()].map(sendGroup));
}

/** The consume queue of one store: what it sends and when (see {@link createConsumeQueue}). */
export interface ConsumeQueue {
  /** Queues a consume of `key` (batched with others while a call is in flight). */
  enqueue(key: string, exp: number, minted: number | undefined): Promise<boolean>;
  /** Sends one consume at once, on its own (an unbatched store). */
  sendNow(key: string, exp: number, minted: number | undefined): Promise<boolean>;
  /** Fails every queued consume with `error` (a batch in flight settles by itself). */
  failAll(error: unknown): void;
}

/** What the consume queue needs of its store. */
export interface ConsumeQueueOptions {
  readonly maxBatchSize: number;
  readonly maxQueued: number;
  /** Extra time a key is kept after its `expiresAtMs` (ms). */
  readonly extraRetentionMs: number;
  /** The epoch key of the ledger for a key (one per hash slot on a Cluster: see `epoch.ts`). */
  epochKey(key: string): string;
  /** The epoch a consume script answered for its slot (see `EpochKeeper.saw`); settles before its consumes are answered. */
  sawEpoch(epoch: unknown): Promise<void>;
  /** The fallback for a client that may not run scripts (ACL without `EVALSHA`/`EVAL`): one consume by plain commands. */
  sendPlain(waiter: Waiter): Promise<boolean>;
}

/** Settles a waiter from its entry of the consume script's reply. */
export function settleWaiter(waiter: Waiter, reply: unknown): void {
  if (reply === 1) waiter.resolve(true);
  else if (reply === 0) waiter.resolve(false);
  else if (reply === -1) waiter.reject(expiredError());
  else if (reply === -2) waiter.reject(ledgerLostError());
  else waiter.reject(new StoreUnavailableError({ cause: new Error('unexpected reply to the consume script') }));
}

/**
 * Batching: consumes that arrive while a call is in flight are sent together as one call of the consume script (on a
 * Cluster one call per hash slot, in parallel), each with its own answer; a lone consume is the same script with one
 * key (Redis's clock decides expiry and epoch, so no plain `SET` is sent unless scripts are refused).
 */
export function createConsumeQueue(connection: RedisConnection, options: ConsumeQueueOptions, isClosed: () => boolean): ConsumeQueue {
  const { maxBatchSize, maxQueued, extraRetentionMs, epochKey, sawEpoch, sendPlain } = options;
  const isCluster = (connection.client as { isCluster?: unknown }).isCluster === true;

  /** Settles one waiter by plain commands; a synchronous throw of the client (a Cluster without nodes) fails it closed too. */
  const sendLonePlain = async (waiter: Waiter): Promise<void> => {
    try {
      waiter.resolve(await sendPlain(waiter));
    } catch (error) {
      waiter.reject(MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error }));
    }
  };
  /** One script call for a group of consumes whose keys share a hash slot; settles every waiter. */
  let scriptDenied = false;
  const sendGroup = async (group: Waiter[]): Promise<void> => {
    if (scriptDenied) {
      await Promise.all(group.map(sendLonePlain));
      return;
    }
    const owners = ownerValues(group.length);
    const keys = [epochKey((group[0] as Waiter).key), ...group.map((waiter) => waiter.key)];
    const args: (string | number)[] = [...keys, extraRetentionMs];
    group.forEach((waiter, i) => {
      args.push(owners[i] as string, waiter.exp, waiter.minted === undefined ? '' : waiter.minted);
    });
    let reply: unknown;
    try {
      reply = await evalScript(connection, BATCH_SCRIPT, BATCH_SHA, args, keys.length);
    } catch (error) {
      // An ACL without EVALSHA/EVAL: the script never ran; send this batch and every later one by plain commands.
      if (error instanceof ReplyError && String((error as Error).message).startsWith('NOPERM')) {
        scriptDenied = true;
        return sendGroup(group);
      }
      // Never sent: nothing written. Anything else (timeout, connection lost, an error part-way through
      // the script, whose earlier SETs stay) is resolved from the owners.
      if (MrtrError.is(error) || (error instanceof Error && error.message.includes("Stream isn't writeable"))) {
        const failure = error instanceof StoreUnavailableError ? error : new StoreUnavailableError({ cause: error });
        for (const waiter of group) waiter.reject(failure);
        return;
      }
      return resolveLostBatch(connection, group, owners, error);
    }
    if (!Array.isArray(reply) || reply.length !== group.length + 1) {
      return resolveLostBatch(connection, group, owners, new Error('unexpected reply to the batch script'));
    }
    await sawEpoch(reply[group.length]);
    group.forEach((waiter, i) => {
      settleWaiter(waiter, reply[i]);
    });
  };

  /** One batch: grouped by hash slot on a Cluster (one script call per slot, in parallel). */
  const runBatch = (batch: Waiter[]): Promise<void> => runBySlot(batch, isCluster, isClosed, sendGroup);

  /**
   * Queues a consume (see `createBatcher`). One that finds nothing in flight is sent at once, alone (no added latency,
   * no timer). The ones that arrive while something is in flight are sent together at the end of the tick when fewer
   * than two calls are in flight, else as soon as one is answered (at most `maxBatchSize` per call). Two in flight keep
   * the connection busy while the answers of one are handed out, so waves of consumers do not alternate between a lone
   * call and a batch.
   */
  const batcher = createBatcher<Waiter, boolean>({
    maxBatchSize,
    maxQueued,
    maxInFlight: MAX_IN_FLIGHT,
    runLoneAtOnce: true,
    run: runBatch,
    batchError: (error) => new StoreUnavailableError({ cause: error }),
  });
  const enqueue = (key: string, exp: number, minted: number | undefined): Promise<boolean> =>
    batcher.add((resolve, reject) => ({ key, exp, minted, resolve, reject }));
  const sendNow = (key: string, exp: number, minted: number | undefined): Promise<boolean> =>
    new Promise<boolean>((resolve, reject) => {
      runBatch([{ key, exp, minted, resolve, reject }]).catch(reject);
    });

  return { enqueue, sendNow, failAll: (error) => batcher.failAll(() => error) };
}

import { createHash } from 'node:crypto';
import { MrtrError } from '@mrtr/core';
import { type BatchEntry, createBatcher, ownerValues, StoreUnavailableError } from '@mrtr/core/authoring';
import { ReplyError } from 'ioredis';
import type { RedisConnection } from './connection.js';
import { hashSlot } from './hash-slot.js';
import { resolveLostBatch } from './lost-reply.js';

/**
 * One `SET key owner PXAT at NX` per key (ARGV holds owner and at for each key, in order); the reply
 * lists 1 (set: this consume won) or 0 (a live key) per key. A repeated key in one call is 1 at most once.
 * Scripts are not rolled back: when a `SET` fails (OOM, READONLY) the keys before it stay written, so a
 * failed call is resolved key by key from the owners (see resolveLostBatch).
 */
const BATCH_SCRIPT =
  "local r = {} for i = 1, #KEYS do if redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'PXAT', ARGV[2 * i], 'NX') " +
  'then r[i] = 1 else r[i] = 0 end end return r';
const BATCH_SHA = createHash('sha1').update(BATCH_SCRIPT).digest('hex');

/** Batches one store keeps in flight at once. */
const MAX_IN_FLIGHT = 2;

/** One consume waiting for its batch. */
export interface Waiter extends BatchEntry<boolean> {
  readonly key: string;
  readonly at: number;
}

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
  /** Queues a consume of `key` until `at` (epoch ms); resolves `true` for a first use. */
  enqueue(key: string, at: number): Promise<boolean>;
  /** Fails every queued consume with `error` (a batch in flight settles by itself). */
  failAll(error: unknown): void;
}

/**
 * Batching: consumes that arrive while a call is in flight are sent together as one call of the batch script
 * (on a Cluster one call per hash slot, in parallel), each with its own answer; a lone consume is `send`, the
 * plain `SET` of an unbatched store.
 */
export function createConsumeQueue(
  connection: RedisConnection,
  limits: { readonly maxBatchSize: number; readonly maxQueued: number },
  send: (key: string, at: number) => Promise<boolean>,
  isClosed: () => boolean,
): ConsumeQueue {
  const { maxBatchSize, maxQueued } = limits;
  const isCluster = (connection.client as { isCluster?: unknown }).isCluster === true;
  const runScript = (args: (string | number)[], count: number): Promise<unknown> =>
    evalScript(connection, BATCH_SCRIPT, BATCH_SHA, args, count);

  /** Settles one waiter from a plain SET; a synchronous throw of the client (a Cluster without nodes) fails it closed too. */
  const sendLone = async (waiter: Waiter): Promise<void> => {
    try {
      waiter.resolve(await send(waiter.key, waiter.at));
    } catch (error) {
      waiter.reject(MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error }));
    }
  };
  /** One script call for a group of consumes whose keys share a hash slot; settles every waiter. */
  let scriptDenied = false;
  const sendGroup = async (group: Waiter[]): Promise<void> => {
    if (group.length === 1 || scriptDenied) {
      await Promise.all(group.map(sendLone));
      return;
    }
    const owners = ownerValues(group.length);
    const args: (string | number)[] = new Array(group.length * 3);
    group.forEach((waiter, i) => {
      args[i] = waiter.key;
      args[group.length + 2 * i] = owners[i] as string;
      args[group.length + 2 * i + 1] = waiter.at;
    });
    let reply: unknown;
    try {
      reply = await runScript(args, group.length);
    } catch (error) {
      // An ACL without EVALSHA/EVAL: the script never ran; send this batch and every later one as single SETs.
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
    if (!Array.isArray(reply) || reply.length !== group.length) {
      return resolveLostBatch(connection, group, owners, new Error('unexpected reply to the batch script'));
    }
    group.forEach((waiter, i) => {
      waiter.resolve(reply[i] === 1);
    });
  };

  /** One batch: grouped by hash slot on a Cluster (one script call per slot, in parallel). */
  const runBatch = (batch: Waiter[]): Promise<void> => runBySlot(batch, isCluster, isClosed, sendGroup);

  /**
   * Queues a consume (see `createBatcher`). One that finds nothing in flight is sent at once, as a plain `SET`
   * (no added latency, no timer). The ones that arrive while something is in flight are sent together at the
   * end of the tick when fewer than two calls are in flight, else as soon as one is answered (at most
   * `maxBatchSize` per call). Two in flight keep the connection busy while the answers of one are handed out,
   * so waves of consumers do not alternate between a lone `SET` and a batch.
   */
  const batcher = createBatcher<Waiter, boolean>({
    maxBatchSize,
    maxQueued,
    maxInFlight: MAX_IN_FLIGHT,
    runLoneAtOnce: true,
    // A lone consume is the plain SET of an unbatched store, with nothing added on its way.
    run: (batch) => (batch.length === 1 && !isClosed() ? sendLone(batch[0] as Waiter) : runBatch(batch)),
    batchError: (error) => new StoreUnavailableError({ cause: error }),
  });
  const enqueue = (key: string, at: number): Promise<boolean> => batcher.add((resolve, reject) => ({ key, at, resolve, reject }));

  return { enqueue, failAll: (error) => batcher.failAll(() => error) };
}

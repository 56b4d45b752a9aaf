/**
 * The batching mechanism a store puts in front of its backend (group commit): one queue, batches of at most
 * `maxBatchSize`, started when a flush is due and a slot is free (at most `maxInFlight` batches at once), each
 * item settled on its own, and one failure fanned out to every item of its batch. Shared by the SQL and Redis
 * stores so both queue, flush and fail alike.
 */
import { isPromiseLike } from '../crypto/awaitable.js';
import { MrtrError, StoreUnavailableError } from '../errors.js';
import { type OptionNames, rejectUnknownOptions } from './validate.js';

/** One queued item as a batch receives it: the store's own fields plus how to settle its caller's promise. */
export interface BatchEntry<R> {
  /** Settles the caller's promise with a value (a second settlement is ignored). */
  resolve(value: R): void;
  /** Settles the caller's promise with an error (a second settlement is ignored). */
  reject(error: unknown): void;
}

/**
 * When a due flush runs: `'microtask'` (after the current tick's synchronous work, so everything queued in
 * the same tick goes together; nothing waits on a timer), `'immediate'` (after the event loop's pending I/O
 * callbacks: for a synchronous backend whose work blocks the loop, so what arrived meanwhile joins the next
 * batch), or a function that calls `flush` later (a timer, or a test's manual clock).
 */
export type BatchFlush = 'microtask' | 'immediate' | ((flush: () => void) => void);

/** Options of {@link createBatcher}. */
export interface BatcherOptions<E extends BatchEntry<R>, R> {
  /**
   * Runs one batch (1 to `maxBatchSize` entries, in queue order). It must settle every entry; a rejection
   * (or a synchronous throw) settles the ones it left with `batchError(error)`.
   */
  run(batch: E[]): Promise<void> | void;
  /** Most entries one batch carries (a positive integer). */
  maxBatchSize: number;
  /** Most entries waiting for a batch; one more is rejected at once with `queueFull()` (a positive integer). */
  maxQueued: number;
  /** Most batches running at once (a positive integer). @default 1 */
  maxInFlight?: number | undefined;
  /** When a flush runs (see {@link BatchFlush}). @default 'microtask' */
  flush?: BatchFlush | undefined;
  /**
   * An item that finds nothing running and nothing queued is run at once, synchronously, as a batch of one
   * (no added latency, no flush); the ones that arrive while it runs form the next batch. @default false
   */
  runLoneAtOnce?: boolean | undefined;
  /**
   * A queue that holds a full batch starts it at once, synchronously, when a slot is free, instead of waiting
   * for the flush (useful with a timer `flush`). @default false
   */
  flushAtSize?: boolean | undefined;
  /** The error of an entry refused by a full queue. @default `ERR_STORE_UNAVAILABLE` ("replay store queue is full") */
  queueFull?: (() => unknown) | undefined;
  /** The error every entry of a failed batch receives. @default the error itself when a `MrtrError`, else `ERR_STORE_UNAVAILABLE` with it as `cause` */
  batchError?: ((error: unknown) => unknown) | undefined;
}

/** A queue in front of a backend that runs its entries in batches (see {@link createBatcher}). */
export interface Batcher<E extends BatchEntry<R>, R> {
  /** Queues an entry (or runs it at once: `runLoneAtOnce`); rejects it at once when the queue is full. */
  push(entry: E): void;
  /** Builds an entry around a new promise, queues it, and returns that promise. */
  add(create: (resolve: (value: R) => void, reject: (error: unknown) => void) => E): Promise<R>;
  /** Rejects every queued entry with a fresh `error()` (a batch already running settles by itself). */
  failAll(error: () => unknown): void;
  /** Batches running now. */
  readonly inFlight: number;
  /** Entries waiting for a batch (not counting those running). */
  readonly pending: number;
}

const BATCHER_OPTIONS: OptionNames<BatcherOptions<BatchEntry<unknown>, unknown>> = {
  run: true,
  maxBatchSize: true,
  maxQueued: true,
  maxInFlight: true,
  flush: true,
  runLoneAtOnce: true,
  flushAtSize: true,
  queueFull: true,
  batchError: true,
};

const defaultQueueFull = (): unknown => new StoreUnavailableError({ cause: new Error('replay store queue is full') });
const defaultBatchError = (error: unknown): unknown => (MrtrError.is(error) ? error : new StoreUnavailableError({ cause: error }));

function positive(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`createBatcher: ${name} must be a positive integer`);
  }
  return value;
}

class QueueBatcher<E extends BatchEntry<R>, R> implements Batcher<E, R> {
  private queue: E[] = [];
  private head = 0;
  private running = 0;
  private scheduled = false;
  private readonly run: (batch: E[]) => Promise<void> | void;
  private readonly maxBatchSize: number;
  private readonly maxQueued: number;
  private readonly maxInFlight: number;
  private readonly microtask: boolean;
  private readonly defer: (flush: () => void) => void;
  private readonly runLoneAtOnce: boolean;
  private readonly flushAtSize: boolean;
  private readonly queueFull: () => unknown;
  private readonly batchError: (error: unknown) => unknown;
  private readonly flushNow = (): void => {
    this.scheduled = false;
    this.startBatches();
  };

  constructor(options: BatcherOptions<E, R>) {
    if (options === null || typeof options !== 'object') throw new TypeError('createBatcher: options must be an object');
    rejectUnknownOptions('createBatcher', options, BATCHER_OPTIONS);
    if (typeof options.run !== 'function') throw new TypeError('createBatcher: run must be a function');
    this.run = options.run;
    this.maxBatchSize = positive('maxBatchSize', options.maxBatchSize);
    this.maxQueued = positive('maxQueued', options.maxQueued);
    this.maxInFlight = positive('maxInFlight', options.maxInFlight ?? 1);
    const flush = options.flush ?? 'microtask';
    this.microtask = flush === 'microtask';
    if (flush === 'microtask') this.defer = queueMicrotask;
    else if (flush === 'immediate') this.defer = (fn) => void setImmediate(fn);
    else if (typeof flush === 'function') this.defer = flush;
    else throw new TypeError('createBatcher: flush must be "microtask", "immediate" or a function');
    this.runLoneAtOnce = options.runLoneAtOnce ?? false;
    this.flushAtSize = options.flushAtSize ?? false;
    this.queueFull = options.queueFull ?? defaultQueueFull;
    this.batchError = options.batchError ?? defaultBatchError;
  }

  get inFlight(): number {
    return this.running;
  }

  get pending(): number {
    return this.queue.length - this.head;
  }

  push(entry: E): void {
    if (this.runLoneAtOnce && this.running === 0 && this.queue.length === this.head) {
      this.start([entry]);
      return;
    }
    if (this.queue.length - this.head >= this.maxQueued) {
      entry.reject(this.queueFull());
      return;
    }
    this.queue.push(entry);
    if (this.flushAtSize && this.queue.length - this.head >= this.maxBatchSize && this.running < this.maxInFlight) {
      this.start(this.take());
      if (this.queue.length === this.head) return;
    }
    this.schedule();
  }

  add(create: (resolve: (value: R) => void, reject: (error: unknown) => void) => E): Promise<R> {
    return new Promise<R>((resolve, reject) => this.push(create(resolve, reject)));
  }

  failAll(error: () => unknown): void {
    const waiting = this.queue.slice(this.head);
    this.queue = [];
    this.head = 0;
    for (const entry of waiting) entry.reject(error());
  }

  private schedule(): void {
    if (this.running >= this.maxInFlight || this.scheduled) return;
    this.scheduled = true;
    this.defer(this.flushNow);
  }

  private startBatches(): void {
    while (this.running < this.maxInFlight && this.queue.length > this.head) this.start(this.take());
  }

  private take(): E[] {
    const end = Math.min(this.queue.length, this.head + this.maxBatchSize);
    const batch = this.queue.slice(this.head, end);
    this.head = end;
    if (this.head === this.queue.length) {
      this.queue = [];
      this.head = 0;
    } else if (this.head >= 4096) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    return batch;
  }

  private start(batch: E[]): void {
    this.running++;
    let work: Promise<void> | void;
    try {
      work = this.run(batch);
    } catch (error) {
      this.failed(batch, error);
      this.finished();
      return;
    }
    if (isPromiseLike(work)) {
      work.then(this.finished, (error: unknown) => {
        this.failed(batch, error);
        this.finished();
      });
    } else {
      // A synchronous run: end it after the current tick, as an asynchronous one would.
      queueMicrotask(this.finished);
    }
  }

  private failed(batch: E[], error: unknown): void {
    // `run` settles its entries itself; this settles whatever a failure left (a settled promise ignores it).
    for (const entry of batch) entry.reject(this.batchError(error));
  }

  private readonly finished = (): void => {
    this.running--;
    if (this.queue.length === this.head) return;
    // Microtask flushes start the next batches now; the others wait for their flush (I/O first).
    if (this.microtask) this.startBatches();
    else this.schedule();
  };
}

/**
 * Group commit for a store: entries queue and run in batches of at most `maxBatchSize`, at most `maxInFlight`
 * batches at once; a flush is due when an entry is queued and a slot is free, and runs as `flush` says; when
 * a batch ends, what queued meanwhile starts (at once for microtask flushes, at the next flush otherwise), so
 * a full batch never waits. A full queue refuses at once; a failed batch rejects each of its entries.
 */
export function createBatcher<E extends BatchEntry<R>, R>(options: BatcherOptions<E, R>): Batcher<E, R> {
  return new QueueBatcher<E, R>(options);
}

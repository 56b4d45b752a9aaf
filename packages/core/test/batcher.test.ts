import { describe, expect, it } from 'vitest';
import { MrtrError } from '../src/index.js';
import { StoreUnavailableError } from '../src/entry-errors.js';
import { type BatchEntry, createBatcher } from '../src/entry-store.js';

// No wall clock: flushes run when the test calls them (a manual `flush`), or at the end of a microtask
// tick; batches end when the test settles the promise their `run` returned.

interface Entry extends BatchEntry<number> {
  readonly n: number;
}

/** A promise the test settles by hand. */
function deferred(): { promise: Promise<void>; resolve(): void; reject(error: unknown): void } {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every pending microtask (and the ones they queue) run. */
const ticks = async (n = 10): Promise<void> => {
  for (let i = 0; i < n; i++) await Promise.resolve();
};

/** A manual flush clock: `due` holds the flushes asked for, `fire()` runs them. */
function manualFlush(): { flush: (fn: () => void) => void; due: (() => void)[]; fire(): void } {
  const due: (() => void)[] = [];
  return {
    flush: (fn) => void due.push(fn),
    due,
    fire() {
      for (const fn of due.splice(0)) fn();
    },
  };
}

/** A batcher whose batches are recorded and end only when the test says so. */
function harness(
  options: { maxBatchSize?: number; maxQueued?: number; maxInFlight?: number; runLoneAtOnce?: boolean; flushAtSize?: boolean } = {},
) {
  const clock = manualFlush();
  const batches: { items: number[]; entries: Entry[]; end: ReturnType<typeof deferred> }[] = [];
  const batcher = createBatcher<Entry, number>({
    maxBatchSize: options.maxBatchSize ?? 3,
    maxQueued: options.maxQueued ?? 100,
    maxInFlight: options.maxInFlight,
    runLoneAtOnce: options.runLoneAtOnce,
    flushAtSize: options.flushAtSize,
    flush: clock.flush,
    run(batch) {
      const end = deferred();
      batches.push({ items: batch.map((e) => e.n), entries: batch, end });
      return end.promise;
    },
  });
  const add = (n: number): Promise<number> => batcher.add((resolve, reject) => ({ n, resolve, reject }));
  /** Answers every entry of batch `i` with its own number × 10 and ends it. */
  const answer = (i: number): void => {
    const batch = batches[i]!;
    for (const entry of batch.entries) entry.resolve(entry.n * 10);
    batch.end.resolve();
  };
  return { batcher, clock, batches, add, answer };
}

describe('createBatcher', () => {
  it('queues until the flush, then runs batches of at most maxBatchSize in queue order', async () => {
    const { batcher, clock, batches, add, answer } = harness({ maxBatchSize: 3, maxInFlight: 2 });
    const results = [1, 2, 3, 4, 5, 6, 7].map(add);
    expect(batches).toHaveLength(0);
    expect(batcher.pending).toBe(7);
    expect(clock.due).toHaveLength(1); // one flush for the whole tick
    clock.fire();
    expect(batches.map((b) => b.items)).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    expect(batcher.inFlight).toBe(2);
    expect(batcher.pending).toBe(1);
    answer(0);
    answer(1);
    await ticks();
    // A custom flush: what queued while the slots were busy waits for the next flush.
    expect(batches).toHaveLength(2);
    expect(clock.due).toHaveLength(1);
    clock.fire();
    expect(batches[2]!.items).toEqual([7]);
    answer(2);
    expect(await Promise.all(results)).toEqual([10, 20, 30, 40, 50, 60, 70]);
    await ticks();
    expect(batcher.inFlight).toBe(0);
  });

  it('keeps at most maxInFlight batches running', async () => {
    const { batcher, clock, batches, add, answer } = harness({ maxBatchSize: 1, maxInFlight: 2 });
    const results = [1, 2, 3, 4].map(add);
    clock.fire();
    expect(batches).toHaveLength(2);
    expect(batcher.inFlight).toBe(2);
    clock.fire(); // nothing due: both slots busy, no flush asked for
    expect(clock.due).toHaveLength(0);
    answer(0);
    await ticks();
    clock.fire();
    expect(batches).toHaveLength(3);
    expect(batcher.inFlight).toBe(2);
    answer(1);
    answer(2);
    await ticks();
    clock.fire();
    answer(3);
    expect(await Promise.all(results)).toEqual([10, 20, 30, 40]);
  });

  it('settles each entry on its own (one batch may answer values and errors)', async () => {
    const { clock, batches, add } = harness();
    const [a, b, c] = [1, 2, 3].map(add);
    clock.fire();
    const [ea, eb, ec] = batches[0]!.entries;
    const boom = new Error('only b');
    ea!.resolve(1);
    eb!.reject(boom);
    ec!.resolve(3);
    batches[0]!.end.resolve();
    await expect(a).resolves.toBe(1);
    await expect(b).rejects.toBe(boom);
    await expect(c).resolves.toBe(3);
  });

  it('fans a failed batch out to every entry it left unsettled, and goes on with the next', async () => {
    const { batcher, clock, batches, add, answer } = harness({ maxBatchSize: 2 });
    const results = [1, 2, 3].map((n) =>
      add(n).then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      ),
    );
    clock.fire();
    batches[0]!.entries[0]!.resolve(10);
    const cause = new Error('connection lost');
    batches[0]!.end.reject(cause);
    await ticks();
    expect(batcher.inFlight).toBe(0);
    clock.fire();
    answer(1);
    const [first, second, third] = await Promise.all(results);
    expect(first).toEqual({ value: 10 });
    const error = (second as { error: unknown }).error;
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).cause).toBe(cause);
    expect(third).toEqual({ value: 30 });
  });

  it('passes a MrtrError through, applies batchError, and treats a synchronous throw as a failure', async () => {
    const own = new StoreUnavailableError({ cause: new Error('own') });
    const plain = createBatcher<Entry, number>({ maxBatchSize: 4, maxQueued: 4, run: () => Promise.reject(own) });
    await expect(plain.add((resolve, reject) => ({ n: 1, resolve, reject }))).rejects.toBe(own);

    const mapped = createBatcher<Entry, number>({
      maxBatchSize: 4,
      maxQueued: 4,
      batchError: (error) => new Error('mapped', { cause: error }),
      run: () => {
        throw new Error('sync');
      },
    });
    const error = await mapped.add((resolve, reject) => ({ n: 1, resolve, reject })).catch((e: unknown) => e);
    expect((error as Error).message).toBe('mapped');
    expect(((error as Error).cause as Error).message).toBe('sync');
    expect(mapped.inFlight).toBe(0);
  });

  it('refuses one more than maxQueued at once, with ERR_STORE_UNAVAILABLE by default or queueFull()', async () => {
    const { batcher, add } = harness({ maxQueued: 2 });
    void add(1);
    void add(2);
    const refused = await add(3).catch((e: unknown) => e);
    expect(MrtrError.is(refused) && refused.code).toBe('ERR_STORE_UNAVAILABLE');
    expect(((refused as Error).cause as Error).message).toBe('replay store queue is full');
    expect(batcher.pending).toBe(2);

    const custom = createBatcher<Entry, number>({
      maxBatchSize: 1,
      maxQueued: 1,
      flush: () => {},
      queueFull: () => new RangeError('full'),
      run() {},
    });
    void custom.add((resolve, reject) => ({ n: 1, resolve, reject }));
    await expect(custom.add((resolve, reject) => ({ n: 2, resolve, reject }))).rejects.toThrow(RangeError);
  });

  it('runLoneAtOnce: an entry that finds the batcher idle runs at once, alone; later ones batch behind it', async () => {
    const { batcher, clock, batches, add, answer } = harness({ runLoneAtOnce: true, maxInFlight: 1 });
    const results = [1, 2, 3, 4].map(add);
    expect(batches.map((b) => b.items)).toEqual([[1]]); // synchronously, no flush
    expect(batcher.pending).toBe(3);
    expect(clock.due).toHaveLength(0); // the only slot is busy: no flush asked for
    answer(0);
    await ticks();
    clock.fire();
    expect(batches[1]!.items).toEqual([2, 3, 4]);
    answer(1);
    expect(await Promise.all(results)).toEqual([10, 20, 30, 40]);
  });

  it('flushAtSize: a full batch starts at once when a slot is free', () => {
    const { clock, batches, add } = harness({ flushAtSize: true, maxBatchSize: 2, maxInFlight: 1 });
    void add(1);
    expect(batches).toHaveLength(0);
    void add(2);
    expect(batches.map((b) => b.items)).toEqual([[1, 2]]);
    void add(3);
    void add(4);
    expect(batches).toHaveLength(1); // the slot is busy
    expect(clock.due).toHaveLength(1);
  });

  it("'microtask': one batch per tick, and what queued meanwhile starts as soon as a batch ends", async () => {
    const ends: ReturnType<typeof deferred>[] = [];
    const seen: number[][] = [];
    const batcher = createBatcher<Entry, number>({
      maxBatchSize: 10,
      maxQueued: 100,
      run(batch) {
        seen.push(batch.map((e) => e.n));
        const end = deferred();
        ends.push(end);
        for (const entry of batch) entry.resolve(entry.n);
        return end.promise;
      },
    });
    const add = (n: number) => batcher.add((resolve, reject) => ({ n, resolve, reject }));
    void add(1);
    void add(2);
    expect(seen).toHaveLength(0);
    await Promise.resolve();
    expect(seen).toEqual([[1, 2]]);
    void add(3);
    void add(4);
    await ticks();
    expect(seen).toHaveLength(1);
    ends[0]!.resolve();
    await ticks();
    expect(seen).toEqual([
      [1, 2],
      [3, 4],
    ]);
  });

  it("'immediate': the flush waits for the event loop's pending callbacks", async () => {
    const seen: number[][] = [];
    const batcher = createBatcher<Entry, number>({
      maxBatchSize: 10,
      maxQueued: 100,
      flush: 'immediate',
      run(batch) {
        seen.push(batch.map((e) => e.n));
        for (const entry of batch) entry.resolve(entry.n);
      },
    });
    const done = batcher.add((resolve, reject) => ({ n: 1, resolve, reject }));
    await ticks();
    expect(seen).toHaveLength(0);
    await done;
    expect(seen).toEqual([[1]]);
  });

  it('failAll rejects what is queued, not what is running', async () => {
    const { batcher, clock, batches, add, answer } = harness({ maxBatchSize: 1 });
    const running = add(1);
    const queued = add(2).catch((e: unknown) => e);
    clock.fire();
    batcher.failAll(() => new Error('closed'));
    expect(batcher.pending).toBe(0);
    expect(((await queued) as Error).message).toBe('closed');
    answer(0);
    expect(await running).toBe(10);
    expect(batches).toHaveLength(1);
  });

  it('validates its options', () => {
    const run = () => {};
    expect(() => createBatcher({ run, maxBatchSize: 0, maxQueued: 1 })).toThrow(RangeError);
    expect(() => createBatcher({ run, maxBatchSize: 1, maxQueued: 1.5 })).toThrow(RangeError);
    expect(() => createBatcher({ run, maxBatchSize: 1, maxQueued: 1, maxInFlight: 0 })).toThrow(RangeError);
    expect(() => createBatcher({ run: 1 as never, maxBatchSize: 1, maxQueued: 1 })).toThrow(TypeError);
    expect(() => createBatcher({ run, maxBatchSize: 1, maxQueued: 1, flush: 'later' as never })).toThrow(TypeError);
  });
});

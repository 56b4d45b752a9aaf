import { describe, expect, it } from 'vitest';
import { readWithin } from '../src/entry-encoding.js';

/** A stream of `chunks`, recording whether it was cancelled and how many chunks were pulled. */
function streamOf(chunks: Uint8Array[]) {
  const seen = { pulled: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = chunks[seen.pulled++];
      if (next === undefined) controller.close();
      else controller.enqueue(next);
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { stream, seen };
}

describe('readWithin', () => {
  it('gives the whole body when it is within the bound, in order', async () => {
    const { stream, seen } = streamOf([new Uint8Array([1, 2]), new Uint8Array([3]), new Uint8Array([4, 5])]);
    expect(await readWithin(stream, 5)).toEqual(new Uint8Array([1, 2, 3, 4, 5]));
    expect(seen.cancelled).toBe(false);
    expect(await readWithin(streamOf([]).stream, 0)).toEqual(new Uint8Array(0));
  });

  it('stops one chunk past the bound and cancels the stream: the rest is never pulled', async () => {
    const chunks = Array.from({ length: 1000 }, () => new Uint8Array(64));
    const { stream, seen } = streamOf(chunks);
    expect(await readWithin(stream, 100)).toBeUndefined();
    await new Promise((resolve) => setImmediate(resolve));
    expect(seen.cancelled).toBe(true);
    expect(seen.pulled).toBeLessThan(5);
  });

  it('refuses a bound that is not a non-negative integer', async () => {
    await expect(readWithin(streamOf([]).stream, -1)).rejects.toThrow(RangeError);
    await expect(readWithin(streamOf([]).stream, 1.5)).rejects.toThrow(RangeError);
  });
});

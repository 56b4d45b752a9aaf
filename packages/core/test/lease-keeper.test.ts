import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLeaseKeeper } from '../src/outcomes/lease.js';

// One timer keeps every lease of a guard: what each lease still gets is what a timer of its own gave it.
describe('createLeaseKeeper', () => {
  const LEASE_MS = 300; // a beat is 100 ms
  // The keeper's clock is the fake one: it moves with the fake timers, beat by beat.
  const now = () => Date.now();
  /** Advances the fake clock and timers together, and lets renewals settle. */
  const advance = (ms: number) => vi.advanceTimersByTimeAsync(ms);
  let t = 0;

  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'], now: 1_000_000 });
    t = Date.now();
  });
  afterEach(() => vi.useRealTimers());

  it('renews each held lease at most one beat after it was taken and one beat after its last renewal, until stopped', async () => {
    const keep = createLeaseKeeper(LEASE_MS, now);
    const a = vi.fn(async () => true);
    const b = vi.fn(async () => true);
    const leaseA = keep(a, t + 10_000);
    await advance(60);
    const leaseB = keep(b, Date.now() + 10_000); // taken mid-beat: renewed at the next beat, 40 ms later
    await advance(40);
    expect([a.mock.calls.length, b.mock.calls.length]).toEqual([1, 1]);
    await advance(100);
    expect([a.mock.calls.length, b.mock.calls.length]).toEqual([2, 2]);
    leaseA.stop();
    await advance(200);
    expect([a.mock.calls.length, b.mock.calls.length]).toEqual([2, 4]);
    leaseB.stop();
    await advance(500);
    expect([a.mock.calls.length, b.mock.calls.length]).toEqual([2, 4]);
    expect(vi.getTimerCount()).toBe(0); // nothing held: no timer left
  });

  it('stops renewing a lease the store says is no longer held, or whose deadline passed; a failed renewal is tried again', async () => {
    const keep = createLeaseKeeper(LEASE_MS, now);
    const lost = vi.fn(async () => false);
    const failing = vi.fn(async () => Promise.reject(new Error('store unavailable')));
    const ending = vi.fn(async () => true);
    keep(lost, t + 10_000);
    keep(failing, t + 10_000);
    keep(ending, t + 250);
    await advance(300);
    expect(lost).toHaveBeenCalledTimes(1); // answered "not held": dropped after the first beat
    expect(failing).toHaveBeenCalledTimes(3); // an error is not "not held": tried at every beat
    expect(ending).toHaveBeenCalledTimes(2); // beats at +100 and +200; at +300 its deadline (+250) has passed
    await advance(300);
    expect([lost.mock.calls.length, failing.mock.calls.length, ending.mock.calls.length]).toEqual([1, 6, 2]);
  });

  it('skips the beat of a lease whose renewal is still in flight (never two renewals of one lease at once)', async () => {
    const keep = createLeaseKeeper(LEASE_MS, now);
    let answer: ((held: boolean) => void) | undefined;
    const slow = vi.fn(() => new Promise<boolean>((resolve) => (answer = resolve)));
    keep(slow, t + 10_000);
    await advance(300);
    expect(slow).toHaveBeenCalledTimes(1);
    answer!(true);
    await advance(100);
    expect(slow).toHaveBeenCalledTimes(2);
  });
});

import { ownerValues } from '../util/random.js';

/** Pause before the first retry of a background store call; it doubles up to {@link MAX_RETRY_MS}. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;
/** Background store calls (releases, records) retried at once by one guard: past it the oldest is given up. */
const MAX_BACKGROUND = 1_024;

const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    (timer as { unref?: () => void }).unref?.();
  });

/** Owner values for claims, drawn from batches (one CSPRNG call per 256 claims). */
export function createOwners(): () => string {
  let pool: string[] = [];
  return () => {
    if (pool.length === 0) pool = ownerValues(256);
    return pool.pop()!;
  };
}

/**
 * Store calls that must land eventually — the release of a claim whose reply was lost, the record of an outcome while
 * the store was down — retried in the background with a doubling pause (100 ms to 2 s) until the call answers or its
 * deadline (epoch ms, by `now`) passes. Each call is idempotent by owner value, so a retry after a lost reply is safe.
 * Calls are keyed by operation, id and owner (the same key again replaces the one running). At most
 * {@link MAX_BACKGROUND} at once: past it the oldest stops (its lease lapses, and its retries learn the outcome is
 * unknown).
 */
export function createRetrier(now: () => number): (key: string, call: () => Promise<unknown>, deadline: number) => Promise<void> {
  const running = new Map<string, { stopped: boolean }>();
  const run = async (key: string, call: () => Promise<unknown>, deadline: number, token: { stopped: boolean }): Promise<void> => {
    try {
      for (let pause = FIRST_RETRY_MS; !token.stopped && now() < deadline; pause = Math.min(MAX_RETRY_MS, pause * 2)) {
        try {
          await call();
          return;
        } catch {
          await sleep(pause);
        }
      }
    } finally {
      if (running.get(key) === token) running.delete(key);
    }
  };
  return (key, call, deadline) => {
    const previous = running.get(key);
    if (previous !== undefined) previous.stopped = true;
    if (running.size >= MAX_BACKGROUND) {
      const [oldest, token] = running.entries().next().value!;
      token.stopped = true;
      running.delete(oldest);
    }
    const token = { stopped: false };
    running.set(key, token);
    return run(key, call, deadline, token);
  };
}

/** A claim's lease while its round runs. */
interface HeldLease {
  readonly renew: () => Promise<boolean>;
  readonly deadline: number;
  renewing: boolean;
}

/**
 * Keeps claims' leases alive while their rounds run: every held lease is renewed at each beat (a third of `leaseMs`)
 * until `stop()`, until the store says the owner no longer holds the claim, or until its `deadline` (epoch ms, by
 * `now`). A lease is renewed at most one beat after it was taken and at most one beat after its last renewal, as
 * with a timer of its own; a failed renewal is tried again at the next beat (the lease has two more beats before it
 * lapses), and a renewal still in flight skips the beat. One timer for all the leases of a guard, not one per round:
 * it runs while leases are held (and once more after the last is stopped, instead of being cleared and set again
 * for every round), and never keeps the process alive.
 */
export function createLeaseKeeper(
  leaseMs: number,
  now: () => number,
): (renew: () => Promise<boolean>, deadline: number) => { stop(): void } {
  const beatMs = Math.max(1, Math.floor(leaseMs / 3));
  const held = new Set<HeldLease>();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const renewOne = async (lease: HeldLease): Promise<void> => {
    lease.renewing = true;
    const still = await lease.renew().catch(() => true);
    lease.renewing = false;
    if (!still) held.delete(lease);
  };
  const beat = (): void => {
    timer = undefined;
    const t = now();
    for (const lease of held) {
      if (t >= lease.deadline) held.delete(lease);
      else if (!lease.renewing) void renewOne(lease);
    }
    schedule();
  };
  const schedule = (): void => {
    if (timer !== undefined || held.size === 0) return;
    timer = setTimeout(beat, beatMs);
    (timer as { unref?: () => void }).unref?.();
  };
  return (renew, deadline) => {
    const lease: HeldLease = { renew, deadline, renewing: false };
    held.add(lease);
    schedule();
    return { stop: () => void held.delete(lease) };
  };
}

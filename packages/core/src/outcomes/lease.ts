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

/**
 * Keeps a claim's lease alive while its round runs: `renew` every third of `leaseMs` until `stop()`, until the store
 * says the owner no longer holds the claim, or until `deadline` (epoch ms, by `now`). A failed renewal is tried again
 * at the next beat (the lease has two more beats before it lapses). The timer never keeps the process alive.
 */
export function keepLease(renew: () => Promise<boolean>, leaseMs: number, deadline: number, now: () => number): { stop(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  const beat = (): void => {
    timer = setTimeout(
      async () => {
        if (stopped || now() >= deadline) return;
        const held = await renew().catch(() => true);
        if (held && !stopped) beat();
      },
      Math.max(1, Math.floor(leaseMs / 3)),
    );
    (timer as { unref?: () => void }).unref?.();
  };
  beat();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

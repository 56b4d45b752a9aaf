import type { MrtrClientOptions } from '@mrtr/client';

/** Options that never touch a timer: every wait is recorded instead of waited for. */
export function noTimers(extra: MrtrClientOptions = {}): MrtrClientOptions & { sleeps: number[] } {
  const sleeps: number[] = [];
  return {
    sleeps,
    random: () => 0.5,
    sleep: async (ms, signal) => {
      signal?.throwIfAborted();
      sleeps.push(ms);
    },
    ...extra,
  };
}

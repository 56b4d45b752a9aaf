import { storeCompliance } from '@mrtr/test-suite';
import { it } from 'vitest';
import { createMemoryStore } from '../src/index.js';

let t = 1_700_000_000_000;
const clock = {
  now: () => t,
  advance: (ms: number) => {
    t += ms;
  },
};

storeCompliance(it, (options) => createMemoryStore({ ...options, now: clock.now }), {
  clock,
  sharedBackend: false,
  name: 'memory',
  outcomes: true,
  declares: { clock: true, leases: true, epoch: true },
});

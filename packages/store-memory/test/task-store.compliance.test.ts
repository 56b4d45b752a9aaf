import { taskStoreCompliance } from '@mrtr/test-suite';
import { describe, it } from 'vitest';
import { createMemoryTaskStore } from '../src/index.js';

describe('createMemoryTaskStore', () => {
  let t = Date.parse('2026-12-01T00:00:00Z');
  const clock = {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
  taskStoreCompliance(it, (o) => createMemoryTaskStore({ ...o, now: clock.now }), {
    clock,
    sharedBackend: false,
    name: 'memory task store',
  });
});

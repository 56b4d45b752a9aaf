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
  // Each memory task store is its own (sharedBackend: false): it takes no namespace, the rest passes through.
  taskStoreCompliance(it, ({ namespace: _own, ...o }) => createMemoryTaskStore({ ...o, now: clock.now }), {
    clock,
    sharedBackend: false,
    name: 'memory task store',
  });
});

import { MrtrError } from '@mrtr/core';
import type { TaskStore } from '@mrtr/core/tasks';
import { ok } from '../assert.js';
import { sleep, uniqueId } from '../store/context.js';
import { rejectsTaskLimit, type TaskStoreSuite } from './context.js';

/** Expiry: a task lives `ttlMs` from its last update, on the suite's fake clock or (without one) in real time. */
export function expiryGroup(s: TaskStoreSuite): void {
  const { clock, withStore } = s;
  s.test('a task is readable until lastUpdatedAt + ttlMs; an update restarts the period; an expired task frees its slots', async () => {
    await withStore((store) => (clock ? expiresOnTheClock(s, store, clock) : expiresInRealTime(s, store)));
  });
}

/** On the fake clock: readable just before the end of the period, gone at it; expired tasks free their slots. */
async function expiresOnTheClock(s: TaskStoreSuite, store: TaskStore, clock: NonNullable<TaskStoreSuite['clock']>): Promise<void> {
  const { limits, now, record } = s;
  const alice = uniqueId('alice');
  const ttl = 60_000;
  const task = record(alice, { ttlMs: ttl });
  await store.create(task);
  await clock.advance(ttl / 2);
  await store.update(task.taskId, (r) => ({ ...r, statusMessage: 'halfway', lastUpdatedAt: now() }));
  await clock.advance(ttl / 2 + 1);
  ok((await store.get(task.taskId))?.statusMessage === 'halfway', 'an update must restart the readable period');
  await clock.advance(ttl / 2 - 2);
  ok((await store.get(task.taskId)) !== undefined, 'a task must be readable just before lastUpdatedAt + ttlMs');
  await clock.advance(1);
  ok((await store.get(task.taskId)) === undefined, 'a task must be gone at lastUpdatedAt + ttlMs');
  ok((await store.update(task.taskId, (r) => r)) === undefined, 'update of an expired task must answer undefined');
  // Fill both bounds with short-lived tasks, let them expire: the principal can create again.
  for (let i = 0; i < limits.maxLivePerPrincipal; i++) await store.create(record(alice, { ttlMs: 1_000 }));
  await rejectsTaskLimit(() => store.create(record(alice)), 'live bound before expiry', 'live');
  await clock.advance(1_000);
  await store.create(record(alice));
}

/**
 * In real time (a store on its own clock): a round whose create and get came within the TTL observes the task and the
 * live bound; every round sees them gone after it. The TTL doubles each round a loaded machine overslept (5 rounds).
 */
async function expiresInRealTime(s: TaskStoreSuite, store: TaskStore): Promise<void> {
  const { limits, options, record } = s;
  let observed = false;
  for (let round = 0, ttl = options.ttlMs ?? 1000; round < 5 && !observed; round++, ttl *= 2) {
    const principal = uniqueId('alice');
    const task = record(principal, { ttlMs: ttl });
    await store.create(task);
    for (let i = 1; i < limits.maxLivePerPrincipal; i++) await store.create(record(principal, { ttlMs: ttl }));
    const read = await store.get(task.taskId);
    const limited = await store.create(record(principal, { ttlMs: ttl })).then(
      () => false,
      (error: unknown) => MrtrError.is(error) && error.code === 'ERR_TASK_LIMIT',
    );
    if (Date.now() < task.lastUpdatedAt + ttl) {
      ok(read !== undefined, 'a task must be readable before lastUpdatedAt + ttlMs');
      ok(limited, 'the live bound must hold before expiry');
      observed = true;
    }
    while (Date.now() <= task.lastUpdatedAt + ttl) await sleep(task.lastUpdatedAt + ttl - Date.now() + 1);
    await sleep(Math.min(250, ttl));
    ok((await store.get(task.taskId)) === undefined, 'a task must be gone after lastUpdatedAt + ttlMs');
    ok((await store.update(task.taskId, (r) => r)) === undefined, 'update of an expired task must answer undefined');
    await store.create(record(principal)); // expired tasks no longer count
  }
  ok(observed, 'the machine never finished a create and a get within the TTL (5 rounds, TTL doubled each time)');
}

// The task probe, written once: a throwaway task through the task store the server would use.
import { randomBytes } from 'node:crypto';
import type { TaskRecord, TaskStore } from '@mrtr/core/tasks';
import { duration } from '../time.js';
import type { Settings, TaskSession } from './backend.js';
import { type Add, bestEffort, type Check, errorText, withTimeout } from './common.js';

/** How long the probe task stays readable: long enough for a slow database, short enough to vanish by itself. */
const PROBE_TTL_MS = 10_000;

interface Probe {
  taskId: string;
  principal: string;
  check: Check;
}

const probeRecord = (taskId: string, principal: string): TaskRecord => {
  const t = Date.now();
  return { taskId, principal, status: 'working', createdAt: t, lastUpdatedAt: t, ttlMs: PROBE_TTL_MS, inputRequests: {}, askedKeys: [] };
};

/**
 * Creates a probe task (a random id and principal), reads it back, completes it and reads that back: the backend,
 * the permissions the store needs and its schema, through the store the server uses. `where` ends the line:
 * `at redis://…`, `in FILE`.
 */
async function probeTask(store: TaskStore, name: string, where: string, timeoutMs: number): Promise<Probe> {
  const taskId = `doctor-${randomBytes(16).toString('base64url')}`;
  const principal = `mrtr-doctor-${randomBytes(16).toString('base64url')}`;
  const started = performance.now();
  let step = 'create';
  const fail = (detail: string): Probe => ({
    taskId,
    principal,
    check: { name, status: 'fail', detail: `probe task: ${detail} ${where}` },
  });
  try {
    await withTimeout(store.create(probeRecord(taskId, principal)), timeoutMs * 2, name);
    step = 'read';
    const read = await withTimeout(store.get(taskId), timeoutMs, name);
    if (read === undefined) return fail('created, but not readable back');
    if (read.principal !== principal || read.status !== 'working') return fail('created, but read back as another record');
    step = 'update';
    const done = Date.now();
    const updated = await withTimeout(
      store.update(taskId, (r) => ({ ...r, status: 'completed', lastUpdatedAt: Math.max(done, r.lastUpdatedAt), result: { content: [] } })),
      timeoutMs * 2,
      name,
    );
    if (updated?.status !== 'completed')
      return fail(`update answered ${updated === undefined ? 'no task' : `status ${updated.status}`}, not completed`);
    step = 'read back';
    const back = await withTimeout(store.get(taskId), timeoutMs, name);
    if (back?.status !== 'completed')
      return fail(`completed, but read back as ${back === undefined ? 'no task' : `status ${back.status}`}`);
  } catch (error) {
    return fail(`${step} failed: ${errorText(error)}`);
  }
  const ms = performance.now() - started;
  const detail = `probe task created, read, completed and read back (${duration(ms)} for all four) ${where}`;
  return { taskId, principal, check: { name, status: 'ok', detail } };
}

/** The installed store package predates task stores: nothing to probe with (warn, the server may not keep tasks). */
export const noTaskStore = (name: string, pkg: string, factory: string): Check => ({
  name,
  status: 'warn',
  detail: `not checked: the installed ${pkg} has no ${factory} (a version before task stores); update it if the server keeps tasks there`,
});

/** Runs a backend's task session: open (and its schema lines), the probe, its clean-up, the lines after. */
export async function taskProbe(session: TaskSession, s: Settings, add: Add): Promise<void> {
  let store: TaskStore | undefined;
  try {
    store = await session.open(add);
    if (store === undefined) return;
    const { taskId, principal, check } = await probeTask(store, session.name, session.where, s.timeoutMs);
    if (check.status === 'fail') session.hint?.(check);
    add(check);
    if (session.forget !== undefined) await bestEffort(() => withTimeout(session.forget!(taskId, principal), s.timeoutMs, session.name));
    await session.after?.(add);
  } catch (error) {
    add({ name: session.name, status: 'fail', detail: `${session.place}: ${errorText(error)}` });
  } finally {
    await bestEffort(() => session.close?.());
  }
}

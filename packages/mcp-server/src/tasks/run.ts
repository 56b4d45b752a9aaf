/**
 * A task whose work runs in this process: its questions waiting for answers, the loop that watches its record in
 * the store (answers stored by any instance, a cancel, the lease, the input deadline), and how it ends.
 */
import { ProtocolError } from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import { isTerminalStatus, type TaskError, taskExpiresAt, type TaskRecord } from '@mrtr/core/tasks';
import type { TaskSettings } from './options.js';
import { INVALID_REQUEST } from '../protocol/wire.js';

export interface Waiter {
  resolve(answer: JsonValue): void;
  reject(error: unknown): void;
  /** When (ms) the question stops waiting: past it, unanswered, the task fails (`inputTimeoutMs`). */
  deadline: number;
}
/** A task whose work runs in this process. */
export interface Run {
  controller: AbortController;
  /** The task's `inputTimeoutMs`. */
  inputTimeoutMs: number;
  /** Keys asked by the work and not yet answered. */
  waiters: Map<string, Waiter>;
  /** Makes the watch loop read the record now. */
  wake(): void;
  done: boolean;
}

/** Ends a run: the work's signal aborts and every question it waits on fails. */
export function stopRun(run: Run, reason: unknown): void {
  if (!run.controller.signal.aborted) run.controller.abort(reason);
  for (const waiter of run.waiters.values()) waiter.reject(run.controller.signal.reason);
  run.waiters.clear();
}

/** Settles a task unless it already ended (a cancelled task stays cancelled). */
export async function settleTask({ store, now }: TaskSettings, taskId: string, change: Partial<TaskRecord>): Promise<void> {
  await store.update(taskId, (record) => {
    if (isTerminalStatus(record.status)) return undefined;
    const { answers: _answers, leaseUntil: _lease, ...rest } = record;
    return { ...rest, ...change, inputRequests: {}, lastUpdatedAt: now() };
  });
}

/** A sleep of `watchIntervalMs` that `wake()` cuts short; its timer never keeps the process alive. */
export function napper(watchIntervalMs: number): { sleep: () => Promise<void>; wake: () => void } {
  let woken = false;
  let release: (() => void) | undefined;
  return {
    sleep: () =>
      new Promise<void>((resolve) => {
        if (woken) {
          woken = false;
          resolve();
          return;
        }
        const timer = setTimeout(() => {
          release = undefined;
          resolve();
        }, watchIntervalMs);
        (timer as { unref?: () => void }).unref?.();
        release = () => {
          clearTimeout(timer);
          release = undefined;
          resolve();
        };
      }),
    wake: () => {
      if (release !== undefined) release();
      else woken = true;
    },
  };
}

/**
 * While a task's work runs here: reads the record every `watchIntervalMs` (at once when woken) to hand the work
 * the answers `tasks/update` stored (on any instance), to stop it when the task was cancelled or is gone, and to
 * renew the lease. A store that fails a read or a write is tried again at the next tick.
 */
export async function watchRun(settings: TaskSettings, taskId: string, run: Run, sleep: () => Promise<void>): Promise<void> {
  const { store, now, leaseMs } = settings;
  while (!run.done) {
    await sleep();
    if (run.done) return;
    let record: TaskRecord | undefined;
    try {
      record = await store.get(taskId);
    } catch {
      continue;
    }
    if (record === undefined || isTerminalStatus(record.status)) {
      stopRun(run, new Error(record === undefined ? 'Task expired' : 'Task cancelled'));
      return;
    }
    const taken = Object.keys(record.answers ?? {}).filter((key) => run.waiters.has(key));
    if (await timedOut(settings, taskId, run, new Set(taken))) return;
    const renew = record.leaseUntil === undefined || now() >= record.leaseUntil - (2 * leaseMs) / 3;
    if (taken.length === 0 && !renew) continue;
    let updated: TaskRecord | undefined;
    try {
      updated = await takeAndRenew(settings, taskId, taken);
    } catch {
      continue;
    }
    if (updated === undefined || isTerminalStatus(updated.status)) continue; // seen at the next read
    for (const key of taken) {
      const waiter = run.waiters.get(key);
      run.waiters.delete(key);
      waiter?.resolve(record.answers![key]!);
    }
  }
}

/** Takes the answers the work is handed (`taken`) out of the record and renews the lease, in one update. */
function takeAndRenew({ store, now, leaseMs }: TaskSettings, taskId: string, taken: readonly string[]): Promise<TaskRecord | undefined> {
  return store.update(taskId, (current) => {
    if (isTerminalStatus(current.status)) return undefined;
    const answers = { ...current.answers };
    for (const key of taken) delete answers[key];
    const { answers: _drop, ...rest } = current;
    const t = now();
    // A task the work is still on must not expire under it: close to the end of its readable period the
    // renewal counts as a change (lastUpdatedAt moves), otherwise lastUpdatedAt is left alone.
    const lastUpdatedAt = t + 2 * leaseMs >= taskExpiresAt(current) ? t : current.lastUpdatedAt;
    return { ...rest, ...(Object.keys(answers).length > 0 && { answers }), leaseUntil: t + leaseMs, lastUpdatedAt };
  });
}

/**
 * Fails the task when a question the work waits on is still unanswered past its deadline (`inputTimeoutMs`),
 * and stops the work. An answer that `tasks/update` stored meanwhile wins: the change checks the question is
 * still outstanding. `true` when the task ended here. A store that fails the write is tried at the next tick.
 */
async function timedOut({ store, now }: TaskSettings, taskId: string, run: Run, taken: ReadonlySet<string>): Promise<boolean> {
  const t = now();
  const late = [...run.waiters].filter(([key, waiter]) => t >= waiter.deadline && !taken.has(key)).map(([key]) => key);
  if (late.length === 0) return false;
  const error: TaskError = {
    code: INVALID_REQUEST,
    message:
      `This task ran out of time waiting for input: "${late[0]}" was not answered within ${Math.ceil(run.inputTimeoutMs / 1000)} s ` +
      '(inputTimeoutMs). Start it again',
    data: { reason: 'input_timeout' },
  };
  let updated: TaskRecord | undefined;
  try {
    updated = await store.update(taskId, (current) => {
      if (isTerminalStatus(current.status) || !late.some((key) => Object.hasOwn(current.inputRequests, key))) return undefined;
      const { answers: _answers, leaseUntil: _lease, ...rest } = current;
      return { ...rest, status: 'failed', error, inputRequests: {}, lastUpdatedAt: now() };
    });
  } catch {
    return false;
  }
  if (updated?.status !== 'failed') return false; // answered meanwhile, or ended otherwise (seen at the next read)
  stopRun(run, new ProtocolError(error.code, error.message, error.data));
  return true;
}

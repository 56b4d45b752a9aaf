import { intOption, isObject, type OptionNames, rejectUnknownOptions } from '@mrtr/core/options';
import type { TaskStore } from '@mrtr/core/tasks';

/** Options of the tasks support (`tasks` of `createMrtr`). */
export interface TaskOptions {
  /** Where tasks live, e.g. `createMemoryTaskStore()` of `@mrtr/store-memory`. */
  store: TaskStore;
  /** How long a task stays readable after its last change, in ms (the wire `ttlMs`). @default 3_600_000 */
  ttlMs?: number | undefined;
  /** The poll interval suggested to clients, in ms (the wire `pollIntervalMs`). @default 1_000 */
  pollIntervalMs?: number | undefined;
  /**
   * How often the instance running a task reads it back from the store, in ms: how soon an answer or a cancel
   * that reached another instance gets to the work (on the same instance they arrive at once). @default 1_000
   */
  watchIntervalMs?: number | undefined;
  /**
   * How long the instance running a task vouches for it without renewing, in ms (it renews at a third of it). An
   * unfinished task whose lease has passed lost the process that ran it (a restart, a crash): `tasks/get` reports
   * it failed. @default 30_000
   */
  leaseMs?: number | undefined;
  /**
   * How long a question asked during a task waits for its answer, in ms (from when the work asked it). Past it,
   * unanswered, the task is `failed` (`-32600` "… ran out of time waiting for input …", `data.reason:
   * 'input_timeout'`) and its work's `signal` aborts: a task waiting for input always ends, and frees its slot in
   * the store's bounds (the lease renewal keeps a waiting task readable, so nothing else would end it). Checked by
   * the instance running the work at each `watchIntervalMs`. @default 3_600_000 (1 h)
   */
  inputTimeoutMs?: number | undefined;
  /**
   * Most unfinished tasks that callers without a principal (the fixed `unauthenticated: { principal }` of
   * `createMrtr`) may have running on this instance; one more is `-32600`. Those callers all share one principal, so
   * the store's per-principal bound (`maxLivePerPrincipal`) is a single bucket for all of them: this smaller one
   * keeps some of it free of any one anonymous caller, and `inputTimeoutMs` frees every slot a waiting task holds.
   * Counted per instance (the tasks whose work runs here); the store's bound still caps a fleet. @default 4
   */
  maxLiveUnauthenticated?: number | undefined;
  /**
   * Most of those (`maxLiveUnauthenticated`) from one client address: one more is `-32600`, so one caller cannot
   * take the others' share. The address is the one `createHttpHandler` resolved for the request (the peer's, or
   * with its `trustProxy` the `X-Forwarded-For` entry that many hops in; an IPv6 address counts by its /64); HTTP
   * requests it did not serve all count as one address. Over stdio (no HTTP request) the connection is the one
   * client and only `maxLiveUnauthenticated` applies. @default 2
   */
  maxLiveUnauthenticatedPerAddress?: number | undefined;
  /** Clock in ms (tests). @default Date.now */
  now?: (() => number) | undefined;
  /**
   * Keeps a task's work alive after the response that created it, on a platform that ends a request's work with its
   * response: called once per task, after its `CreateTaskResult` is ready, with a promise that settles (never rejects)
   * when the work has ended and its final state was written to the store. On Cloudflare Workers:
   * `background: (work) => ctx.waitUntil(work)` (or `waitUntil` from `cloudflare:workers`). A throw from it is ignored:
   * the work runs on regardless. @default none (a long-running process keeps the work alive by itself)
   */
  background?: ((work: Promise<void>) => void) | undefined;
}

/** Longest `ttlMs` (and `inputTimeoutMs`) a task may have: 30 days. */
export const MAX_TTL_MS = 30 * 24 * 3_600_000;

/** {@link TaskOptions} validated, every default applied: what the tasks runtime runs on. */
export interface TaskSettings {
  store: TaskStore;
  ttlMs: number;
  pollIntervalMs: number;
  watchIntervalMs: number;
  leaseMs: number;
  inputTimeoutMs: number;
  maxLiveUnauthenticated: number;
  maxLiveUnauthenticatedPerAddress: number;
  now: () => number;
  background: ((work: Promise<void>) => void) | undefined;
}

/** Validates {@link TaskOptions} (labelled `TypeError`/`RangeError`, as `createMrtr: tasks…`). */
export function resolveTaskOptions(options: TaskOptions): TaskSettings {
  if (!isObject(options))
    throw new TypeError(
      'createMrtr: tasks must be { store, ttlMs?, pollIntervalMs?, watchIntervalMs?, leaseMs?, inputTimeoutMs?, maxLiveUnauthenticated?, maxLiveUnauthenticatedPerAddress? }',
    );
  rejectUnknownOptions('createMrtr: tasks', options, {
    store: true,
    ttlMs: true,
    pollIntervalMs: true,
    watchIntervalMs: true,
    leaseMs: true,
    inputTimeoutMs: true,
    maxLiveUnauthenticated: true,
    maxLiveUnauthenticatedPerAddress: true,
    now: true,
    background: true,
  } satisfies OptionNames<TaskOptions>);
  const { store } = options;
  if (!isObject(store) || typeof store.create !== 'function' || typeof store.get !== 'function' || typeof store.update !== 'function') {
    throw new TypeError('createMrtr: tasks.store must be a TaskStore (create, get, update)');
  }
  const ttlMs = intOption('createMrtr: tasks.ttlMs', options.ttlMs, 3_600_000, 1_000, MAX_TTL_MS);
  const pollIntervalMs = intOption('createMrtr: tasks.pollIntervalMs', options.pollIntervalMs, 1_000, 1, 3_600_000);
  const watchIntervalMs = intOption('createMrtr: tasks.watchIntervalMs', options.watchIntervalMs, 1_000, 1, 60_000);
  const leaseMs = intOption('createMrtr: tasks.leaseMs', options.leaseMs, 30_000, 1_000, 3_600_000);
  if (leaseMs < 3 * watchIntervalMs) throw new RangeError('createMrtr: tasks.leaseMs must be at least three times watchIntervalMs');
  const inputTimeoutMs = intOption('createMrtr: tasks.inputTimeoutMs', options.inputTimeoutMs, 3_600_000, 1_000, MAX_TTL_MS);
  const maxLiveUnauthenticated = intOption('createMrtr: tasks.maxLiveUnauthenticated', options.maxLiveUnauthenticated, 4, 1, 1_000_000);
  const maxLiveUnauthenticatedPerAddress = intOption(
    'createMrtr: tasks.maxLiveUnauthenticatedPerAddress',
    options.maxLiveUnauthenticatedPerAddress,
    2,
    1,
    1_000_000,
  );
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createMrtr: tasks.now must be a function');
  const { background } = options;
  if (background !== undefined && typeof background !== 'function') throw new TypeError('createMrtr: tasks.background must be a function');
  return {
    store: store as TaskStore,
    ttlMs,
    pollIntervalMs,
    watchIntervalMs,
    leaseMs,
    inputTimeoutMs,
    maxLiveUnauthenticated,
    maxLiveUnauthenticatedPerAddress,
    now,
    background,
  };
}

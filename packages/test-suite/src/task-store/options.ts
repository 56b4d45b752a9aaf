import type { TaskStore } from '@mrtr/core/tasks';

/**
 * Makes a task store on `namespace` with the given bounds (the suite passes small ones). Pass what it is given through
 * to the store's factory: one test gives a misspelt option, which the store's factory must refuse.
 */
export type TaskStoreFactory = (options: {
  namespace: string;
  maxLivePerPrincipal: number;
  maxPerPrincipal: number;
  /** Passed by the store-wide bound's test only (others leave the store's default). */
  maxTasks?: number;
}) => TaskStore | Promise<TaskStore>;

export interface TaskStoreComplianceOptions {
  /**
   * The fake clock the store judges expiry by. Without it (a backend that expires by its own clock, like Redis)
   * the expiry test runs in real time with a TTL of `ttlMs`, doubled and repeated when a loaded machine overslept.
   */
  clock?: { now(): number; advance(ms: number): void | Promise<void> };
  /** Real-time TTL for the expiry test when there is no fake clock. @default 1000 */
  ttlMs?: number;
  /** Stores made by two factory calls with one namespace share their tasks (false for in-process stores). @default true */
  sharedBackend?: boolean;
  /** Label used in test names. @default "task store" */
  name?: string;
  /** Per-test timeout in ms. @default 30_000 */
  timeoutMs?: number;
}

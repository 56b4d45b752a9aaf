/** One embedded input request the server asks (`elicitation/create`, `sampling/createMessage`, `roots/list`). */
export interface InputRequestInfo {
  /** The server's key for it (in `inputRequests`). */
  key: string;
  method: string;
  params: Record<string, unknown> | undefined;
}

/** Answers one embedded input request with the bare result (an `ElicitResult`, `CreateMessageResult`, `ListRootsResult`). */
export type InputHandler = (request: InputRequestInfo, context: { signal: AbortSignal }) => Promise<unknown>;

/** Options of {@link withMrtr}; every one is optional. */
export interface MrtrClientOptions {
  /** Re-sending one request (a round, a task poll) after a lost response or "in progress". */
  retry?: {
    /** Most times one request is sent, the first included. @default 5 */
    maxAttempts?: number;
    /** First backoff ceiling (ms); doubles per attempt, full jitter. @default 200 */
    baseMs?: number;
    /** Longest single wait (ms), a server's retry-after included. @default 5_000 */
    maxMs?: number;
  };
  /** Most `input_required` answers one call may get before {@link RoundsExceededError}. @default 10 */
  maxRounds?: number;
  /**
   * `'auto'`: learn from `tools/list` which tools declare `_meta["dev.mrtr/idempotency"]`, and give each logical call
   * of one of them a key (`params._meta["dev.mrtr/idempotency-key"]`) on its first round, the same on every retry of
   * it. `'off'`: no keys unless a call passes `idempotencyKey`. @default 'auto'
   */
  idempotency?: 'auto' | 'off';
  /** Following tasks (`io.modelcontextprotocol/tasks`), declared per request when the server advertises it; `false`: never declared. */
  tasks?:
    | false
    | {
        /** Most `tasks/get` polls of one task before {@link TaskPollsExceededError}. @default 1_000 */
        maxPolls?: number;
        /** Bounds on the server's `pollIntervalMs` (ms). @default { min: 100, max: 10_000 } */
        pollMs?: { min?: number; max?: number };
      };
  /** Answers the server's questions; by default the handlers registered on the client (`setRequestHandler`). */
  onInput?: InputHandler;
  /** A new idempotency key. @default crypto.randomUUID */
  newKey?: () => string;
  /** A number in [0, 1) for the backoff jitter. @default Math.random */
  random?: () => number;
  /** Waits `ms` (rejects with `signal.reason` on abort). @default a timer */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** The clock (ms), for the tool list's age. @default Date.now */
  now?: () => number;
}

/** The options with every default filled in, checked. */
export interface Settings {
  retry: { maxAttempts: number; baseMs: number; maxMs: number };
  maxRounds: number;
  idempotency: 'auto' | 'off';
  tasks: false | { maxPolls: number; minPollMs: number; maxPollMs: number };
  onInput: InputHandler | undefined;
  newKey: () => string;
  random: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  now: () => number;
}

function integer(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(`withMrtr: ${name} must be a number`);
  if (!Number.isInteger(value) || value < min || value > max)
    throw new RangeError(`withMrtr: ${name} must be an integer in [${min}, ${max}]`);
  return value;
}

function fn<F>(name: string, value: F | undefined, fallback: F): F {
  if (value === undefined) return fallback;
  if (typeof value !== 'function') throw new TypeError(`withMrtr: ${name} must be a function`);
  return value;
}

/** Waits `ms` on a timer; rejects with the signal's reason when it aborts. */
export function timerSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = () => {
      signal?.removeEventListener('abort', abort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const abort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', abort, { once: true });
  });
}

const DAY_MS = 86_400_000;

/** The task limits when none are given (also for a task a server sends where none was declared). */
export const DEFAULT_TASK_LIMITS: Readonly<Exclude<Settings['tasks'], false>> = Object.freeze({
  maxPolls: 1_000,
  minPollMs: 100,
  maxPollMs: 10_000,
});

/** Checks the options (labelled TypeError/RangeError) and fills in the defaults. */
export function settle(options: MrtrClientOptions = {}): Settings {
  if (options === null || typeof options !== 'object') throw new TypeError('withMrtr: options must be an object');
  const retry = options.retry ?? {};
  const baseMs = integer('retry.baseMs', retry.baseMs, 200, 0, DAY_MS);
  const maxMs = integer('retry.maxMs', retry.maxMs, Math.max(5_000, baseMs), 0, DAY_MS);
  if (maxMs < baseMs) throw new RangeError('withMrtr: retry.maxMs must be at least retry.baseMs');
  const idempotency = options.idempotency ?? 'auto';
  if (idempotency !== 'auto' && idempotency !== 'off') throw new TypeError("withMrtr: idempotency must be 'auto' or 'off'");
  let tasks: Settings['tasks'] = false;
  if (options.tasks !== false) {
    const given = options.tasks ?? {};
    const minPollMs = integer('tasks.pollMs.min', given.pollMs?.min, DEFAULT_TASK_LIMITS.minPollMs, 0, DAY_MS);
    const maxPollMs = integer('tasks.pollMs.max', given.pollMs?.max, Math.max(DEFAULT_TASK_LIMITS.maxPollMs, minPollMs), 0, DAY_MS);
    if (maxPollMs < minPollMs) throw new RangeError('withMrtr: tasks.pollMs.max must be at least tasks.pollMs.min');
    tasks = { maxPolls: integer('tasks.maxPolls', given.maxPolls, DEFAULT_TASK_LIMITS.maxPolls, 1, 1_000_000), minPollMs, maxPollMs };
  }
  return {
    retry: { maxAttempts: integer('retry.maxAttempts', retry.maxAttempts, 5, 1, 100), baseMs, maxMs },
    maxRounds: integer('maxRounds', options.maxRounds, 10, 1, 100),
    idempotency,
    tasks,
    onInput: options.onInput === undefined ? undefined : fn('onInput', options.onInput, options.onInput),
    newKey: fn('newKey', options.newKey, () => globalThis.crypto.randomUUID()),
    random: fn('random', options.random, Math.random),
    sleep: fn('sleep', options.sleep, timerSleep),
    now: fn('now', options.now, Date.now),
  };
}

import type { ReplayStore } from '@mrtr/core';
import type { TaskStore } from '@mrtr/core/tasks';
import type { Add, Check } from './common.js';

/** What `mrtr doctor` read from its options and the environment, for the backends to open their stores with. */
export interface Settings {
  readonly env: NodeJS.ProcessEnv;
  readonly redisUrl: string | undefined;
  readonly databaseUrl: string | undefined;
  readonly sqliteFile: string | undefined;
  readonly upstashUrl: string | undefined;
  readonly upstashToken: string | undefined;
  readonly dynamoTable: string | undefined;
  /** The Worker's doctor route (`MRTR_DOCTOR_URL`) and its bearer token (`MRTR_DOCTOR_TOKEN`), for the cloudflare store. */
  readonly doctorUrl: string | undefined;
  readonly doctorToken: string | undefined;
  /** The SQL replay table (`--table`). */
  readonly table: string;
  /** The SQL task table (`--tasks-table`). */
  readonly tasksTable: string;
  readonly timeoutMs: number;
  readonly skewMs: number;
}

/** The store clock line: the store's time against this host's. */
export interface ClockProbe {
  /** The line's name (`redis clock`). */
  readonly name: string;
  /** What a skew means for this store, said when it warns or fails. */
  readonly note: string;
  /** How to read the store's clock, epoch ms; by default the store's own `time()` (its declared `clock` capability). */
  readonly read?: () => Promise<number>;
  /** Set: a clock that cannot be read warns with this text; unset: it fails the store's line. */
  readonly unreadable?: string;
}

/** The task store on the same backend, probed with a throwaway task. */
export interface TaskSession {
  /** The line's name (`redis tasks`). */
  readonly name: string;
  /** How the probe line ends (`at redis://…`, `in FILE`). */
  readonly where: string;
  /** What a failed line starts with (`redis://…`). */
  readonly place: string;
  /** The task store; `undefined` after adding a line that says why there is none (schema lines come here too). */
  open(add: Add): Promise<TaskStore | undefined>;
  /** Adds advice to a failed probe line (the permissions a Redis user needs). */
  hint?(check: Check): void;
  /** Deletes what the probe wrote, best effort. */
  forget?(taskId: string, principal: string): Promise<unknown>;
  /** Lines after the probe (a table the store created: its schema now). */
  after?(add: Add): Promise<void>;
  close?(): Promise<unknown>;
}

/** An open replay store and the probes that apply to it. */
export interface Session {
  readonly store: ReplayStore;
  /** How the consume line ends (`at redis://…`, `in FILE`); empty for none. */
  readonly where: string;
  /** The consume probe's deadline in multiples of `--timeout-ms` (a connection, then a command). @default 2 */
  readonly consumeTimeouts?: number;
  /** Lines before the consume (the schema it will meet). */
  before?(add: Add): Promise<void>;
  /** Adjusts the consume line (the memory store warns that it is one process's only). */
  consumed?(check: Check): void;
  /** Deletes the throwaway id, best effort. */
  forget?(id: string): Promise<unknown>;
  /** Backend-specific lines after the consume (Redis eviction and persistence, a created schema, SQLite's journal). */
  after?(add: Add): Promise<void>;
  readonly clock?: ClockProbe;
  /** The ledger epoch line (a store that declares `epoch`), named by this. */
  readonly epoch?: string;
  /** The task store, when it shares this session's connection. */
  readonly tasks?: TaskSession;
  close(): Promise<unknown>;
}

/** One entry of the table of backends: adding a store is adding one of these. */
export interface Backend {
  /** What must be installed next to `@mrtr/cli` (the optional peers), in the order they are loaded. */
  readonly packages: readonly string[];
  /** Checked by default (no `--store`, no `MRTR_STORE`) when this says the server's environment names it. */
  readonly byDefault?: (s: Settings) => boolean;
  /** Why the store cannot be opened from this environment (a missing URL or file): the store's line fails with it. */
  readonly unconfigured?: (s: Settings) => string | undefined;
  /** Where the store is, for a failed line (a redacted URL, a file). */
  readonly place: (s: Settings) => string;
  open(s: Settings): Promise<Session>;
  /** The task store, when it needs no session (its own connection). */
  tasks?(s: Settings): TaskSession;
}

import type { ChildProcess } from 'node:child_process';

export declare const APP_DIR: string;
export declare const CLI: string;
export declare function freshKeys(): string;

export interface RunningDemo {
  /** `http://127.0.0.1:<port>/mcp` as printed by the server. */
  url: string;
  origin: string;
  port: number;
  child: ChildProcess;
  /** The printed "listening on" line. */
  line: string;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (or the signal name). */
  exited: Promise<number | string | null>;
  /** Sends `signal` (default SIGTERM) and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | string | null>;
}

export declare function startDemo(
  args: readonly string[],
  options?: { env?: Record<string, string | undefined>; timeoutMs?: number; nodeArgs?: readonly string[] },
): Promise<RunningDemo>;

export declare function serviceUrl(
  name: string,
):
  | { url: string; skip?: undefined; error?: undefined }
  | { skip: string; url?: undefined; error?: undefined }
  | { error: string; url?: undefined; skip?: undefined };

export declare function stripAnsi(text: string): string;

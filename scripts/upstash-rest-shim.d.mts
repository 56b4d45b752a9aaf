/** A stand-in for Upstash's REST API in front of a real Redis (tests, quick starts, benchmarks): see the .mjs file. */
export interface UpstashRestShim {
  readonly url: string;
  readonly token: string;
  /** Requests answered so far. */
  readonly requests: number;
  /** Replies lost so far (requests that ran, then had their connection cut). */
  readonly lostReplies: number;
  /**
   * `'late'`: the next request runs and its reply is lost; `'lost'`: every reply is lost until `restore()`. With
   * `path`, only requests on that path (`'/'` one command, `'/pipeline'`, `'/multi-exec'`) lose their reply.
   */
  loseNextReply(mode: 'late' | 'lost', path?: '/' | '/pipeline' | '/multi-exec'): void;
  restore(): void;
  close(): Promise<void>;
}
export function startUpstashRestShim(redisUrl?: string): Promise<UpstashRestShim>;

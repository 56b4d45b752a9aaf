/** A stand-in for Upstash's REST API in front of a real Redis (tests, quick starts, benchmarks): see the .mjs file. */
export interface UpstashRestShim {
  readonly url: string;
  readonly token: string;
  /** Requests answered so far. */
  readonly requests: number;
  /** `'late'`: the next request runs and its reply is lost; `'lost'`: every reply is lost until `restore()`. */
  loseNextReply(mode: 'late' | 'lost'): void;
  restore(): void;
  close(): Promise<void>;
}
export function startUpstashRestShim(redisUrl?: string): Promise<UpstashRestShim>;

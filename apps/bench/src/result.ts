/** The shape of a run's result (written by --output, read by --from): the types every part and the report share. */
import type { SkippedRow } from './codecs.js';
import type { PackageFacts } from './facts.js';
import type { HarnessOptions, JobResult } from './harness.js';
import type { PayloadName } from './payload.js';

/** Everything a run produced; written as JSON by `--output` and read back by `--from`. */
export interface BenchResult {
  schema: 1;
  startedAt: string;
  finishedAt: string;
  durationMs: number;
  quick: boolean;
  env: {
    node: string;
    v8: string;
    openssl: string;
    platform: string;
    arch: string;
    cpu: string;
    cpus: number;
    /** 1-minute load average at the start and the end of the run (other work on the machine adds noise). */
    loadavg?: [number, number];
  };
  harness: HarnessOptions;
  payloads: Record<PayloadName, { jsonBytes: number }>;
  /** What each published codec and store installs (read from the workspace when the README is generated). */
  packages?: Record<string, PackageFacts>;
  codecs?: {
    rows: { id: string; label: string; family: string; kind: string; confidential: boolean; tokenBytes: Record<PayloadName, number> }[];
    skipped: { id: string; label: string; reason: string }[];
    checks: string[];
  };
  stores?: {
    rows: { id: string; label: string; backend: string; kind: string }[];
    skipped: { id: string; label: string; reason: string }[];
    notes: string[];
    checks: string[];
  };
  /** The guard's open and mint with and without an `onEvent` hook. */
  events?: {
    rows: { id: string; label: string }[];
    checks: string[];
  };
  guard?: {
    codecs: string[];
    skipped: { id: string; label: string; reason: string }[];
    /** JSON bytes: the `data` claim, the arguments, and the whole claims object B seals (per data size). */
    sizes: { data: Record<string, number>; args: Record<string, number>; claims: Record<string, number> };
    checks: string[];
  };
  e2e?: {
    /** `baseline`: the row's ratios divide by (a `sdk-plain` in process, h `sdk-plain-http`); absent in older results: a. */
    rows: { letter: string; id: string; label: string; kind: string; store: string; baseline?: string }[];
    skipped: { id: string; label: string; reason: string }[];
    notes: string[];
    checks: string[];
  };
  /** Idempotency keys: a keyed first-round call and an unkeyed one, in process (`keys.ts`). */
  keys?: { checks: string[] };
  /** Outcome recording: store step, round step and e2e flows, each with and without recording. */
  outcomes?: {
    stores: { backend: string; label: string; concurrency: number[] }[];
    e2e: { id: string; store: string; recordOutcomes: boolean; label: string }[];
    skipped: { id: string; label: string; reason: string }[];
    notes: string[];
    checks: string[];
    /** JSON bytes of the outcome and the data claim, characters of the sealed outcomes the stores keep. */
    sizes: { outcomeJson: number; sealedOutcome: number; e2eSealedOutcome?: number; data: number; args: number };
    /** 1-, 5- and 15-minute load averages at the start and the end of the run. */
    loadavg?: { start: number[]; end: number[] };
  };
  /** The serverless stores beside their raw clients (`serverless.ts`, issue 43). */
  serverless?: ServerlessSection;
  jobs: Record<string, JobResult>;
  targets: TargetResult[];
}

export type PackageName =
  | 'codec-hmac'
  | 'codec-jwe'
  | 'codec-aead'
  | 'store-memory'
  | 'store-redis'
  | 'store-sql'
  | 'store-upstash'
  | 'store-dynamodb'
  | 'store-cloudflare'
  | 'core'
  | 'mcp-server';

export interface TargetResult {
  id: string;
  pkg: PackageName;
  label: string;
  /** Measured value (a ratio, ops/s or bytes); null when a row was skipped. */
  value: number | null;
  op: '>=' | '<=';
  threshold: number;
  unit: 'x' | 'ops/s';
  pass: boolean | null;
  /** Human-readable figures behind the value. */
  detail: string;
  /** min–max of the same ratio taken round by round (how much the rounds disagree). */
  roundRange?: [number, number];
  /** The same ratio on ops per CPU-second (less sensitive to other load on the machine); informative, not judged. */
  cpuValue?: number;
}

/** What the report needs of the run's serverless rows: one entry per job. */
export interface ServerlessSection {
  rows: { key: string; id: string; backend: string; kind: string; label: string; op: string; concurrency: number; opsPerCall: number }[];
  skipped: SkippedRow[];
  checks: string[];
}

import { measure } from 'mitata';

/** One operation under test. It may return a value or a promise; promises are awaited one by one. */
export type Op = () => unknown;

export interface Job {
  /** Unique key, e.g. `codec|B|seal|small`. */
  key: string;
  op: Op;
  /** Operations in flight (a pool of this many async workers); 1 = strictly one after another. */
  concurrency?: number;
  /** Target wall time of one sample (a batch of consecutive calls). */
  batchMs?: number;
  /** Runs before every round's warm-up, outside the timed region (fresh store, new id prefix, …). */
  prepare?: () => unknown;
}

export interface HarnessOptions {
  rounds: number;
  warmupMs: number;
  /** Measured time per job and round (mitata `min_cpu_time`). */
  minTimeMs: number;
  minSamples: number;
  maxSamples: number;
  /** Default sample size in ms (overridden per job by `batchMs`). */
  batchMs: number;
  /** Hard cap on calls per batch, so a misbehaving fast path cannot run unbounded. */
  maxOpsPerBatch: number;
}

export const FULL: HarnessOptions = {
  rounds: 5,
  warmupMs: 100,
  minTimeMs: 350,
  minSamples: 12,
  maxSamples: 400,
  batchMs: 3,
  maxOpsPerBatch: 1_000_000,
};

export const QUICK: HarnessOptions = {
  rounds: 3,
  warmupMs: 40,
  minTimeMs: 120,
  minSamples: 8,
  maxSamples: 200,
  batchMs: 3,
  maxOpsPerBatch: 1_000_000,
};

export interface RoundMeasurement {
  /** 1e9 / median ns per op of this round's samples. */
  opsPerSec: number;
  samples: number;
  opsPerBatch: number;
  /**
   * Ops per second of this process's CPU time (user + system, all threads) over the measured batches: less
   * sensitive than wall time to other work on a shared machine, and equal to ops/s for a CPU-bound job on an
   * otherwise idle core. A mean over the round, not a median.
   */
  opsPerCpuSec?: number;
}

export interface JobResult {
  key: string;
  concurrency: number;
  rounds: RoundMeasurement[];
  /** Median over rounds of `opsPerSec`. */
  opsPerSec: number;
  /** max ÷ min − 1 over rounds. */
  spread: number;
  /** Median over rounds of `opsPerCpuSec`. */
  opsPerCpuSec?: number;
}

let sink: unknown;
/** Keeps results observable so the optimizer cannot drop the call. */
export const consumeSink = (): unknown => sink;

const isThenable = (v: unknown): v is PromiseLike<unknown> =>
  v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function';

export const median = (values: readonly number[]): number => {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

type Batch = (n: number) => unknown;

/** Builds a batch runner: sync ops run in a plain loop, async ones are awaited (or pooled). */
function makeBatch(op: Op, isAsync: boolean, concurrency: number): Batch {
  if (!isAsync) {
    return (n) => {
      for (let i = 0; i < n; i++) sink = op();
    };
  }
  if (concurrency <= 1) {
    return async (n) => {
      for (let i = 0; i < n; i++) sink = await op();
    };
  }
  return async (n) => {
    let left = n;
    const worker = async (): Promise<void> => {
      while (left > 0) {
        left--;
        sink = await op();
      }
    };
    const workers: Promise<void>[] = [];
    for (let w = 0; w < Math.min(concurrency, n); w++) workers.push(worker());
    await Promise.all(workers);
  };
}

const nowMs = (): number => performance.now();

/**
 * Measures one job once: warm-up for `warmupMs` while sizing the batch to about `batchMs`, then
 * mitata `measure()` over whole batches (each sample = one batch); ops/s = 1e9 ÷ median ns per op.
 */
export async function measureOnce(job: Job, options: HarnessOptions): Promise<RoundMeasurement> {
  await job.prepare?.();
  const concurrency = job.concurrency ?? 1;
  const batchMs = job.batchMs ?? options.batchMs;
  const probe = job.op();
  const isAsync = isThenable(probe);
  if (isAsync) await probe;
  const batch = makeBatch(job.op, isAsync, concurrency);

  // Warm-up and calibration: double n until one batch takes at least batchMs / 4 (bounded by
  // maxOpsPerBatch), then keep running batches of about batchMs until warmupMs has passed.
  const clampOps = (x: number): number => Math.max(1, Math.min(options.maxOpsPerBatch, Math.round(x)));
  let n = 1;
  let perOpMs = batchMs;
  let growing = true;
  const warmEnd = nowMs() + options.warmupMs;
  for (;;) {
    const t0 = nowMs();
    const r = batch(n);
    if (isThenable(r)) await r;
    const dt = nowMs() - t0;
    perOpMs = Math.max(dt, 1e-6) / n;
    if (growing && dt < batchMs / 4 && n < options.maxOpsPerBatch) {
      n = clampOps(n * 2);
      continue;
    }
    growing = false;
    if (nowMs() >= warmEnd) break;
    n = clampOps(batchMs / perOpMs);
  }
  const size = clampOps(batchMs / perOpMs);
  let executed = 0;
  const fn = isAsync
    ? async () => {
        await batch(size);
        executed += size;
      }
    : () => {
        batch(size);
        executed += size;
      };
  const cpuBefore = process.cpuUsage();
  const stats = await measure(fn, {
    min_samples: options.minSamples,
    max_samples: options.maxSamples,
    min_cpu_time: options.minTimeMs * 1e6,
    // A batch is far above mitata's own batching threshold, so every sample is exactly one batch.
    warmup_samples: 1,
  });
  const cpu = process.cpuUsage(cpuBefore);
  const cpuSec = (cpu.user + cpu.system) / 1e6;
  const nsPerOp = stats.p50 / size;
  return {
    opsPerSec: 1e9 / nsPerOp,
    samples: stats.samples.length,
    opsPerBatch: size,
    ...(cpuSec > 0 && executed > 0 ? { opsPerCpuSec: executed / cpuSec } : {}),
  };
}

export type Progress = (round: number, index: number, total: number, job: Job, m: RoundMeasurement) => void;

/**
 * Runs every job `rounds` times, interleaved: round r runs all jobs in order, round r+1 in reverse
 * order, so slow phases of a shared machine spread over all jobs instead of landing on one.
 */
export async function runInterleaved(jobs: readonly Job[], options: HarnessOptions, progress?: Progress): Promise<Map<string, JobResult>> {
  const keys = new Set<string>();
  for (const job of jobs) {
    if (keys.has(job.key)) throw new Error(`duplicate job key ${job.key}`);
    keys.add(job.key);
  }
  const perJob = new Map<string, RoundMeasurement[]>(jobs.map((j) => [j.key, []]));
  const gc = (globalThis as { gc?: () => void }).gc;
  for (let round = 0; round < options.rounds; round++) {
    const order = round % 2 === 0 ? jobs : [...jobs].reverse();
    for (let i = 0; i < order.length; i++) {
      const job = order[i]!;
      gc?.();
      const m = await measureOnce(job, options);
      perJob.get(job.key)!.push(m);
      progress?.(round, i, order.length, job, m);
    }
  }
  const results = new Map<string, JobResult>();
  for (const job of jobs) {
    const rounds = perJob.get(job.key)!;
    const ops = rounds.map((r) => r.opsPerSec);
    const cpu = rounds.map((r) => r.opsPerCpuSec).filter((v): v is number => v !== undefined);
    results.set(job.key, {
      key: job.key,
      concurrency: job.concurrency ?? 1,
      rounds,
      opsPerSec: median(ops),
      spread: Math.max(...ops) / Math.min(...ops) - 1,
      ...(cpu.length === rounds.length ? { opsPerCpuSec: median(cpu) } : {}),
    });
  }
  return results;
}

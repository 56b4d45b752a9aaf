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
  jobs: Record<string, JobResult>;
  targets: TargetResult[];
}

export type PackageName = 'codec-hmac' | 'codec-jwe' | 'codec-aead' | 'store-memory' | 'store-redis' | 'store-sql';

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
}

// ---------------------------------------------------------------------------------------------
// Formatting

export function fmtOps(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return 'n/a';
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e5) return `${Math.round(n / 1e3)}k`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(0)}k`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return n.toFixed(0);
}

export const fmtRatio = (r: number | null | undefined): string => (r === null || r === undefined || !Number.isFinite(r) ? 'n/a' : `${r.toFixed(2)}×`);
const fmtPct = (r: number | undefined): string => (r === undefined || !Number.isFinite(r) ? '' : `±${Math.round((r * 100) / 2)}%`);

function table(header: string[], rows: string[][], align?: ('l' | 'r')[]): string {
  const sep = header.map((_, i) => ((align?.[i] ?? 'l') === 'r' ? '---:' : '---'));
  return [header, sep, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

// ---------------------------------------------------------------------------------------------
// Targets

const ops = (result: BenchResult, key: string): number | undefined => result.jobs[key]?.opsPerSec;

/** Ratio a/b per round (rounds are paired: both jobs ran in the same round). */
function roundRange(result: BenchResult, a: string, b: string, invert = false): [number, number] | undefined {
  const ra = result.jobs[a]?.rounds;
  const rb = result.jobs[b]?.rounds;
  if (ra === undefined || rb === undefined || ra.length !== rb.length || ra.length === 0) return undefined;
  const ratios = ra.map((m, i) => (invert ? rb[i]!.opsPerSec / m.opsPerSec : m.opsPerSec / rb[i]!.opsPerSec));
  return [Math.min(...ratios), Math.max(...ratios)];
}

function ratioTarget(
  result: BenchResult,
  id: string,
  pkg: PackageName,
  label: string,
  a: string,
  b: string,
  op: '>=' | '<=',
  threshold: number,
  invert = false,
): TargetResult {
  const va = ops(result, a);
  const vb = ops(result, b);
  const value = va === undefined || vb === undefined ? null : invert ? vb / va : va / vb;
  const pass = value === null ? null : op === '>=' ? value >= threshold : value <= threshold;
  const detail = value === null ? `not measured (${va === undefined ? a : b} missing)` : `${fmtOps(va)} vs ${fmtOps(vb)} ops/s`;
  const range = roundRange(result, a, b, invert);
  return { id, pkg, label, value, op, threshold, unit: 'x', pass, detail, ...(range === undefined ? {} : { roundRange: range }) };
}

/** The acceptance criteria of issues 3 and 4, evaluated on one run. */
export function evaluateTargets(result: BenchResult): TargetResult[] {
  const t: TargetResult[] = [];
  const codec = (row: string, what: 'seal' | 'open') => `codec|${row}|${what}|small`;
  if (result.codecs !== undefined) {
    for (const what of ['seal', 'open'] as const) {
      t.push(ratioTarget(result, `hmac.${what}.vs-B`, 'codec-hmac', `HMAC codec ${what} ÷ bare HMAC (B), small payload`, codec('hmac', what), codec('B', what), '>=', 0.8));
    }
    for (const what of ['seal', 'open'] as const) {
      t.push(ratioTarget(result, `hmac.${what}.vs-SDK`, 'codec-hmac', `HMAC codec ${what} ÷ SDK createRequestStateCodec, small payload`, codec('hmac', what), codec('SDK', what), '>=', 5));
    }
    for (const what of ['seal', 'open'] as const) {
      t.push(ratioTarget(result, `jwe.${what}.vs-C`, 'codec-jwe', `JWE codec ${what} ÷ bare AES-256-GCM (C), small payload`, codec('jwe', what), codec('C', what), '>=', 0.5));
    }
    for (const what of ['seal', 'open'] as const) {
      t.push(ratioTarget(result, `jwe.${what}.vs-jose`, 'codec-jwe', `JWE codec ${what} ÷ jose Compact JWE (CryptoKey), small payload`, codec('jwe', what), codec('jose', what), '>=', 3));
    }
    for (const what of ['seal', 'open'] as const) {
      t.push(ratioTarget(result, `aead.${what}.vs-E`, 'codec-aead', `AEAD codec ${what} ÷ bare msgpackr + noble XChaCha20-Poly1305 (E), small payload`, codec('aead', what), codec('E', what), '>=', 0.8));
    }
    const bytes = (id: string) => result.codecs?.rows.find((r) => r.id === id)?.tokenBytes.small;
    const aeadBytes = bytes('aead');
    const hmacBytes = bytes('hmac');
    const value = aeadBytes === undefined || hmacBytes === undefined ? null : aeadBytes / hmacBytes;
    t.push({
      id: 'aead.token-bytes.vs-hmac',
      pkg: 'codec-aead',
      label: 'AEAD token bytes ÷ HMAC codec token bytes, same small claims',
      value,
      op: '<=',
      threshold: 1,
      unit: 'x',
      pass: value === null ? null : value <= 1,
      detail: value === null ? 'not measured' : `${aeadBytes} B vs ${hmacBytes} B`,
    });
    const pkgOf: Record<string, PackageName> = { hmac: 'codec-hmac', jwe: 'codec-jwe', aead: 'codec-aead' };
    for (const row of ['hmac', 'jwe', 'aead']) {
      t.push(
        ratioTarget(
          result,
          `${row}.reject-1MiB`,
          pkgOf[row]!,
          `${row} codec: cost of rejecting a 1 MiB token ÷ cost of opening a valid small one`,
          `reject|${row}|open|1MiB`,
          codec(row, 'open'),
          '<=',
          1,
          true,
        ),
      );
    }
  }
  if (result.stores !== undefined) {
    const storePkg: Record<string, PackageName> = { redis: 'store-redis', postgres: 'store-sql', sqlite: 'store-sql' };
    for (const backend of ['redis', 'postgres', 'sqlite']) {
      for (const c of [1, 32]) {
        t.push(
          ratioTarget(
            result,
            `${backend}.c${c}.vs-bare`,
            storePkg[backend]!,
            `${backend} store consume ÷ bare client, concurrency ${c}`,
            `store|${backend}|c${c}`,
            `store|${backend}-bare|c${c}`,
            '>=',
            0.8,
          ),
        );
      }
    }
    const mem = ops(result, 'store|memory|c1');
    t.push({
      id: 'memory.c1.ops',
      pkg: 'store-memory',
      label: 'memory store consumes/s, concurrency 1, tight loop',
      value: mem ?? null,
      op: '>=',
      threshold: 1_000_000,
      unit: 'ops/s',
      pass: mem === undefined ? null : mem >= 1_000_000,
      detail: mem === undefined ? 'not measured' : `${fmtOps(mem)} ops/s`,
    });
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Tables

const CODEC_REF: Record<string, string> = {
  SDK: 'B',
  hmac: 'B',
  'C-pool': 'C',
  jose: 'C',
  jwe: 'C',
  'E-pool': 'E',
  aead: 'E',
};

/** Seal/open table for a payload, limited to `ids` (all rows when omitted). */
export function codecTable(result: BenchResult, payload: PayloadName, ids?: readonly string[]): string {
  const rows = (result.codecs?.rows ?? []).filter((r) => ids === undefined || ids.includes(r.id));
  const body = rows.map((r) => {
    const seal = result.jobs[`codec|${r.id}|seal|${payload}`];
    const open = result.jobs[`codec|${r.id}|open|${payload}`];
    const ref = CODEC_REF[r.id];
    const refSeal = ref === undefined ? undefined : ops(result, `codec|${ref}|seal|${payload}`);
    const refOpen = ref === undefined ? undefined : ops(result, `codec|${ref}|open|${payload}`);
    return [
      r.id,
      r.label,
      `${fmtOps(seal?.opsPerSec)} ${fmtPct(seal?.spread)}`.trim(),
      `${fmtOps(open?.opsPerSec)} ${fmtPct(open?.spread)}`.trim(),
      String(r.tokenBytes[payload]),
      ref === undefined || seal === undefined || refSeal === undefined ? (ref === undefined ? 'reference' : 'n/a') : `${fmtRatio(seal.opsPerSec / refSeal)} ${ref}`,
      ref === undefined || open === undefined || refOpen === undefined ? (ref === undefined ? 'reference' : 'n/a') : `${fmtRatio(open.opsPerSec / refOpen)} ${ref}`,
    ];
  });
  return table(['id', 'codec', 'seal ops/s', 'open ops/s', 'token B', 'seal ÷ ref', 'open ÷ ref'], body, ['l', 'l', 'r', 'r', 'r', 'r', 'r']);
}

export function rejectTable(result: BenchResult, ids?: readonly string[]): string {
  const rows = (result.codecs?.rows ?? []).filter((r) => (ids === undefined || ids.includes(r.id)) && result.jobs[`reject|${r.id}|open|1MiB`] !== undefined);
  const body = rows.map((r) => {
    const reject = ops(result, `reject|${r.id}|open|1MiB`)!;
    const open = ops(result, `codec|${r.id}|open|small`);
    return [r.id, fmtOps(reject), fmtOps(open), open === undefined ? 'n/a' : fmtRatio(open / reject)];
  });
  return table(['id', 'reject 1 MiB ops/s', 'open valid small ops/s', 'reject cost ÷ open cost'], body, ['l', 'r', 'r', 'r']);
}

export function storeTable(result: BenchResult, backends?: readonly string[]): string {
  const rows = (result.stores?.rows ?? []).filter((r) => backends === undefined || backends.includes(r.backend));
  const body = rows.map((r) => {
    const cells = [r.id, r.label];
    for (const c of [1, 32]) {
      const job = result.jobs[`store|${r.id}|c${c}`];
      const bare = r.kind === 'mrtr' ? ops(result, `store|${r.id}-bare|c${c}`) : undefined;
      cells.push(`${fmtOps(job?.opsPerSec)} ${fmtPct(job?.spread)}`.trim());
      cells.push(r.kind === 'bare' ? 'reference' : job === undefined || bare === undefined ? 'n/a' : fmtRatio(job.opsPerSec / bare));
    }
    return cells;
  });
  return table(['id', 'store', 'c=1 ops/s', 'c=1 ÷ bare', 'c=32 ops/s', 'c=32 ÷ bare'], body, ['l', 'l', 'r', 'r', 'r', 'r']);
}

export function targetTable(targets: readonly TargetResult[]): string {
  const body = targets.map((t) => {
    const value = t.value === null ? 'n/a' : t.unit === 'ops/s' ? fmtOps(t.value) : fmtRatio(t.value);
    const need = `${t.op === '>=' ? '≥' : '≤'} ${t.unit === 'ops/s' ? fmtOps(t.threshold) : fmtRatio(t.threshold)}`;
    const range = t.roundRange === undefined ? '' : `${fmtRatio(t.roundRange[0])}–${fmtRatio(t.roundRange[1])}`;
    return [t.label, value, need, t.pass === null ? 'SKIP' : t.pass ? 'PASS' : 'MISS', t.detail, range];
  });
  return table(['target', 'measured', 'required', 'result', 'figures', 'per-round range'], body, ['l', 'r', 'r', 'l', 'l', 'r']);
}

export function describeRun(result: BenchResult): string {
  const { env, harness } = result;
  return (
    `Measured by \`apps/bench\` on ${result.finishedAt.slice(0, 10)}: Node ${env.node} (V8 ${env.v8}, OpenSSL ${env.openssl}), ` +
    `${env.cpu} × ${env.cpus} vCPU${result.quick ? ', --quick run' : ''}. ${harness.rounds} interleaved rounds (order reversed every round), ` +
    `each ${harness.warmupMs} ms warm-up + ≥ ${harness.minTimeMs} ms in ≥ ${harness.minSamples} samples; ` +
    `figures are the median over rounds of 1e9 ÷ median ns per op; ±x% = half the spread between rounds. ` +
    `Ratios compare rows of this one run. Absolute numbers are this machine's. Reproduce with \`pnpm --filter @mrtr/bench bench\`.` +
    (env.loadavg === undefined ? '' : ` Load average (1 min) ${env.loadavg[0].toFixed(1)} at the start, ${env.loadavg[1].toFixed(1)} at the end.`)
  );
}

const SMALL_NOTE = (r: BenchResult): string =>
  `Claims shaped like \`StateClaims\`: ${r.payloads.small.jsonBytes} B of JSON (small) and ${r.payloads['4k'].jsonBytes} B (4k). ` +
  'Open includes an `exp` check. B = bare node:crypto HMAC-SHA256 over base64url(JSON) with `timingSafeEqual`; ' +
  'C = bare node:crypto AES-256-GCM with a `randomBytes(12)` IV per seal, C-pool = the same with a pooled IV; ' +
  'E = bare msgpackr + @noble/ciphers XChaCha20-Poly1305 with `randomBytes(24)` per seal, E-pool = pooled nonce.';

// ---------------------------------------------------------------------------------------------
// README blocks

const pkgTargets = (r: BenchResult, pkg: PackageName) => r.targets.filter((t) => t.pkg === pkg);

export function readmeBlock(result: BenchResult, pkg: PackageName | 'bench'): string {
  const parts: string[] = [describeRun(result), ''];
  const codecSection = (ids: readonly string[]): void => {
    parts.push(SMALL_NOTE(result), '');
    parts.push(`Small payload (${result.payloads.small.jsonBytes} B JSON):`, '', codecTable(result, 'small', ids), '');
    parts.push(`4 KiB payload (${result.payloads['4k'].jsonBytes} B JSON):`, '', codecTable(result, '4k', ids), '');
    parts.push('Rejecting a 1 MiB token against opening a valid small one:', '', rejectTable(result, ids), '');
  };
  switch (pkg) {
    case 'codec-hmac':
      codecSection(['B', 'SDK', 'hmac']);
      break;
    case 'codec-jwe':
      codecSection(['C', 'C-pool', 'jose', 'jwe']);
      break;
    case 'codec-aead':
      codecSection(['hmac', 'E', 'E-pool', 'aead']);
      break;
    case 'store-memory':
      parts.push('Consumes of fresh ids, tight loop:', '', storeTable(result, ['memory']), '');
      break;
    case 'store-redis':
      parts.push('Consumes of fresh ids against the same Redis, store and bare client in one process:', '', storeTable(result, ['redis']), '');
      if (!result.jobs['store|redis|c1']) parts.push('Redis was not measured in this run (REDIS_URL unset or store missing).', '');
      break;
    case 'store-sql':
      parts.push('Consumes of fresh ids, store and bare client in one process:', '', storeTable(result, ['postgres', 'sqlite']), '');
      break;
    case 'bench':
      if (result.codecs !== undefined) codecSection(result.codecs.rows.map((r) => r.id));
      if (result.stores !== undefined) parts.push('Replay stores, consumes of fresh ids:', '', storeTable(result), '');
      break;
  }
  const targets = pkg === 'bench' ? result.targets : pkgTargets(result, pkg);
  if (targets.length > 0) parts.push('Targets:', '', targetTable(targets), '');
  return parts.join('\n').trimEnd();
}

export function printableReport(result: BenchResult): string {
  const out: string[] = [describeRun(result), ''];
  if (result.codecs !== undefined) {
    out.push(SMALL_NOTE(result), '');
    out.push(`## Codecs, small payload (${result.payloads.small.jsonBytes} B JSON)`, '', codecTable(result, 'small'), '');
    out.push(`## Codecs, 4 KiB payload (${result.payloads['4k'].jsonBytes} B JSON)`, '', codecTable(result, '4k'), '');
    out.push('## Rejecting a 1 MiB token vs opening a valid small one', '', rejectTable(result), '');
    for (const s of result.codecs.skipped) out.push(`note: codec ${s.id} skipped: ${s.reason}`);
  }
  if (result.stores !== undefined) {
    out.push('## Replay stores (fresh ids)', '', storeTable(result), '');
    for (const n of result.stores.notes) out.push(`note: ${n}`);
    for (const s of result.stores.skipped) out.push(`note: store ${s.id} skipped: ${s.reason}`);
  }
  out.push('', '## Targets', '', targetTable(result.targets), '');
  const missed = result.targets.filter((t) => t.pass === false);
  const skipped = result.targets.filter((t) => t.pass === null);
  out.push(
    `${result.targets.length - missed.length - skipped.length} PASS, ${missed.length} MISS, ${skipped.length} SKIP` +
      ` (run took ${(result.durationMs / 1000).toFixed(0)} s)`,
  );
  return out.join('\n');
}

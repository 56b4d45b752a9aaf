import type { PayloadName } from './payload.js';
import type { BenchResult, PackageName, TargetResult } from './result.js';
import { serverlessBlock, serverlessTargets } from './serverless.js';

export type { BenchResult, PackageName, TargetResult } from './result.js';

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

export const fmtRatio = (r: number | null | undefined): string =>
  r === null || r === undefined || !Number.isFinite(r) ? 'n/a' : `${r.toFixed(2)}×`;
const fmtPct = (r: number | undefined): string => (r === undefined || !Number.isFinite(r) ? '' : `±${Math.round((r * 100) / 2)}%`);

function table(header: string[], rows: string[][], align?: ('l' | 'r')[]): string {
  const sep = header.map((_, i) => ((align?.[i] ?? 'l') === 'r' ? '---:' : '---'));
  return [header, sep, ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

// ---------------------------------------------------------------------------------------------
// Targets

export const ops = (result: BenchResult, key: string): number | undefined => result.jobs[key]?.opsPerSec;

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
  const ca = result.jobs[a]?.opsPerCpuSec;
  const cb = result.jobs[b]?.opsPerCpuSec;
  const cpuValue = ca === undefined || cb === undefined ? undefined : invert ? cb / ca : ca / cb;
  return {
    id,
    pkg,
    label,
    value,
    op,
    threshold,
    unit: 'x',
    pass,
    detail,
    ...(range === undefined ? {} : { roundRange: range }),
    ...(cpuValue === undefined ? {} : { cpuValue }),
  };
}

/** Least throughput the guard keeps with an empty event hook, relative to none (a hook must stay cheap). */
export const EVENT_HOOK_MIN_RATIO = 0.7;

/** The acceptance criteria of issues 3, 4, 14, 42 and 43, evaluated on one run: each part's targets when it ran. */
export function evaluateTargets(result: BenchResult): TargetResult[] {
  const t: TargetResult[] = [];
  if (result.codecs !== undefined) codecsTargets(result, t);
  if (result.guard !== undefined) guardTargets(result, t);
  if (result.e2e !== undefined) e2eTargets(result, t);
  if (result.stores !== undefined) storesTargets(result, t);
  if (result.keys !== undefined) keysTargets(result, t);
  if (result.events !== undefined) eventsTargets(result, t);
  t.push(...serverlessTargets(result));
  return t;
}

function codecsTargets(result: BenchResult, t: TargetResult[]): void {
  const codec = (row: string, what: 'seal' | 'open') => `codec|${row}|${what}|small`;
  for (const what of ['seal', 'open'] as const) {
    t.push(
      ratioTarget(
        result,
        `hmac.${what}.vs-B`,
        'codec-hmac',
        `HMAC codec ${what} ÷ bare HMAC (B), small payload`,
        codec('hmac', what),
        codec('B', what),
        '>=',
        0.8,
      ),
    );
  }
  for (const what of ['seal', 'open'] as const) {
    t.push(
      ratioTarget(
        result,
        `hmac.${what}.vs-SDK`,
        'codec-hmac',
        `HMAC codec ${what} ÷ SDK createRequestStateCodec, small payload`,
        codec('hmac', what),
        codec('SDK', what),
        '>=',
        5,
      ),
    );
  }
  for (const what of ['seal', 'open'] as const) {
    t.push(
      ratioTarget(
        result,
        `jwe.${what}.vs-C`,
        'codec-jwe',
        `JWE codec ${what} ÷ bare AES-256-GCM (C), small payload`,
        codec('jwe', what),
        codec('C', what),
        '>=',
        0.5,
      ),
    );
  }
  for (const what of ['seal', 'open'] as const) {
    t.push(
      ratioTarget(
        result,
        `jwe.${what}.vs-jose`,
        'codec-jwe',
        `JWE codec ${what} ÷ jose Compact JWE (CryptoKey), small payload`,
        codec('jwe', what),
        codec('jose', what),
        '>=',
        3,
      ),
    );
  }
  for (const what of ['seal', 'open'] as const) {
    t.push(
      ratioTarget(
        result,
        `aead.${what}.vs-E`,
        'codec-aead',
        `AEAD codec ${what} ÷ bare msgpackr + noble XChaCha20-Poly1305 (E), small payload`,
        codec('aead', what),
        codec('E', what),
        '>=',
        0.8,
      ),
    );
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

function guardTargets(result: BenchResult, t: TargetResult[]): void {
  const guard = (codec: string, what: 'open' | 'mint') => `guard|${codec}|${what}|400|100`;
  t.push(
    ratioTarget(
      result,
      'guard.hmac.open.vs-B',
      'core',
      'guard open (hmac + memory store) ÷ bare HMAC verify (B) of the same claims, 400 B data, 100 B arguments',
      guard('hmac', 'open'),
      'guard|B|open|400',
      '>=',
      0.6,
    ),
  );
  t.push(
    ratioTarget(
      result,
      'guard.hmac.mint.vs-B',
      'core',
      'guard mint (hmac) ÷ bare HMAC seal (B) of the same claims, 400 B data, 100 B arguments',
      guard('hmac', 'mint'),
      'guard|B|seal|400',
      '>=',
      0.6,
    ),
  );
  for (const codec of ['jwe', 'aead']) {
    t.push(
      ratioTarget(
        result,
        `guard.${codec}.open.vs-codec`,
        'core',
        `guard open (${codec} + memory store) ÷ the ${codec} codec's own open, 400 B data, 100 B arguments`,
        guard(codec, 'open'),
        `guard|${codec}-codec|open|400`,
        '>=',
        0.8,
      ),
    );
  }
  t.push(
    ratioTarget(
      result,
      'canonical-json.10k.vs-stringify',
      'core',
      'canonical JSON ÷ JSON.stringify, 10 KiB of arguments',
      'canon|canonical|10k',
      'canon|stringify|10k',
      '>=',
      0.8,
    ),
  );
}

function e2eTargets(result: BenchResult, t: TargetResult[]): void {
  const e2e = (row: E2eResultRow, c: number, threshold: number) => {
    const http = baselineOf(row) === 'sdk-plain-http';
    return ratioTarget(
      result,
      `e2e.${row.id}.c${c}.vs-${http ? 'h' : 'a'}`,
      'mcp-server',
      `end to end: ${row.letter} (${row.id}) flows/s ÷ ${http ? 'h (SDK only, unprotected, over loopback HTTP)' : 'a (SDK only, unprotected)'}, concurrency ${c}`,
      `e2e|${row.id}|c${c}`,
      `e2e|${baselineOf(row)}|c${c}`,
      '>=',
      threshold,
    );
  };
  for (const row of (result.e2e?.rows ?? []).filter((r) => r.store === 'memory')) {
    for (const c of [1, 16]) t.push(e2e(row, c, 0.95));
  }
  // With PostgreSQL (group commit) at concurrency 16.
  const postgres = (result.e2e?.rows ?? []).find((r) => r.id === 'mrtr-hmac-postgres');
  if (postgres !== undefined) t.push(e2e(postgres, 16, 0.8));
}

function storesTargets(result: BenchResult, t: TargetResult[]): void {
  const storePkg: Record<string, PackageName> = { redis: 'store-redis', postgres: 'store-sql', sqlite: 'store-sql' };
  const job = (row: string, c: number) => `store|${row}|c${c}`;
  const store = (backend: string, c: number, vs: 'bare' | 'bare-batch', threshold: number, why: string) =>
    ratioTarget(
      result,
      `${backend}.c${c}.vs-${vs}`,
      storePkg[backend]!,
      `${backend} store consume ÷ ${vs === 'bare' ? 'bare single-command client' : 'bare batched client'}, concurrency ${c}${why}`,
      job(backend, c),
      job(`${backend}-${vs}`, c),
      '>=',
      threshold,
    );
  t.push(store('redis', 1, 'bare', 0.8, ''), store('redis', 32, 'bare', 0.8, ''));
  // Group commit: ratios to the single-statement twin and to a bare batched client, one run.
  t.push(store('redis', 128, 'bare', 1.5, ' (batched)'));
  for (const backend of ['postgres', 'sqlite']) {
    t.push(store(backend, 1, 'bare', 0.9, ' (group commit: no slower at c1)'));
    t.push(store(backend, 32, 'bare', 3, ' (group commit)'));
    if (backend === 'postgres') t.push(store(backend, 128, 'bare', 5, ' (group commit)'));
    for (const c of [32, 128]) t.push(store(backend, c, 'bare-batch', 0.8, ' (group commit)'));
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

function keysTargets(result: BenchResult, t: TargetResult[]): void {
  t.push(
    ratioTarget(
      result,
      'keys.c16.vs-unkeyed',
      'mcp-server',
      'keyed call ÷ unkeyed call, in process, c16 (send_email: hmac, memory store; a fresh idempotency key per call)',
      'keys|keyed|c16',
      'keys|unkeyed|c16',
      '>=',
      0.9,
    ),
  );
}

function eventsTargets(result: BenchResult, t: TargetResult[]): void {
  for (const what of ['open', 'mint'] as const) {
    t.push(
      ratioTarget(
        result,
        `events.empty-hook.${what}`,
        'core',
        `guard ${what} with an empty onEvent hook ÷ without a hook (hmac, no store)`,
        `events|empty|${what}`,
        `events|none|${what}`,
        '>=',
        EVENT_HOOK_MIN_RATIO,
      ),
    );
  }
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
      ref === undefined || seal === undefined || refSeal === undefined
        ? ref === undefined
          ? 'reference'
          : 'n/a'
        : `${fmtRatio(seal.opsPerSec / refSeal)} ${ref}`,
      ref === undefined || open === undefined || refOpen === undefined
        ? ref === undefined
          ? 'reference'
          : 'n/a'
        : `${fmtRatio(open.opsPerSec / refOpen)} ${ref}`,
    ];
  });
  return table(['id', 'codec', 'seal ops/s', 'open ops/s', 'token B', 'seal ÷ ref', 'open ÷ ref'], body, [
    'l',
    'l',
    'r',
    'r',
    'r',
    'r',
    'r',
  ]);
}

export function rejectTable(result: BenchResult, ids?: readonly string[]): string {
  const rows = (result.codecs?.rows ?? []).filter(
    (r) => (ids === undefined || ids.includes(r.id)) && result.jobs[`reject|${r.id}|open|1MiB`] !== undefined,
  );
  const body = rows.map((r) => {
    const reject = ops(result, `reject|${r.id}|open|1MiB`)!;
    const open = ops(result, `codec|${r.id}|open|small`);
    return [r.id, fmtOps(reject), fmtOps(open), open === undefined ? 'n/a' : fmtRatio(open / reject)];
  });
  return table(['id', 'reject 1 MiB ops/s', 'open valid small ops/s', 'reject cost ÷ open cost'], body, ['l', 'r', 'r', 'r']);
}

export function storeTable(result: BenchResult, backends?: readonly string[]): string {
  const rows = (result.stores?.rows ?? []).filter((r) => backends === undefined || backends.includes(r.backend));
  const levels = [1, 32, 128].filter((c) => rows.some((r) => result.jobs[`store|${r.id}|c${c}`] !== undefined));
  const body = rows.map((r) => {
    const cells = [r.id, r.label];
    // Every row is compared with its backend's bare single-command twin.
    const ref = `${r.backend}-bare`;
    for (const c of levels) {
      const job = result.jobs[`store|${r.id}|c${c}`];
      const bare = ops(result, `store|${ref}|c${c}`);
      cells.push(`${fmtOps(job?.opsPerSec)} ${fmtPct(job?.spread)}`.trim());
      cells.push(r.id === ref ? 'reference' : job === undefined || bare === undefined ? 'n/a' : fmtRatio(job.opsPerSec / bare));
    }
    return cells;
  });
  const header = ['id', 'store', ...levels.flatMap((c) => [`c=${c} ops/s`, `c=${c} ÷ bare`])];
  return table(header, body, ['l', 'l', ...levels.flatMap(() => ['r', 'r'] as const)]);
}

const GUARD_DATA_NAMES = ['400', '4k', '16k'] as const;
const GUARD_ARGS_NAMES = ['100', '10k'] as const;
const fmtBytes = (n: number | undefined): string =>
  n === undefined ? 'n/a' : n >= 1024 ? `${(n / 1024).toFixed(n % 1024 === 0 ? 0 : 1)} KiB` : `${n} B`;

/** Guard open/mint per codec, data and arguments size, with ratios to B and to the codec alone. */
export function guardTable(result: BenchResult): string {
  const g = result.guard;
  if (g === undefined) return '';
  const body: string[][] = [];
  for (const d of GUARD_DATA_NAMES) {
    const bOpen = ops(result, `guard|B|open|${d}`);
    const bSeal = ops(result, `guard|B|seal|${d}`);
    body.push([`B`, fmtBytes(g.sizes.claims[d]), '—', `${fmtOps(bOpen)}`, 'reference', '', `${fmtOps(bSeal)}`, 'reference', '']);
    for (const codec of g.codecs) {
      const cOpen = ops(result, `guard|${codec}-codec|open|${d}`);
      const cSeal = ops(result, `guard|${codec}-codec|seal|${d}`);
      body.push([
        `${codec} codec alone`,
        fmtBytes(g.sizes.data[d]),
        '—',
        fmtOps(cOpen),
        bOpen && cOpen ? fmtRatio(cOpen / bOpen) : 'n/a',
        '',
        fmtOps(cSeal),
        bSeal && cSeal ? fmtRatio(cSeal / bSeal) : 'n/a',
        '',
      ]);
      for (const a of GUARD_ARGS_NAMES) {
        const open = ops(result, `guard|${codec}|open|${d}|${a}`);
        const mint = ops(result, `guard|${codec}|mint|${d}|${a}`);
        body.push([
          `guard ${codec}`,
          fmtBytes(g.sizes.data[d]),
          fmtBytes(g.sizes.args[a]),
          fmtOps(open),
          open && bOpen ? fmtRatio(open / bOpen) : 'n/a',
          open && cOpen ? fmtRatio(open / cOpen) : 'n/a',
          fmtOps(mint),
          mint && bSeal ? fmtRatio(mint / bSeal) : 'n/a',
          mint && cSeal ? fmtRatio(mint / cSeal) : 'n/a',
        ]);
      }
    }
  }
  return table(
    ['row', 'data', 'arguments', 'open ops/s', 'open ÷ B', 'open ÷ codec', 'mint/seal ops/s', 'mint ÷ B seal', 'mint ÷ codec seal'],
    body,
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
  );
}

export function canonTable(result: BenchResult): string {
  const body = [
    ['10 KiB arguments (`paths` array, 3 keys out of order)', '10k'],
    ['10 KiB arguments (array of small objects, every one out of order)', '10k-objects'],
  ].map(([label, key]) => {
    const c = ops(result, `canon|canonical|${key}`);
    const j = ops(result, `canon|stringify|${key}`);
    return [label!, fmtOps(c), fmtOps(j), c && j ? fmtRatio(c / j) : 'n/a'];
  });
  return table(['input', 'canonicalJson ops/s', 'JSON.stringify ops/s', 'ratio'], body, ['l', 'r', 'r', 'r']);
}

type E2eResultRow = NonNullable<BenchResult['e2e']>['rows'][number];
/** The row an e2e row is divided by (results written before the HTTP rows have none: a). */
const baselineOf = (row: E2eResultRow): string => row.baseline ?? 'sdk-plain';

/**
 * Flows/s per e2e row at concurrency 1 and 16, ratios to its baseline (a: SDK, unprotected, in process; h: the same
 * over loopback HTTP) and to b (SDK codec, in process rows only).
 */
export function e2eTable(result: BenchResult): string {
  const rows = result.e2e?.rows ?? [];
  const body = rows.map((r) => {
    const cells = [r.letter, r.label];
    for (const c of [1, 16]) {
      const job = result.jobs[`e2e|${r.id}|c${c}`];
      // Each row ÷ its own baseline (a in process, h over HTTP); b has no HTTP twin.
      const base = baselineOf(r);
      const a = ops(result, `e2e|${base}|c${c}`);
      const b = base === 'sdk-plain' ? ops(result, `e2e|sdk-codec|c${c}`) : undefined;
      const cpu = job?.opsPerCpuSec;
      const cpuA = result.jobs[`e2e|${base}|c${c}`]?.opsPerCpuSec;
      cells.push(`${fmtOps(job?.opsPerSec)} ${fmtPct(job?.spread)}`.trim());
      cells.push(job === undefined || a === undefined ? 'n/a' : fmtRatio(job.opsPerSec / a));
      cells.push(job === undefined || b === undefined ? 'n/a' : fmtRatio(job.opsPerSec / b));
      cells.push(cpu === undefined || cpuA === undefined ? 'n/a' : `${fmtOps(cpu)} (${fmtRatio(cpu / cpuA)})`);
    }
    return cells;
  });
  return table(
    ['', 'server', 'c=1 flows/s', '÷ a/h', '÷ b', 'c=1 flows/CPU-s (÷ a/h)', 'c=16 flows/s', '÷ a/h', '÷ b', 'c=16 flows/CPU-s (÷ a/h)'],
    body,
    ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
  );
}

const GUARD_NOTE =
  'Guard = `createStateGuard` with the codec and a memory store (a fresh store each round; each timed open hands it a fresh id). ' +
  'open = size cap, codec open, claims shape, expiry, audience, principal tag, arguments digest (RFC 8785), flow, single use; ' +
  'mint = a new flow: principal tag, arguments digest, data check, codec seal. B = bare node:crypto HMAC-SHA256 over ' +
  'base64url(JSON) of the same claims the hmac guard seals (with an `exp` check on open); "codec alone" = the codec\'s open/seal of the same token.';
const E2E_NOTE =
  'One flow = `client.callTool` of the official client (auto-fulfil) against `createMcpHandler(...).fetch` in process (no sockets): ' +
  'round 1 answers input_required (one form elicitation plus a state), round 2 checks the answer and the state. ' +
  'Concurrency 16 = 16 flows in flight on one client. h and i take the same flow over loopback HTTP (a `node:http` server ' +
  "through `toNodeHandler`, the client's global `fetch`, one process): h the SDK's `createMcpHandler` unprotected, " +
  'i `createHttpHandler` of `@mrtr/mcp-server/http` with its defaults, recording on; they are divided by h.';

export function targetTable(targets: readonly TargetResult[]): string {
  const body = targets.map((t) => {
    const value = t.value === null ? 'n/a' : t.unit === 'ops/s' ? fmtOps(t.value) : fmtRatio(t.value);
    const need = `${t.op === '>=' ? '≥' : '≤'} ${t.unit === 'ops/s' ? fmtOps(t.threshold) : fmtRatio(t.threshold)}`;
    const range = t.roundRange === undefined ? '' : `${fmtRatio(t.roundRange[0])}–${fmtRatio(t.roundRange[1])}`;
    return [t.label, value, need, t.pass === null ? 'SKIP' : t.pass ? 'PASS' : 'MISS', t.detail, range, fmtRatio(t.cpuValue)];
  });
  return table(['target', 'measured', 'required', 'result', 'figures', 'per-round range', 'same ratio, CPU time'], body, [
    'l',
    'r',
    'r',
    'l',
    'l',
    'r',
    'r',
  ]);
}

/** The guard with and without event hooks: open and mint ops/s, each ÷ the guard without a hook. */
export function eventsTable(result: BenchResult): string {
  const rows = (result.events?.rows ?? []).map((r) => {
    const cells = [r.id, r.label];
    for (const what of ['open', 'mint'] as const) {
      const key = `events|${r.id}|${what}`;
      const none = ops(result, `events|none|${what}`);
      const mine = ops(result, key);
      cells.push(`${fmtOps(mine)} ${fmtPct(result.jobs[key]?.spread)}`.trim());
      cells.push(r.id === 'none' ? 'reference' : fmtRatio(mine === undefined || none === undefined ? null : mine / none));
    }
    return cells;
  });
  return table(['id', 'guard', 'open ops/s', 'open ÷ none', 'mint ops/s', 'mint ÷ none'], rows, ['l', 'l', 'r', 'r', 'r', 'r']);
}

// ---------------------------------------------------------------------------------------------
// Outcome recording

const OUTCOME_STORE_NAME: Record<string, string> = { memory: 'memory', redis: 'Redis', postgres: 'PostgreSQL', sqlite: 'SQLite' };

/** One "with ÷ without" line: both figures, the ratio, its per-round range and the same ratio on CPU time. */
function withWithout(result: BenchResult, without: string, withKey: string): string[] {
  const a = result.jobs[without];
  const b = result.jobs[withKey];
  const range = roundRange(result, withKey, without);
  const cpu = a?.opsPerCpuSec !== undefined && b?.opsPerCpuSec !== undefined ? b.opsPerCpuSec / a.opsPerCpuSec : undefined;
  return [
    `${fmtOps(a?.opsPerSec)} ${fmtPct(a?.spread)}`.trim(),
    `${fmtOps(b?.opsPerSec)} ${fmtPct(b?.spread)}`.trim(),
    a === undefined || b === undefined ? 'n/a' : fmtRatio(b.opsPerSec / a.opsPerSec),
    range === undefined ? '' : `${fmtRatio(range[0])}–${fmtRatio(range[1])}`,
    fmtRatio(cpu),
  ];
}

/** Store × concurrency: the round step (`guard.open` against `guard.admit` + `record`), or the store step alone. */
export function outcomeStepTable(result: BenchResult, level: 'guard' | 'store'): string {
  const [without, withStep] = level === 'guard' ? ['open', 'admit-record'] : ['consume', 'claim-record'];
  const body: string[][] = [];
  for (const row of result.outcomes?.stores ?? []) {
    for (const c of row.concurrency) {
      const key = (step: string) => `outcome|${level}|${row.backend}|${step}|c${c}`;
      if (result.jobs[key(without)] === undefined && result.jobs[key(withStep)] === undefined) continue;
      body.push([OUTCOME_STORE_NAME[row.backend] ?? row.backend, String(c), ...withWithout(result, key(without), key(withStep))]);
    }
  }
  const header =
    level === 'guard'
      ? [
          'store',
          'concurrency',
          'without: `guard.open` rounds/s',
          'with: `guard.admit` + `record` rounds/s',
          'with ÷ without',
          'per-round range',
          'same ratio, CPU time',
        ]
      : [
          'store',
          'concurrency',
          '`consume` ops/s',
          '`claim` + `record` ops/s',
          'with ÷ without',
          'per-round range',
          'same ratio, CPU time',
        ];
  return table(header, body, ['l', 'r', 'r', 'r', 'r', 'r', 'r']);
}

/** End to end: flows/s of rows c, f and g with `recordOutcomes: false` and `true`. */
export function outcomeE2eTable(result: BenchResult): string {
  const rows = result.outcomes?.e2e ?? [];
  const stores = [...new Set(rows.map((r) => r.store))];
  const body: string[][] = [];
  for (const c of [1, 16]) {
    for (const store of stores) {
      const key = (on: boolean) => `outcome|e2e|${store}|${on ? 'on' : 'off'}|c${c}`;
      if (result.jobs[key(false)] === undefined && result.jobs[key(true)] === undefined) continue;
      const label = rows.find((r) => r.store === store)?.label.replace(/, recordOutcomes: (true|false)$/, '') ?? store;
      body.push([label, String(c), ...withWithout(result, key(false), key(true))]);
    }
  }
  return table(
    [
      'server',
      'concurrency',
      '`recordOutcomes: false` flows/s',
      '`recordOutcomes: true` flows/s',
      'true ÷ false',
      'per-round range',
      'same ratio, CPU time',
    ],
    body,
    ['l', 'r', 'r', 'r', 'r', 'r', 'r'],
  );
}

const fmtLoad = (l: readonly number[] | undefined): string => (l === undefined ? 'n/a' : l.map((x) => x.toFixed(2)).join(', '));

/** The block of apps/bench/README.md between the outcome markers (and the printed report's outcome section). */
export function outcomesBlock(result: BenchResult): string {
  const o = result.outcomes;
  if (o === undefined) return 'This run did not measure outcome recording.';
  const parts: string[] = [describeRun(result)];
  if (o.loadavg !== undefined)
    parts.push('', `Load average (1, 5, 15 min): ${fmtLoad(o.loadavg.start)} at the start, ${fmtLoad(o.loadavg.end)} at the end.`);
  parts.push(
    '',
    `Recorded outcome: \`{ r: CallToolResult }\` of ${o.sizes.outcomeJson} B of JSON, sealed by \`@mrtr/codec-hmac\` into ${o.sizes.sealedOutcome} characters ` +
      `(what the store keeps). State: ${o.sizes.data} B data claim, ${o.sizes.args} B arguments. Every timed recording checks that it was a first ` +
      'use and that the store kept the outcome. These rows: `pnpm --filter @mrtr/bench bench --only outcomes`.',
    '',
    'The round step per store: `guard.open(token)` (every check, then `consume`) against `guard.admit(token, answers)` ' +
      "(the same checks, the answers' fingerprint, `claim`) followed by `admission.record(outcome)` (seal, `record`):",
    '',
    outcomeStepTable(result, 'guard'),
    '',
    'The store step alone: `consume(id)` against `claim(id, fingerprint)` + `record(id, fingerprint, sealed outcome)`:',
    '',
    outcomeStepTable(result, 'store'),
  );
  if (o.e2e.length > 0) {
    parts.push(
      '',
      'End to end (the two-round flow of the e2e rows; its recorded outcome is the one-line tool result' +
        `${o.sizes.e2eSealedOutcome === undefined ? '' : `, ${o.sizes.e2eSealedOutcome} characters sealed`}), \`@mrtr/mcp-server\` with \`recordOutcomes\` off and on:`,
      '',
      outcomeE2eTable(result),
    );
  }
  for (const n of o.notes) parts.push('', `Note: ${n}`);
  for (const s of o.skipped) parts.push('', `Note: ${s.id} skipped: ${s.reason}`);
  return parts.join('\n');
}

export function describeRun(result: BenchResult): string {
  const { env, harness } = result;
  return (
    `Measured by \`apps/bench\` on ${result.finishedAt.slice(0, 10)}: Node ${env.node} (V8 ${env.v8}, OpenSSL ${env.openssl}), ` +
    `${env.cpu} × ${env.cpus} vCPU${result.quick ? ', --quick run' : ''}. ${harness.rounds} interleaved rounds (order reversed every round), ` +
    `each ${harness.warmupMs} ms warm-up + ≥ ${harness.minTimeMs} ms in ≥ ${harness.minSamples} samples; ` +
    `figures are the median over rounds of 1e9 ÷ median ns per op; ±x% = half the spread between rounds. ` +
    `Ratios compare rows of this one run. Absolute numbers are this machine's. Reproduce with \`pnpm --filter @mrtr/bench bench\`.` +
    (env.loadavg === undefined
      ? ''
      : ` Load average (1 min) ${env.loadavg[0].toFixed(1)} at the start, ${env.loadavg[1].toFixed(1)} at the end.`)
  );
}

const SMALL_NOTE = (r: BenchResult): string =>
  `Claims shaped like \`StateClaims\`: ${r.payloads.small.jsonBytes} B of JSON (small) and ${r.payloads['4k'].jsonBytes} B (4k). ` +
  'Open includes an `exp` check. B = bare node:crypto HMAC-SHA256 over base64url(JSON) with `timingSafeEqual`; ' +
  'C = bare node:crypto AES-256-GCM with a `randomBytes(12)` IV per seal, C-pool = the same with a pooled IV; ' +
  'E = bare msgpackr + @noble/ciphers XChaCha20-Poly1305 with `randomBytes(24)` per seal, E-pool = pooled nonce.';

const EVENTS_NOTE =
  'The state guard (`@mrtr/codec-hmac`, no store, small data) with and without `onEvent`: open = one open of the same ' +
  'valid token, mint = one round-1 mint. `otel-noop` = `@mrtr/otel` on `@opentelemetry/api` without an SDK; ' +
  '`otel-sdk` = `@mrtr/otel` recording into an SDK MeterProvider and TracerProvider (a span per open and mint, nothing exported).';

// ---------------------------------------------------------------------------------------------
// README blocks

const pkgTargets = (r: BenchResult, pkg: PackageName) => r.targets.filter((t) => t.pkg === pkg);

/** Where `--update-readmes` writes the chart, relative to apps/bench (the READMEs link it from there). */
export const CHART_PATH = 'results/chart.svg';
const CHART_ALT = 'Bar charts of this run: codec seal and open ops/s, replay-store consumes/s by concurrency, end-to-end flows/s';

export function readmeBlock(result: BenchResult, pkg: PackageName | 'bench'): string {
  const parts: string[] = [describeRun(result), ''];
  if (pkg === 'bench') parts.push(`![${CHART_ALT}](${CHART_PATH})`, '');
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
      parts.push(
        'Consumes of fresh ids against the same Redis, store and bare client in one process:',
        '',
        storeTable(result, ['redis']),
        '',
      );
      if (!result.jobs['store|redis|c1']) parts.push('Redis was not measured in this run (REDIS_URL unset or store missing).', '');
      break;
    case 'store-sql':
      parts.push('Consumes of fresh ids, store and bare client in one process:', '', storeTable(result, ['postgres', 'sqlite']), '');
      break;
    case 'bench':
      if (result.codecs !== undefined) codecSection(result.codecs.rows.map((r) => r.id));
      if (result.stores !== undefined) parts.push('Replay stores, consumes of fresh ids:', '', storeTable(result), '');
      if (result.guard !== undefined) {
        parts.push(GUARD_NOTE, '', 'The guard per codec, by data and arguments size:', '', guardTable(result), '');
        parts.push('Canonical JSON (RFC 8785) against `JSON.stringify`:', '', canonTable(result), '');
      }
      if (result.e2e !== undefined) parts.push(E2E_NOTE, '', 'End to end, a two-round confirmation:', '', e2eTable(result), '');
      if (result.events !== undefined) parts.push(EVENTS_NOTE, '', eventsTable(result), '');
      break;
  }
  const targets = pkg === 'bench' ? result.targets : pkgTargets(result, pkg);
  if (targets.length > 0) parts.push('Targets:', '', targetTable(targets), '');
  return parts.join('\n').trimEnd();
}

const CODECS = [
  { pkg: 'codec-hmac', id: 'hmac', runtimes: 'Node (sync), web', note: 'claims readable by the client; fastest, smallest to audit' },
  {
    pkg: 'codec-jwe',
    id: 'jwe',
    runtimes: 'Node (sync), web (jose)',
    note: 'standard compact JWE: any JOSE library opens it with the key',
  },
  { pkg: 'codec-aead', id: 'aead', runtimes: 'Node (sync), web', note: 'the most compact encrypted token' },
] as const;
const STORES = [
  {
    pkg: 'store-memory',
    id: 'memory',
    guarantee: 'single use in one process; bounded, fails closed when full',
    pick: 'tests, demos, one process',
  },
  {
    pkg: 'store-redis',
    id: 'redis',
    guarantee: 'single use across a fleet: `SET NX PXAT` per consume, batched',
    pick: 'a fleet that has Redis (a non-evicting one)',
  },
  {
    pkg: 'store-sql',
    id: 'postgres',
    guarantee: 'single use across a fleet: an atomic upsert per consume, group commit',
    pick: 'a fleet that has PostgreSQL',
  },
  { pkg: 'store-sql', id: 'sqlite', guarantee: 'single use on one machine, survives restarts', pick: 'one machine with persistence' },
] as const;
const fmtKiB = (bytes: number | undefined): string => (bytes === undefined ? 'n/a' : `${(bytes / 1024).toFixed(0)} KiB`);

/** The root README's block: codecs and stores side by side, figures from this run and the installed packages. */
export function rootBlock(result: BenchResult): string {
  const facts = result.packages ?? {};
  const codecRows = CODECS.map((c) => {
    const row = result.codecs?.rows.find((r) => r.id === c.id);
    const f = facts[c.pkg];
    return [
      `[\`@mrtr/${c.pkg}\`](packages/${c.pkg})`,
      row === undefined ? 'n/a' : String(row.tokenBytes.small),
      fmtOps(ops(result, `codec|${c.id}|seal|small`)),
      fmtOps(ops(result, `codec|${c.id}|open|small`)),
      row === undefined ? 'n/a' : row.confidential ? 'yes' : 'no',
      c.runtimes,
      f === undefined ? 'n/a' : f.dependencies.length === 0 ? 'none' : f.dependencies.map((d) => `\`${d}\``).join(', '),
      fmtKiB(f?.installBytes),
      c.note,
    ];
  });
  const storeRows = STORES.map((s) => [
    `[\`@mrtr/${s.pkg}\`](packages/${s.pkg})${s.pkg === 'store-sql' ? ` (${s.id})` : ''}`,
    s.guarantee,
    fmtOps(ops(result, `store|${s.id}|c1`)),
    fmtOps(ops(result, `store|${s.id}|c32`)),
    fmtOps(ops(result, `store|${s.id}|c128`)),
    s.pick,
  ]);
  return [
    `![${CHART_ALT}](apps/bench/${CHART_PATH})`,
    '',
    `Codecs, on the small payload (${result.payloads.small.jsonBytes} B of claims JSON); install size = the package's files plus its runtime dependencies:`,
    '',
    table(
      ['codec', 'token B', 'seal ops/s', 'open ops/s', 'confidential', 'runtimes', 'dependencies', 'install size', 'pick it for'],
      codecRows,
      ['l', 'r', 'r', 'r', 'l', 'l', 'l', 'r', 'l'],
    ),
    '',
    'Replay stores, consumes of fresh ids at concurrency 1, 32 and 128:',
    '',
    table(['store', 'guarantee', 'c=1 ops/s', 'c=32 ops/s', 'c=128 ops/s', 'pick it for'], storeRows, ['l', 'l', 'r', 'r', 'r', 'l']),
    '',
    describeRun(result),
  ].join('\n');
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
  if (result.guard !== undefined) {
    out.push(GUARD_NOTE, '', '## Guard', '', guardTable(result), '', '## Canonical JSON', '', canonTable(result), '');
    for (const s of result.guard.skipped) out.push(`note: guard ${s.id} skipped: ${s.reason}`);
  }
  if (result.e2e !== undefined) {
    out.push(E2E_NOTE, '', '## End to end', '', e2eTable(result), '');
    for (const n of result.e2e.notes) out.push(`note: ${n}`);
    for (const s of result.e2e.skipped) out.push(`note: e2e ${s.id} skipped: ${s.reason}`);
  }
  if (result.events !== undefined) out.push('## Event hooks on the guard', '', EVENTS_NOTE, '', eventsTable(result), '');
  if (result.outcomes !== undefined) out.push('## Outcome recording', '', outcomesBlock(result), '');
  if (result.serverless !== undefined) out.push('## Serverless stores', '', serverlessBlock(result), '');
  out.push('', '## Targets', '', targetTable(result.targets), '');
  const missed = result.targets.filter((t) => t.pass === false);
  const skipped = result.targets.filter((t) => t.pass === null);
  out.push(
    `${result.targets.length - missed.length - skipped.length} PASS, ${missed.length} MISS, ${skipped.length} SKIP` +
      ` (run took ${(result.durationMs / 1000).toFixed(0)} s)`,
  );
  return out.join('\n');
}

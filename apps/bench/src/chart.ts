import { type BenchResult, fmtOps, fmtRatio, ops } from './report.js';

/**
 * One SVG drawn from a run's JSON (no other input, so the picture and the tables cannot disagree):
 *   1. codecs side by side: seal and open ops/s on the small payload, each family against its bare primitive;
 *   2. replay stores: consumes/s at concurrency 1, 32 and 128, the store beside its bare single-statement and
 *      bare batched clients, one panel (and one linear scale) per backend;
 *   3. end to end: flows/s of every server variant at concurrency 1 and 16, with its ratio to (a).
 * Bars are linear from zero; every bar carries its figure, so nothing depends on reading the axis.
 */

const WIDTH = 960;
const PAD = 24;
const FONT = 'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"';
const INK = '#1f2328';
const MUTED = '#59636e';
const GRID = '#d1d9e0';
/** Colour by what a row is: a bare primitive or client, a bare batched client, another library, or mrtr. */
const KIND_COLOUR: Record<string, string> = {
  bare: '#8c959f',
  'bare-batch': '#bf8700',
  library: '#8250df',
  mrtr: '#0969da',
};
const KIND_NAME: Record<string, string> = {
  bare: 'bare primitive / client',
  'bare-batch': 'bare batched client',
  library: 'other library',
  mrtr: 'mrtr',
};

/** Escapes text for SVG character data and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const num = (n: number): string => (Number.isInteger(n) ? String(n) : n.toFixed(1));

function text(x: number, y: number, body: string, attrs = ''): string {
  return `<text x="${num(x)}" y="${num(y)}"${attrs ? ` ${attrs}` : ''}>${escapeXml(body)}</text>`;
}

/** A bar whose `data-value` is the figure it stands for (the tests check size ∝ value within a `scale` group). */
function bar(x: number, y: number, width: number, height: number, colour: string, value: number, label: string): string {
  return (
    `<rect class="bar" x="${num(x)}" y="${num(y)}" width="${num(width)}" height="${num(height)}" fill="${colour}" ` +
    `data-value="${value}"><title>${escapeXml(label)}</title></rect>`
  );
}

interface Panel {
  height: number;
  body: string;
}

/** Horizontal bars: one line per item, grouped, on one scale. */
function horizontalPanel(
  title: string,
  note: string,
  groups: { name: string; items: { label: string; value: number; colour: string; suffix?: string }[] }[],
): Panel {
  const labelWidth = 250;
  const valueWidth = 150;
  const plotWidth = WIDTH - 2 * PAD - labelWidth - valueWidth;
  const barHeight = 14;
  const lineHeight = 19;
  const max = Math.max(...groups.flatMap((g) => g.items.map((i) => i.value)));
  const parts: string[] = [
    text(PAD, 22, title, `font-size="16" font-weight="600" fill="${INK}"`),
    text(PAD, 40, note, `font-size="12" fill="${MUTED}"`),
  ];
  parts.push('<g class="scale" data-axis="x">');
  let y = 56;
  for (const group of groups) {
    parts.push(text(PAD, y + 12, group.name, `font-size="12" font-weight="600" fill="${INK}"`));
    y += 18;
    for (const item of group.items) {
      const width = max > 0 ? (item.value / max) * plotWidth : 0;
      const x0 = PAD + labelWidth;
      parts.push(text(x0 - 8, y + barHeight - 3, item.label, `font-size="12" text-anchor="end" fill="${INK}"`));
      parts.push(bar(x0, y, width, barHeight, item.colour, item.value, `${item.label}: ${fmtOps(item.value)} ops/s`));
      parts.push(text(x0 + width + 6, y + barHeight - 3, `${fmtOps(item.value)}${item.suffix ?? ''}`, `font-size="12" fill="${MUTED}"`));
      y += lineHeight;
    }
    y += 6;
  }
  parts.push('</g>');
  return { height: y + 8, body: parts.join('\n') };
}

function codecPanel(result: BenchResult): Panel | undefined {
  const rows = result.codecs?.rows ?? [];
  if (rows.length === 0) return undefined;
  const groups: Parameters<typeof horizontalPanel>[2] = [];
  for (const family of ['hmac', 'jwe', 'aead']) {
    const members = rows.filter((r) => r.family === family);
    if (members.length === 0) continue;
    for (const what of ['seal', 'open'] as const) {
      const items = members.flatMap((r) => {
        const value = ops(result, `codec|${r.id}|${what}|small`);
        return value === undefined ? [] : [{ label: `${r.id} ${what}`, value, colour: KIND_COLOUR[r.kind] ?? MUTED }];
      });
      if (items.length > 0) groups.push({ name: `${family} family, ${what}`, items });
    }
  }
  if (groups.length === 0) return undefined;
  return horizontalPanel(
    `Codecs: ops/s, small payload (${result.payloads.small.jsonBytes} B of claims JSON)`,
    'Each @mrtr codec beside its bare primitive (B, C, E; -pool = pooled IV/nonce) and another library (SDK, jose).',
    groups,
  );
}

function e2ePanel(result: BenchResult): Panel | undefined {
  const rows = result.e2e?.rows ?? [];
  const groups: Parameters<typeof horizontalPanel>[2] = [];
  for (const c of [1, 16]) {
    const items = rows.flatMap((r) => {
      const value = ops(result, `e2e|${r.id}|c${c}`);
      if (value === undefined) return [];
      // Each row beside its baseline: a in process, h over loopback HTTP.
      const base = r.baseline ?? 'sdk-plain';
      const a = ops(result, `e2e|${base}|c${c}`);
      const name = base === 'sdk-plain' ? 'a' : 'h';
      const suffix = r.id === base || a === undefined ? '' : `  (${fmtRatio(value / a)} of ${name})`;
      // a and h (no protection) are drawn as the bare reference, b (the SDK's own codec) as another library.
      const colour = r.kind === 'mrtr' ? KIND_COLOUR.mrtr : r.id === base ? KIND_COLOUR.bare : KIND_COLOUR.library;
      return [{ label: `${r.letter}  ${r.id}`, value, colour: colour ?? MUTED, suffix }];
    });
    if (items.length > 0) groups.push({ name: `concurrency ${c}`, items });
  }
  if (groups.length === 0) return undefined;
  return horizontalPanel(
    'End to end: two-round flows/s, official client → createMcpHandler().fetch in process (a–g) or over loopback HTTP (h, i)',
    'a = SDK only, state unprotected; b = the SDK’s createRequestStateCodec; c–e = mrtr + memory store; f = + Redis; g = + PostgreSQL; h = a over HTTP; i = mrtr createHttpHandler.',
    groups,
  );
}

/** Vertical grouped bars, one small panel per backend: concurrency on x, one bar per store row. */
function storePanel(result: BenchResult): Panel | undefined {
  const rows = result.stores?.rows ?? [];
  const levels = [1, 32, 128];
  const backends = ['postgres', 'sqlite', 'redis'].filter((b) =>
    rows.some((r) => r.backend === b && ops(result, `store|${r.id}|c1`) !== undefined),
  );
  if (backends.length === 0) return undefined;
  const parts: string[] = [
    text(
      PAD,
      22,
      'Replay stores: consumes/s of fresh ids by concurrency (one process, one run)',
      `font-size="16" font-weight="600" fill="${INK}"`,
    ),
    text(
      PAD,
      40,
      'The store beside its bare single-statement client and a bare batched client; each panel has its own scale.',
      `font-size="12" fill="${MUTED}"`,
    ),
  ];
  const top = 60;
  const plotHeight = 170;
  const gap = 28;
  const panelWidth = (WIDTH - 2 * PAD - gap * (backends.length - 1)) / backends.length;
  backends.forEach((backend, index) => {
    const members = rows.filter((r) => r.backend === backend);
    const x0 = PAD + index * (panelWidth + gap);
    const values = levels.flatMap((c) => members.map((r) => ops(result, `store|${r.id}|c${c}`) ?? 0));
    const max = Math.max(...values);
    const baseY = top + 18 + plotHeight;
    parts.push('<g class="scale" data-axis="y">');
    parts.push(text(x0, top + 8, backend, `font-size="13" font-weight="600" fill="${INK}"`));
    parts.push(`<line x1="${num(x0)}" y1="${num(baseY)}" x2="${num(x0 + panelWidth)}" y2="${num(baseY)}" stroke="${GRID}"/>`);
    const groupWidth = panelWidth / levels.length;
    const barWidth = Math.min(26, (groupWidth - 14) / members.length);
    levels.forEach((c, li) => {
      const gx = x0 + li * groupWidth + (groupWidth - barWidth * members.length) / 2;
      members.forEach((r, ri) => {
        const value = ops(result, `store|${r.id}|c${c}`);
        if (value === undefined) return;
        const height = max > 0 ? (value / max) * plotHeight : 0;
        const x = gx + ri * barWidth;
        parts.push(
          bar(x + 1, baseY - height, barWidth - 2, height, KIND_COLOUR[r.kind] ?? MUTED, value, `${r.id}, c=${c}: ${fmtOps(value)} ops/s`),
        );
        parts.push(text(x + barWidth / 2, baseY - height - 4, fmtOps(value), `font-size="10" text-anchor="middle" fill="${MUTED}"`));
      });
      parts.push(text(x0 + li * groupWidth + groupWidth / 2, baseY + 15, `c=${c}`, `font-size="12" text-anchor="middle" fill="${INK}"`));
    });
    parts.push('</g>');
  });
  return { height: top + 18 + plotHeight + 30, body: parts.join('\n') };
}

function legend(kinds: readonly string[]): Panel {
  let x = PAD;
  const parts: string[] = [];
  for (const kind of kinds) {
    const name = KIND_NAME[kind] ?? kind;
    parts.push(`<rect x="${num(x)}" y="6" width="12" height="12" fill="${KIND_COLOUR[kind]}"/>`);
    parts.push(text(x + 17, 16, name, `font-size="12" fill="${INK}"`));
    x += 17 + name.length * 6.6 + 22;
  }
  return { height: 26, body: parts.join('\n') };
}

/** The whole chart as an SVG document. Throws a RangeError when the run holds none of the three sections. */
export function renderChart(result: BenchResult): string {
  const panels = [codecPanel(result), storePanel(result), e2ePanel(result)].filter((p): p is Panel => p !== undefined);
  if (panels.length === 0) throw new RangeError('renderChart: the run has no codec, store or end-to-end rows to draw');
  panels.unshift(legend(['mrtr', 'bare', 'bare-batch', 'library']));
  const footer =
    `apps/bench, ${result.finishedAt.slice(0, 10)}: Node ${result.env.node}, ${result.env.cpu} × ${result.env.cpus} vCPU` +
    `${result.quick ? ', --quick run' : ''}; medians of ${result.harness.rounds} interleaved rounds. Ratios hold within this run only.`;
  let y = 8;
  const groups = panels.map((panel) => {
    const g = `<g transform="translate(0 ${num(y)})">\n${panel.body}\n</g>`;
    y += panel.height + 10;
    return g;
  });
  const height = y + 24;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${num(height)}" viewBox="0 0 ${WIDTH} ${num(height)}" ${FONT} role="img" aria-labelledby="chart-title">`,
    '<title id="chart-title">mrtr benchmark: codecs, replay stores and whole requests, side by side</title>',
    `<rect width="${WIDTH}" height="${num(height)}" fill="#ffffff"/>`,
    ...groups,
    text(PAD, height - 12, footer, `font-size="11" fill="${MUTED}"`),
    '</svg>',
    '',
  ].join('\n');
}

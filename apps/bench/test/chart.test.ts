// The chart is drawn from the run's JSON only: the committed SVG must be what the committed JSON draws, every bar's
// length must be proportional to its figure within its scale group, and text from the JSON must be escaped.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { escapeXml, renderChart } from '../src/chart.js';
import { type BenchResult, fmtOps } from '../src/report.js';

const resultsDir = new URL('../results/', import.meta.url);
const latest = (): BenchResult => JSON.parse(readFileSync(new URL('latest.json', resultsDir), 'utf8')) as BenchResult;

/** Tags of an SVG without comments, CDATA or processing instructions (what renderChart writes) balance. */
function expectWellFormed(svg: string): void {
  const stack: string[] = [];
  for (const match of svg.matchAll(/<(\/?)([a-zA-Z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/g)) {
    const [, closing, name, , selfClosing] = match;
    if (selfClosing) continue;
    if (closing) expect(stack.pop(), `</${name}> closes the open element`).toBe(name);
    else stack.push(name!);
  }
  expect(stack).toEqual([]);
  // Nothing that looks like markup is left outside the tags the pattern accepted.
  expect(svg.replace(/<(\/?)([a-zA-Z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/g, '')).not.toMatch(/[<>]/);
  expect(svg).not.toMatch(/&(?!(lt|gt|amp|quot|#39);)/);
}

interface Bar {
  value: number;
  width: number;
  height: number;
}

/** Bars per scale group, in document order. */
function scaleGroups(svg: string): { axis: string; bars: Bar[] }[] {
  return [...svg.matchAll(/<g class="scale" data-axis="(x|y)">([\s\S]*?)<\/g>/g)].map(([, axis, body]) => ({
    axis: axis!,
    bars: [...body!.matchAll(/<rect class="bar" x="[^"]*" y="[^"]*" width="([^"]*)" height="([^"]*)"[^>]*data-value="([^"]*)"/g)].map(
      ([, width, height, value]) => ({ width: Number(width), height: Number(height), value: Number(value) }),
    ),
  }));
}

describe('renderChart', () => {
  it('the committed results/chart.svg is what results/latest.json draws (regenerate with --from … --update-readmes)', () => {
    expect(readFileSync(new URL('chart.svg', resultsDir), 'utf8')).toBe(renderChart(latest()));
  });

  it('is well-formed SVG; every bar is proportional to its figure within its scale; the longest bar fills the plot', () => {
    const result = latest();
    const svg = renderChart(result);
    expectWellFormed(svg);
    const groups = scaleGroups(svg);
    // codecs, three store backends, end to end
    expect(groups.map((g) => g.axis)).toEqual(['x', 'y', 'y', 'y', 'x']);
    for (const { axis, bars } of groups) {
      expect(bars.length).toBeGreaterThan(2);
      const size = (b: Bar) => (axis === 'x' ? b.width : b.height);
      const max = bars.reduce((a, b) => (b.value > a.value ? b : a));
      for (const b of bars) expect(size(b)).toBeCloseTo((b.value / max.value) * size(max), 0);
      expect(size(max)).toBeGreaterThan(100);
    }
    // Every job drawn is in the JSON, and each figure is printed beside its bar.
    const drawn = groups.flatMap((g) => g.bars.map((b) => b.value));
    const jobs = new Set(Object.values(result.jobs).map((j) => j.opsPerSec));
    for (const value of drawn) {
      expect(jobs.has(value)).toBe(true);
      expect(svg).toContain(`>${fmtOps(value)}`);
    }
    const codecJobs = Object.keys(result.jobs).filter((k) => /^codec\|[^|]+\|(seal|open)\|small$/.test(k));
    const storeJobs = Object.keys(result.jobs).filter((k) => k.startsWith('store|') && !k.startsWith('store|memory'));
    const e2eJobs = Object.keys(result.jobs).filter((k) => k.startsWith('e2e|'));
    expect(drawn).toHaveLength(codecJobs.length + storeJobs.length + e2eJobs.length);
    for (const row of result.e2e!.rows) expect(svg).toContain(`${row.letter}  ${row.id}`);
  });

  it('draws what a partial run has and escapes text that comes from the JSON', () => {
    const { codecs: _codecs, stores: _stores, ...result } = latest();
    const partial: BenchResult = {
      ...result,
      e2e: { ...result.e2e!, rows: result.e2e!.rows.map((r) => (r.id === 'mrtr-jwe' ? { ...r, letter: '<d&"x">' } : r)) },
    };
    const svg = renderChart(partial);
    expectWellFormed(svg);
    expect(scaleGroups(svg).map((g) => g.axis)).toEqual(['x']);
    expect(svg).toContain(escapeXml('<d&"x">'));
    expect(svg).not.toContain('<d&');
    const { e2e: _e2e, ...empty } = partial;
    expect(() => renderChart(empty)).toThrow(RangeError);
  });
});

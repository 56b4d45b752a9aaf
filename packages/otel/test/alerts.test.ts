// docs/alerts.yml: Prometheus rules that parse, name only metrics @mrtr/otel exports and codes that exist, and are
// explained in docs/operating.md; `promtool check rules` too when promtool is on PATH.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { MRTR_ERROR_CODES } from '@mrtr/core/errors';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { METRICS } from '../src/index.js';

const ALERTS = fileURLToPath(new URL('../../../docs/alerts.yml', import.meta.url));
const OPERATING = readFileSync(new URL('../../../docs/operating.md', import.meta.url), 'utf8');

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const doc = parse(readFileSync(ALERTS, 'utf8')) as { groups: { name: string; rules: Rule[] }[] };
const rules = doc.groups.flatMap((g) => g.rules);

/** Prometheus series names of every metric: counters get `_total`, histograms `_bucket`/`_sum`/`_count`, gauges none. */
const SERIES = new Set(
  Object.values(METRICS).flatMap((name) => {
    const base = name.replaceAll('.', '_');
    return name === METRICS.clockSkew ? [base] : [`${base}_total`, `${base}_bucket`, `${base}_sum`, `${base}_count`];
  }),
);
const DURATION = /^(?:\d+[smhdw])+$/;

function balanced(expr: string): boolean {
  const pairs: Record<string, string> = { ')': '(', ']': '[', '}': '{' };
  const stack: string[] = [];
  let quoted = false;
  for (const c of expr) {
    if (c === '"') quoted = !quoted;
    if (quoted) continue;
    if ('([{'.includes(c)) stack.push(c);
    else if (c in pairs && stack.pop() !== pairs[c]) return false;
  }
  return stack.length === 0 && !quoted;
}

describe('docs/alerts.yml', () => {
  it('is a rule file: groups of rules with a name, an expression, a duration, a severity and a summary', () => {
    expect(doc.groups.length).toBeGreaterThan(0);
    expect(rules.length).toBeGreaterThanOrEqual(10);
    const names = new Set<string>();
    for (const rule of rules) {
      expect(Object.keys(rule).sort()).toEqual(['alert', 'annotations', 'expr', 'for', 'labels']);
      expect(rule.alert).toMatch(/^Mrtr[A-Z][A-Za-z]+$/);
      expect(names.has(rule.alert)).toBe(false);
      names.add(rule.alert);
      expect(rule.for).toMatch(DURATION);
      expect(['page', 'ticket']).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary?.length).toBeGreaterThan(10);
      expect(rule.annotations?.description?.length).toBeGreaterThan(10);
      expect(balanced(rule.expr), rule.expr).toBe(true);
    }
  });

  it('names only metrics @mrtr/otel exports, codes that exist and valid ranges', () => {
    for (const { alert, expr } of rules) {
      const series = [...expr.matchAll(/\bmrtr_[a-z_]+/g)].map((m) => m[0]);
      expect(series.length, alert).toBeGreaterThan(0);
      for (const s of series) expect(SERIES, `${alert}: ${s}`).toContain(s);
      for (const [, codes] of expr.matchAll(/error_type=~?"([^"]+)"/g)) {
        for (const code of codes!.split('|')) expect(MRTR_ERROR_CODES.has(code as never), `${alert}: ${code}`).toBe(true);
      }
      for (const [, range] of expr.matchAll(/\[([^\]]+)\]/g)) expect(range, alert).toMatch(DURATION);
    }
  });

  it('every alert and every rejection code is explained in docs/operating.md', () => {
    for (const { alert } of rules) expect(OPERATING).toContain(`\`${alert}\``);
    for (const code of MRTR_ERROR_CODES) {
      if (code === 'ERR_CAPABILITY_MISSING') continue; // not a state rejection: a -32021 the client can act on
      expect(OPERATING, code).toContain(`\`${code}\``);
    }
  });

  it('passes promtool check rules (when promtool is installed)', (context) => {
    const which = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
    if (which.error !== undefined) {
      console.warn('[alerts] promtool is not on PATH: only the parser checks ran');
      context.skip();
      return;
    }
    const result = spawnSync('promtool', ['check', 'rules', ALERTS], { encoding: 'utf8', timeout: 60_000 });
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
    expect(result.stdout).toContain(`SUCCESS: ${rules.length} rules found`);
  });
});

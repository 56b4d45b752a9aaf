/** Human durations: `2h 5m`, `9m 58s`, `1.2 s`, `350 ms`. */
export function duration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1000) return `${Math.round(abs)} ms`;
  if (abs < 60_000) return `${abs % 1000 === 0 || abs >= 10_000 ? Math.round(abs / 1000) : (abs / 1000).toFixed(1)} s`;
  const s = Math.floor(abs / 1000);
  const d = Math.floor(s / 86_400);
  const h = Math.floor((s % 86_400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (d > 0) return h > 0 ? `${d}d ${h}h` : `${d}d`;
  if (h > 0) return m > 0 ? `${h}h ${m}m` : `${h}h`;
  return sec > 0 ? `${m}m ${sec}s` : `${m}m`;
}

/** `in 9m 58s` or `2m 3s ago` (relative to `now`). */
export function relative(at: number, now: number): string {
  const delta = at - now;
  if (delta === 0) return 'now';
  return delta > 0 ? `in ${duration(delta)}` : `${duration(delta)} ago`;
}

/** `2026-12-02T17:20:00.000Z (in 9m 58s)`. */
export function when(at: number, now: number): string {
  return `${new Date(at).toISOString()} (${relative(at, now)})`;
}

/** Parses `--now`: epoch milliseconds or an ISO 8601 date-time. */
export function parseInstant(text: string): number | undefined {
  if (/^\d{1,16}$/.test(text)) return Number(text);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text)) return undefined;
  const t = Date.parse(text);
  return Number.isFinite(t) ? t : undefined;
}

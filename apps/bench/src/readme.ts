import { existsSync, readFileSync, writeFileSync } from 'node:fs';

export const START_MARKER = '<!-- bench:start -->';
export const END_MARKER = '<!-- bench:end -->';
/** The markers of apps/bench/README.md's outcome-recording section, rewritten on its own. */
export const OUTCOMES_MARKERS = { start: '<!-- bench:outcomes:start -->', end: '<!-- bench:outcomes:end -->' } as const;

export interface Markers {
  start: string;
  end: string;
}
const BENCH_MARKERS: Markers = { start: START_MARKER, end: END_MARKER };

export type ReplaceOutcome = { ok: true; text: string; changed: boolean } | { ok: false; reason: string };

/**
 * Replaces what lies between the bench markers (or the given ones) with `block`, leaving every other byte of the file as
 * it was. Refuses (and changes nothing) unless there is exactly one start marker followed by exactly
 * one end marker.
 */
export function replaceBenchBlock(text: string, block: string, markers: Markers = BENCH_MARKERS): ReplaceOutcome {
  const { start: startMarker, end: endMarker } = markers;
  const starts = text.split(startMarker).length - 1;
  const ends = text.split(endMarker).length - 1;
  if (starts === 0 && ends === 0) return { ok: false, reason: 'no bench markers' };
  if (starts !== 1 || ends !== 1)
    return { ok: false, reason: `expected one ${startMarker} and one ${endMarker}, found ${starts} and ${ends}` };
  const start = text.indexOf(startMarker);
  const end = text.indexOf(endMarker);
  if (end < start) return { ok: false, reason: `${endMarker} comes before ${startMarker}` };
  const next = `${text.slice(0, start + startMarker.length)}\n${block.trim()}\n${text.slice(end)}`;
  return { ok: true, text: next, changed: next !== text };
}

export type UpdateOutcome = 'updated' | 'unchanged' | `skipped: ${string}`;

/** Rewrites the bench block of one README file in place. */
export function updateReadme(file: string, block: string, markers: Markers = BENCH_MARKERS): UpdateOutcome {
  if (!existsSync(file)) return 'skipped: file does not exist';
  const text = readFileSync(file, 'utf8');
  const outcome = replaceBenchBlock(text, block, markers);
  if (!outcome.ok) return `skipped: ${outcome.reason}`;
  if (!outcome.changed) return 'unchanged';
  writeFileSync(file, outcome.text);
  return 'updated';
}

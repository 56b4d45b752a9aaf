import { existsSync, readFileSync, writeFileSync } from 'node:fs';

export const START_MARKER = '<!-- bench:start -->';
export const END_MARKER = '<!-- bench:end -->';

export type ReplaceOutcome = { ok: true; text: string; changed: boolean } | { ok: false; reason: string };

/**
 * Replaces what lies between the bench markers with `block`, leaving every other byte of the file as
 * it was. Refuses (and changes nothing) unless there is exactly one start marker followed by exactly
 * one end marker.
 */
export function replaceBenchBlock(text: string, block: string): ReplaceOutcome {
  const starts = text.split(START_MARKER).length - 1;
  const ends = text.split(END_MARKER).length - 1;
  if (starts === 0 && ends === 0) return { ok: false, reason: 'no bench markers' };
  if (starts !== 1 || ends !== 1) return { ok: false, reason: `expected one ${START_MARKER} and one ${END_MARKER}, found ${starts} and ${ends}` };
  const start = text.indexOf(START_MARKER);
  const end = text.indexOf(END_MARKER);
  if (end < start) return { ok: false, reason: `${END_MARKER} comes before ${START_MARKER}` };
  const next = `${text.slice(0, start + START_MARKER.length)}\n${block.trim()}\n${text.slice(end)}`;
  return { ok: true, text: next, changed: next !== text };
}

export type UpdateOutcome = 'updated' | 'unchanged' | `skipped: ${string}`;

/** Rewrites the bench block of one README file in place. */
export function updateReadme(file: string, block: string): UpdateOutcome {
  if (!existsSync(file)) return 'skipped: file does not exist';
  const text = readFileSync(file, 'utf8');
  const outcome = replaceBenchBlock(text, block);
  if (!outcome.ok) return `skipped: ${outcome.reason}`;
  if (!outcome.changed) return 'unchanged';
  writeFileSync(file, outcome.text);
  return 'updated';
}

import { fail } from './assert.js';

/** What an identical retry of a round was answered: the round's result, or a status without one. */
export type HistoryAnswer = { readonly result: string } | 'pending' | 'unknown' | 'replayed' | 'error';

/** One event of a {@link History}, in the order they happened. */
export type HistoryEvent =
  | { readonly kind: 'accept' | 'effect'; readonly stateId: string; readonly instance: string; readonly fence: number }
  | { readonly kind: 'record'; readonly stateId: string; readonly instance: string; readonly result: string }
  | { readonly kind: 'strand'; readonly stateId: string; readonly instance: string }
  | { readonly kind: 'answer'; readonly stateId: string; readonly instance: string; readonly answer: HistoryAnswer };

/** Options of {@link createHistory}. */
export interface HistoryOptions {
  /** Rounds may run again after a reclaim (at-least-once): a recorded state may then have had one effect per fence. @default false */
  atLeastOnce?: boolean;
}

/**
 * A small history checker (Jepsen's idea): a test logs what every instance did with each state id, then `check()`
 * asserts the rules of single use under faults:
 * - no id accepted twice (a reclaim accepts it again only with a fence not seen before for that id);
 * - an effect only after its instance's accept, at most one per accept, and at most one per recorded state unless
 *   `atLeastOnce`;
 * - one result recorded per id, and every answer logged after it is that result (identical retries get it), with no
 *   result answered before it;
 * - every stranded round (accepted, abandoned before record) is answered `unknown` at least once afterwards, and
 *   nothing but `pending` or `unknown` until it is accepted again (or its owner, only slow, records after all).
 */
export interface History {
  /** `instance`'s claim of `stateId` was first (with `fence`, 0 by default): the round is admitted. */
  accept(stateId: string, instance: string, fence?: number): void;
  /** The admitted round's effect ran. */
  effect(stateId: string, instance: string, fence?: number): void;
  /** The round's result was recorded (confirmed): identical retries must get it from now on. */
  record(stateId: string, instance: string, result: string): void;
  /** The round was abandoned after its accept, nothing recorded (its instance died or gave up). */
  strand(stateId: string, instance: string): void;
  /** What an identical retry was answered. */
  answer(stateId: string, instance: string, answer: HistoryAnswer): void;
  readonly events: readonly HistoryEvent[];
  /** Every rule broken, one line each (empty: the history holds). */
  violations(): string[];
  /** Fails (AssertionError) with every violation when there is one. */
  check(): void;
}

export function createHistory(options: HistoryOptions = {}): History {
  const events: HistoryEvent[] = [];
  const history: History = {
    accept: (stateId, instance, fence = 0) => void events.push({ kind: 'accept', stateId, instance, fence }),
    effect: (stateId, instance, fence = 0) => void events.push({ kind: 'effect', stateId, instance, fence }),
    record: (stateId, instance, result) => void events.push({ kind: 'record', stateId, instance, result }),
    strand: (stateId, instance) => void events.push({ kind: 'strand', stateId, instance }),
    answer: (stateId, instance, answer) => void events.push({ kind: 'answer', stateId, instance, answer }),
    events,
    violations: () => {
      const byId = new Map<string, HistoryEvent[]>();
      for (const e of events) byId.set(e.stateId, [...(byId.get(e.stateId) ?? []), e]);
      return [...byId].flatMap(([id, log]) => [...acceptRules(id, log, options), ...answerRules(id, log), ...strandRules(id, log)]);
    },
    check: () => {
      const found = history.violations();
      if (found.length > 0) fail(`the history breaks ${found.length} rule(s):\n${found.join('\n')}`);
    },
  };
  return history;
}

/** Accepts and effects of one id. */
function acceptRules(id: string, log: HistoryEvent[], options: HistoryOptions): string[] {
  const found: string[] = [];
  const accepted = new Map<number, string>();
  const effects = new Set<number>();
  for (const e of log) {
    if (e.kind === 'accept') {
      if (accepted.has(e.fence)) found.push(`${id}: accepted twice (fence ${e.fence}, by ${accepted.get(e.fence)} and ${e.instance})`);
      accepted.set(e.fence, e.instance);
    } else if (e.kind === 'effect') {
      if (accepted.get(e.fence) !== e.instance) found.push(`${id}: an effect by ${e.instance} without its accept (fence ${e.fence})`);
      if (effects.has(e.fence)) found.push(`${id}: the effect ran twice for one accept (fence ${e.fence})`);
      effects.add(e.fence);
    }
  }
  const recorded = log.some((e) => e.kind === 'record');
  if (recorded && effects.size > 1 && !options.atLeastOnce) found.push(`${id}: a recorded state had ${effects.size} effects`);
  return found;
}

/** Records and the answers of identical retries of one id. */
function answerRules(id: string, log: HistoryEvent[]): string[] {
  const found: string[] = [];
  let result: string | undefined;
  for (const e of log) {
    if (e.kind === 'record') {
      if (result !== undefined && result !== e.result) found.push(`${id}: recorded twice, "${result}" then "${e.result}"`);
      result ??= e.result;
    } else if (e.kind === 'answer') {
      const got = typeof e.answer === 'string' ? e.answer : `result "${e.answer.result}"`;
      if (result !== undefined && got !== `result "${result}"`) found.push(`${id}: a retry after the record got ${got}, not its result`);
      if (result === undefined && typeof e.answer !== 'string') found.push(`${id}: a retry got ${got} before any was recorded`);
    }
  }
  return found;
}

/** A stranded round is reported as unknown (until it is accepted again, or recorded after all). */
function strandRules(id: string, log: HistoryEvent[]): string[] {
  const found: string[] = [];
  log.forEach((e, i) => {
    if (e.kind !== 'strand') return;
    const next = log.findIndex((later, j) => j > i && (later.kind === 'accept' || later.kind === 'record'));
    const after = log.slice(i + 1, next === -1 ? undefined : next).flatMap((later) => (later.kind === 'answer' ? [later.answer] : []));
    const wrong = after.find((a) => a !== 'pending' && a !== 'unknown');
    if (wrong !== undefined) found.push(`${id}: a stranded round was answered ${typeof wrong === 'string' ? wrong : 'a result'}`);
    if (!after.includes('unknown')) found.push(`${id}: a stranded round was never reported as unknown`);
  });
  return found;
}

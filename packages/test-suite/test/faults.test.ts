import { MrtrError } from '@mrtr/core';
import { storeCapabilities } from '@mrtr/core/store';
import { describe, expect, it } from 'vitest';
import { createHistory, type History, withFaults } from '../src/index.js';
import { referenceLeaseStore } from './lease-fixtures.js';

const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    (value) => `resolved ${String(value)}`,
    (error: unknown) => (MrtrError.is(error) ? error.code : String(error)),
  );
const exp = 1_000_000 + 60_000;
const store = () => referenceLeaseStore({}, { now: () => 1_000_000 });

describe('withFaults', () => {
  it('passes calls through, with the inner store’s capabilities and properties', async () => {
    const inner = store();
    const faults = withFaults(inner);
    expect(storeCapabilities(faults.store)).toEqual(storeCapabilities(inner));
    expect(await faults.store.consume('a', exp)).toBe(true);
    expect(await inner.consume('a', exp)).toBe(false);
    expect(faults.log).toEqual([{ method: 'consume', fate: 'passed', stalled: false }]);
  });

  it('loseNextReply: the inner store acts, the reply is lost (ERR_STORE_UNAVAILABLE); only the next call', async () => {
    const faults = withFaults(store());
    faults.loseNextReply();
    expect(await codeOf(faults.store.consume('a', exp))).toBe('ERR_STORE_UNAVAILABLE');
    expect(await faults.store.consume('a', exp)).toBe(false);
    expect(faults.log.map((e) => e.fate)).toEqual(['lost', 'passed']);
  });

  it('stall: replies are held until resume, after the inner store acted', async () => {
    const inner = store();
    const faults = withFaults(inner);
    faults.stall();
    let settled = false;
    const reply = faults.store.consume('a', exp).then((value) => {
      settled = true;
      return value;
    });
    await faults.idle();
    expect(await inner.consume('a', exp)).toBe(false);
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    faults.resume();
    expect(await reply).toBe(true);
  });

  it('blackhole: every call fails without reaching the inner store, until heal', async () => {
    const inner = store();
    const faults = withFaults(inner);
    faults.blackhole();
    expect(await codeOf(faults.store.consume('a', exp))).toBe('ERR_STORE_UNAVAILABLE');
    expect(await codeOf(faults.store.time?.() ?? Promise.resolve())).toBe('ERR_STORE_UNAVAILABLE');
    faults.heal();
    expect(await faults.store.consume('a', exp)).toBe(true);
    expect(faults.log.map((e) => e.fate)).toEqual(['blackholed', 'blackholed', 'passed']);
  });
});

describe('createHistory: the rules bite', () => {
  const holds = () => {
    const h = createHistory();
    h.accept('s', 'A');
    h.answer('s', 'B', 'pending');
    h.effect('s', 'A');
    h.record('s', 'A', 'r');
    h.answer('s', 'B', { result: 'r' });
    h.accept('t', 'A');
    h.effect('t', 'A');
    h.strand('t', 'A');
    h.answer('t', 'B', 'pending');
    h.answer('t', 'B', 'unknown');
    return h;
  };

  it('a history that holds has no violation', () => {
    expect(holds().violations()).toEqual([]);
    expect(() => holds().check()).not.toThrow();
  });

  const breaks: [string, (h: History) => void, string][] = [
    ['an id accepted twice', (h) => h.accept('s', 'B'), 'accepted twice'],
    ['an effect without its accept', (h) => h.effect('u', 'A'), 'without its accept'],
    ['an effect twice for one accept', (h) => h.effect('s', 'A'), 'ran twice'],
    ['a replay answered after the record', (h) => h.answer('s', 'B', 'replayed'), 'not its result'],
    ['another result answered after the record', (h) => h.answer('s', 'B', { result: 'x' }), 'not its result'],
    ['a result answered before any record', (h) => h.answer('v', 'B', { result: 'x' }), 'before any was recorded'],
    ['two results recorded', (h) => h.record('s', 'B', 'x'), 'recorded twice'],
    ['a stranded round answered as a replay', (h) => h.answer('t', 'B', 'replayed'), 'stranded round was answered replayed'],
    [
      'a stranded round never reported unknown',
      (h) => {
        h.accept('w', 'A');
        h.strand('w', 'A');
        h.answer('w', 'B', 'pending');
      },
      'never reported as unknown',
    ],
    [
      'a reclaimed, recorded state with two effects (at-most-once)',
      (h) => {
        h.accept('t', 'B', 1);
        h.effect('t', 'B', 1);
        h.record('t', 'B', 'r');
      },
      'had 2 effects',
    ],
  ];
  it.each(breaks)('finds %s', (_label, breakIt, message) => {
    const h = holds();
    breakIt(h);
    expect(h.violations().some((v) => v.includes(message))).toBe(true);
    expect(() => h.check()).toThrow(message);
  });

  it('allows a reclaimed round its own effect with atLeastOnce, and checks nothing of a stranded round after its reclaim', () => {
    const h = createHistory({ atLeastOnce: true });
    h.accept('t', 'A');
    h.effect('t', 'A');
    h.strand('t', 'A');
    h.answer('t', 'B', 'unknown');
    h.accept('t', 'B', 1);
    h.effect('t', 'B', 1);
    h.record('t', 'B', 'r');
    h.answer('t', 'A', { result: 'r' });
    expect(h.violations()).toEqual([]);
  });
});

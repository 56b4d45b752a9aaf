// The probes written once, over any store: the consume twice, the store clock, the ledger epoch, the task probe; and
// the run of one backend's entry through them.
import { randomBytes } from 'node:crypto';
import type { ReplayStore } from '@mrtr/core';
import { storeCapabilities } from '@mrtr/core/store';
import { duration } from '../time.js';
import type { Backend, ClockProbe, Session, Settings } from './backend.js';
import { type Add, bestEffort, type Check, DOCTOR_NAMESPACE, errorText, hostNow, skewCheck, withTimeout } from './common.js';
import { taskProbe } from './task-probe.js';

/** What a store declares (an older store package declares nothing: no clock, no epoch). */
function declared(store: ReplayStore): { clock: boolean; epoch: boolean } {
  try {
    const caps = storeCapabilities(store);
    return { clock: caps.clock && store.time !== undefined, epoch: caps.epoch && store.ledgerEpoch !== undefined };
  } catch {
    return { clock: false, epoch: false };
  }
}

/**
 * Now by the store's clock when it declares one (it refuses an expiry at or before it, `ERR_STATE_EXPIRED`), else by
 * this host's. A store clock that does not answer: this host's clock (the consume then reports the store; the clock
 * line reports the clock).
 */
async function storeNow(store: ReplayStore, timeoutMs: number, label: string): Promise<number> {
  if (!declared(store).clock) return hostNow();
  try {
    return await withTimeout(store.time!(), timeoutMs, label);
  } catch {
    return hostNow();
  }
}

/** How long the throwaway id is to live: past both consumes on a slow store, and deleted after anyway. */
const PROBE_ID_TTL_MS = 60_000;

/** Consumes a throwaway id twice: the first must be accepted, the second refused. */
export async function consumeTwice(store: ReplayStore, timeoutMs: number, label: string): Promise<{ id: string; check: Check }> {
  const id = `doctor-${randomBytes(16).toString('base64url')}`;
  const expiresAtMs = (await storeNow(store, timeoutMs, label)) + PROBE_ID_TTL_MS;
  const started = performance.now();
  const first = await withTimeout(store.consume(id, expiresAtMs), timeoutMs, label);
  const second = await withTimeout(store.consume(id, expiresAtMs), timeoutMs, label);
  const ms = performance.now() - started;
  if (first === true && second === false) {
    return {
      id,
      check: { name: label, status: 'ok', detail: `consume of a throwaway id: first accepted, replay refused (${duration(ms)} for both)` },
    };
  }
  return {
    id,
    check: {
      name: label,
      status: 'fail',
      detail: `single use is broken: first consume ${String(first)}, second ${String(second)} (expected true, then false)`,
    },
  };
}

/** What the store's `ERR_STORE_UNAVAILABLE` wraps (the store's own answer, e.g. a Redis error), else the error. */
function storeCause(error: unknown): unknown {
  const { code, cause } = (error ?? {}) as { code?: unknown; cause?: unknown };
  return code === 'ERR_STORE_UNAVAILABLE' && cause !== undefined ? cause : error;
}

/** The store's clock against this host's, read halfway through the round trip. */
async function clockLine(store: ReplayStore, probe: ClockProbe, label: string, s: Settings, add: Add): Promise<void> {
  const read = probe.read ?? (() => store.time!());
  try {
    const t0 = hostNow();
    const at = await withTimeout(read(), s.timeoutMs, label);
    const t1 = hostNow();
    add(skewCheck(probe.name, at - Math.round((t0 + t1) / 2), t1 - t0, s.skewMs, probe.note));
  } catch (error) {
    if (probe.unreadable === undefined) throw error;
    add({ name: probe.name, status: 'warn', detail: `${probe.unreadable}: ${errorText(storeCause(error))}` });
  }
}

/** The ledger epoch of the probes' namespace: when it began by the store's clock (a loss begins it again). */
async function epochLine(store: ReplayStore, name: string, s: Settings, add: Add): Promise<void> {
  try {
    const epoch = await withTimeout(store.ledgerEpoch!(), s.timeoutMs * 2, name);
    if (typeof epoch !== 'number' || !Number.isSafeInteger(epoch) || epoch < 0) throw new Error(`answered ${String(epoch)}, not a time`);
    const age = Math.max(0, (await storeNow(store, s.timeoutMs, name)) - epoch);
    add({
      name,
      status: 'ok',
      detail: `the ledger of namespace ${DOCTOR_NAMESPACE} began ${duration(age)} ago by the store's clock (a flush or a lost table begins it again, and the states minted before are refused: ERR_LEDGER_LOST)`,
    });
  } catch (error) {
    add({ name, status: 'fail', detail: `ledgerEpoch() failed: ${errorText(error)}` });
  }
}

/** The replay store's probes, in order: the backend's lines before, the consume, its lines after, clock, epoch. */
async function replayProbes(label: string, session: Session, s: Settings, add: Add): Promise<void> {
  await session.before?.(add);
  const { id, check } = await consumeTwice(session.store, s.timeoutMs * (session.consumeTimeouts ?? 2), label);
  if (session.where !== '') check.detail += ` ${session.where}`;
  session.consumed?.(check);
  add(check);
  if (session.forget !== undefined) await bestEffort(() => withTimeout(session.forget!(id), s.timeoutMs, label));
  await session.after?.(add);
  const { clock, epoch } = declared(session.store);
  if (session.clock !== undefined && (clock || session.clock.read !== undefined))
    await clockLine(session.store, session.clock, label, s, add);
  if (session.epoch !== undefined && epoch) await epochLine(session.store, session.epoch, s, add);
}

/** Runs one backend's entry: its replay store through the probes, then its task store. */
export async function checkBackend(label: string, backend: Backend, s: Settings, add: Add): Promise<void> {
  const unconfigured = backend.unconfigured?.(s);
  if (unconfigured !== undefined) {
    add({ name: label, status: 'fail', detail: unconfigured });
    return;
  }
  let session: Session | undefined;
  try {
    session = await backend.open(s);
    await replayProbes(label, session, s, add);
  } catch (error) {
    add({ name: label, status: 'fail', detail: `${backend.place(s)}: ${errorText(error)}` });
  }
  try {
    const tasks = session?.tasks ?? backend.tasks?.(s);
    if (tasks !== undefined) await taskProbe(tasks, s, add);
  } finally {
    await session?.close().catch(() => {});
  }
}

// The cloudflare backend: a Durable Object store exists only inside its Worker, so the doctor reaches it through the
// Worker's doctor route (`createDoctorRoute` of @mrtr/store-cloudflare) at MRTR_DOCTOR_URL, with MRTR_DOCTOR_TOKEN.
// The probes are the same as every store's: the route answers consume, time and ledgerEpoch with the store's own.
import type { ReplayStore } from '@mrtr/core';
import { redactUrl } from '@mrtr/core/store';
import type { Backend, Settings } from './backend.js';

/** The route's answer to one probe: its `value`, or an error that says what the route refused. */
async function ask(s: Settings, body: Record<string, unknown>): Promise<unknown> {
  const response = await fetch(s.doctorUrl!, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.doctorToken!}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(s.timeoutMs),
    redirect: 'error',
  });
  let answer: { value?: unknown; error?: unknown } | undefined;
  try {
    answer = (await response.json()) as typeof answer;
  } catch {
    answer = undefined;
  }
  if (response.status === 200 && answer !== undefined && 'value' in answer) return answer.value;
  const said = typeof answer?.error === 'string' ? answer.error.slice(0, 200) : 'no doctor answer';
  const hint = response.status === 401 ? ' (MRTR_DOCTOR_TOKEN is not the token the Worker was given)' : '';
  throw new Error(`the doctor route answered ${response.status}: ${said}${hint}`);
}

const typed = <T>(value: unknown, type: 'boolean' | 'number', op: string): T => {
  if (typeof value !== type) throw new Error(`the doctor route answered ${op} with ${JSON.stringify(value)?.slice(0, 80)}, not a ${type}`);
  return value as T;
};

/** The Durable Object store as the route shows it: consume, its clock and its epoch, and nothing else. */
function remoteStore(s: Settings): ReplayStore {
  return {
    capabilities: { shared: true, keyExchange: false, clock: true, leases: false, epoch: true },
    consume: async (id, expiresAtMs) => typed<boolean>(await ask(s, { op: 'consume', id, expiresAtMs }), 'boolean', 'consume'),
    time: async () => typed<number>(await ask(s, { op: 'time' }), 'number', 'time'),
    ledgerEpoch: async () => typed<number>(await ask(s, { op: 'ledgerEpoch' }), 'number', 'ledgerEpoch'),
    close: async () => {},
  };
}

/**
 * A Durable Object store, through its Worker's doctor route: MRTR_DOCTOR_URL (selects it by default) and
 * MRTR_DOCTOR_TOKEN. Its task store is not probed (the route offers the replay probes only).
 */
export const cloudflare: Backend = {
  packages: [],
  byDefault: (s) => s.doctorUrl !== undefined,
  unconfigured: (s) =>
    s.doctorUrl === undefined
      ? "MRTR_DOCTOR_URL is not set: the URL of the Worker's doctor route (createDoctorRoute of @mrtr/store-cloudflare)"
      : s.doctorToken === undefined
        ? 'MRTR_DOCTOR_TOKEN is not set (the token the Worker gave createDoctorRoute)'
        : undefined,
  place: (s) => redactUrl(s.doctorUrl!),
  async open(s) {
    return {
      store: remoteStore(s),
      where: `through ${redactUrl(s.doctorUrl!)}`,
      clock: {
        name: 'cloudflare clock',
        note: "the Durable Objects judge expiry, leases and the epoch by their own clock, read by the Worker's doctor route",
      },
      epoch: 'cloudflare epoch',
      close: async () => {},
    };
  },
};

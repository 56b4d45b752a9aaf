import { MrtrError, type ReplayStore } from '@mrtr/core';
import { readWithin } from '@mrtr/core/encoding';

/** Where a Worker usually mounts the doctor route (any path works: `mrtr doctor` is given the whole URL). */
export const DOCTOR_PATH = '/.well-known/mrtr-doctor';
/** Shortest doctor token, in characters: a secret of at least 32 random characters (`openssl rand -base64 32`). */
export const MIN_DOCTOR_TOKEN_CHARS = 32;

/** The probes' ids: what `mrtr doctor` draws (`doctor-` and 16 random bytes, base64url), nothing a state could be. */
const PROBE_ID = /^doctor-[A-Za-z0-9_-]{22}$/;
/** Longest probe id lifetime past this Worker's clock: the CLI asks for a minute. */
const MAX_PROBE_TTL_MS = 5 * 60_000;
/** Largest request body, bytes: one small JSON object. */
const MAX_BODY_BYTES = 512;

export interface DoctorRouteOptions {
  /** The store to check, as the Worker builds it (`createDurableObjectStore(env.MRTR_STORE)`). */
  readonly store: ReplayStore;
  /** The bearer token `mrtr doctor` sends (`MRTR_DOCTOR_TOKEN`): a Worker secret of ≥ 32 characters. */
  readonly token: string;
}

type Probe = { op: 'consume'; id: string; expiresAtMs: number } | { op: 'time' } | { op: 'ledgerEpoch' };

const json = (status: number, body: unknown): Response =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store' } });

const digest = async (text: string): Promise<Uint8Array> =>
  new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text)));

/** Compares the digests of the two tokens: the time taken does not depend on where they differ, nor on their lengths. */
async function sameToken(presented: string, expected: Uint8Array): Promise<boolean> {
  const got = await digest(presented);
  let diff = 0;
  for (let i = 0; i < expected.length; i++) diff |= got[i]! ^ expected[i]!;
  return diff === 0;
}

/** The request's body as text, read no further than `max` bytes: `undefined` when it is longer. */
async function bodyWithin(request: Request, max: number): Promise<string | undefined> {
  if (Number(request.headers.get('content-length') ?? 0) > max) return undefined;
  if (request.body === null) return '';
  const bytes = await readWithin(request.body, max);
  return bytes === undefined ? undefined : new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

/** The probe a body asks for, or `undefined` when it is not one of the three. */
function probeOf(body: unknown, now: number): Probe | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  const { op, id, expiresAtMs } = body as Record<string, unknown>;
  if (op === 'time' || op === 'ledgerEpoch') return { op };
  if (op !== 'consume' || typeof id !== 'string' || !PROBE_ID.test(id)) return undefined;
  if (typeof expiresAtMs !== 'number' || !Number.isSafeInteger(expiresAtMs) || expiresAtMs > now + MAX_PROBE_TTL_MS) return undefined;
  return { op, id, expiresAtMs };
}

/**
 * The doctor route: lets `mrtr doctor --store cloudflare` check a Durable Object store from a shell, through the Worker
 * that binds it (a Durable Object is reachable only from its Worker). Mount it at a path of the Worker's `fetch`
 * (e.g. {@link DOCTOR_PATH}); it answers `POST` requests that carry `Authorization: Bearer <token>` with the store's
 * own answers to the doctor's three probes — consume of a throwaway `doctor-…` id (the first accepted, a replay
 * refused), the store's clock (`time`), the ledger epoch — and nothing else: no other id can be consumed, no state is
 * read, no key is used. A wrong or missing token gets 401 (compared in constant time), anything but one of the three
 * probes 400, a store failure 503 with the error's code only (the cause stays in the Worker).
 */
export function createDoctorRoute(options: DoctorRouteOptions): (request: Request) => Promise<Response> {
  if (options === null || typeof options !== 'object') throw new TypeError('createDoctorRoute: options must be an object');
  const { store, token } = options;
  if (store === null || typeof store !== 'object' || typeof store.consume !== 'function') {
    throw new TypeError('createDoctorRoute: store must be a ReplayStore');
  }
  if (typeof token !== 'string' || token.length < MIN_DOCTOR_TOKEN_CHARS) {
    throw new RangeError(`createDoctorRoute: token must be a secret of at least ${MIN_DOCTOR_TOKEN_CHARS} characters`);
  }
  const expected = digest(token);
  return async (request) => {
    if (request.method !== 'POST') return json(405, { error: 'POST only' });
    const auth = request.headers.get('authorization') ?? '';
    if (!auth.startsWith('Bearer ') || !(await sameToken(auth.slice(7), await expected))) return json(401, { error: 'unauthorized' });
    let probe: Probe | undefined;
    try {
      const text = await bodyWithin(request, MAX_BODY_BYTES);
      probe = text === undefined ? undefined : probeOf(JSON.parse(text), Date.now());
    } catch {
      probe = undefined;
    }
    if (probe === undefined)
      return json(400, { error: 'expected {"op":"consume","id":"doctor-…","expiresAtMs":…}, {"op":"time"} or {"op":"ledgerEpoch"}' });
    try {
      if (probe.op === 'consume') return json(200, { value: await store.consume(probe.id, probe.expiresAtMs) });
      const read = probe.op === 'time' ? store.time : store.ledgerEpoch;
      if (read === undefined) return json(400, { error: `this store has no ${probe.op}()` });
      return json(200, { value: await read.call(store) });
    } catch (error) {
      return json(503, { error: MrtrError.is(error) ? error.code : 'ERR_STORE_UNAVAILABLE' });
    }
  };
}

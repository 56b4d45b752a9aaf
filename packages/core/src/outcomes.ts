import { cryptoProvider } from '#crypto';
import { CLAIMS_VERSION, type StateClaims } from './claims.js';
import { MrtrError, RoundInProgressError, StateReplayedError, StoreUnavailableError } from './errors.js';
import type { Awaitable } from './crypto/awaitable.js';
import type { ClaimResult, ReplayStore, StateCodec } from './interfaces.js';
import { canonicalJson } from './json.js';
import { base64urlEncode, randomBytes } from './random.js';
import type { OpenedState } from './guard-types.js';
import type { JsonValue } from './protocol.js';
import { isObject } from './validate.js';

type Opened = OpenedState;

/**
 * What {@link StateGuard.claim} decided for a presented state:
 * - `replay: false`: this call owns the round. Run it, then `record` its outcome (a JSON value: the response, or
 *   what the caller needs to rebuild an error) so that an identical retry gets it; `record` resolves `false` when
 *   nothing was kept (no store that records outcomes, an outcome too large for the codec) and rejects with
 *   `ERR_STORE_UNAVAILABLE` when the store failed (answer the round anyway: its effect has happened).
 * - `replay: true`: an identical retry (same state, same principal, same answers) of a round that already ran;
 *   `outcome` is what its first attempt recorded. Run nothing.
 */
export type Admission<S> =
  | { readonly state: S; readonly replay: false; record(outcome: JsonValue): Promise<boolean> }
  | { readonly state: S; readonly replay: true; readonly outcome: JsonValue };

/** Suffix of the audience of a sealed outcome: never the audience of a state, so it can never pass as one. */
const OUTCOME_AUDIENCE = '#outcome';
/** Longest pause between two polls of a round in progress on another instance. */
const MAX_POLL_MS = 200;
/** Answered to local waiters when the first attempt recorded nothing they can use. */
const NOTHING: unique symbol = Symbol('nothing recorded');
type Settled = { outcome: string } | typeof NOTHING;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export interface OutcomeDeps {
  store: ReplayStore | undefined;
  codec: StateCodec;
  audience: string;
  /** The id and expiry a state is consumed under (shared with the guard's `consume`). */
  ledger: (state: Opened) => { id: string; expiresAtMs: number };
  /** The guard's `consume`, for stores that do not record outcomes. */
  consume: (state: Opened) => Promise<void>;
  now: () => number;
  /** How long an identical retry waits for a round in progress before `ERR_ROUND_IN_PROGRESS`. */
  retryWaitMs: number;
}

/**
 * Single use that tells an identical retry from a replay. The fingerprint of an attempt is a digest of the
 * principal tag the state carries and the canonical JSON of the answers: the state alone fixes the method, target
 * and arguments (its binding), so equal fingerprints on one state id mean the same request by the same principal.
 *
 * Concurrent identical retries on this instance wait for the first attempt's promise (no polling); on other
 * instances they poll the store with a growing pause, both bounded by `retryWaitMs`.
 */
export function createOutcomes(deps: OutcomeDeps): <S extends Opened>(state: S, answers: JsonValue) => Promise<Admission<S>> {
  const { store, codec, audience, ledger, consume, now, retryWaitMs } = deps;
  /** Rounds this instance admitted and has not recorded yet: key → the outcome once recorded. */
  const inflight = new Map<string, Promise<Settled>>();
  const notRecorded = async (): Promise<boolean> => false;

  /**
   * The attempt's fingerprint. Answers that have no canonical form (nested past canonicalJson's depth, or not
   * JSON) get a random one that no retry can match: that round runs once and its retries are replays.
   */
  const fingerprint = (sub: string, answers: JsonValue): Awaitable<string> => {
    let canonical: string;
    try {
      canonical = canonicalJson(['mrtr/outcome/v1', sub, answers]);
    } catch {
      canonical = `mrtr/outcome/v1/unmatchable/${base64urlEncode(randomBytes(16))}`;
    }
    return cryptoProvider.sha256Text(canonical);
  };

  const fromStore = async <T>(call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (cause) {
      if (MrtrError.is(cause) || cause instanceof TypeError || cause instanceof RangeError) throw cause;
      throw new StoreUnavailableError({ cause });
    }
  };

  const seal = async (state: Opened, fp: string, outcome: JsonValue): Promise<string> => {
    const { claims } = state;
    const sealed: StateClaims = {
      v: CLAIMS_VERSION,
      iat: now(),
      exp: claims.exp,
      jti: claims.jti,
      aud: `${audience}${OUTCOME_AUDIENCE}`,
      sub: claims.sub,
      req: claims.req,
      flow: claims.flow,
      data: { f: fp, o: outcome },
    };
    try {
      const token = await codec.seal(sealed);
      // Too large for this codec to open again: recorded as "done, not kept", so retries are replays.
      return token.length > codec.maxTokenBytes ? '' : token;
    } catch {
      return '';
    }
  };

  /** The recorded outcome, if it is authentic and belongs to this state and fingerprint; else a replay. */
  const unseal = async (state: Opened, fp: string, token: string): Promise<JsonValue> => {
    let claims: StateClaims;
    try {
      claims = (await codec.unseal(token)).claims;
    } catch (cause) {
      throw new StateReplayedError({ cause });
    }
    const data = claims.data;
    if (
      claims.aud !== `${audience}${OUTCOME_AUDIENCE}` ||
      claims.jti !== state.claims.jti ||
      claims.sub !== state.claims.sub ||
      !isObject(data) ||
      data.f !== fp ||
      !('o' in data)
    ) {
      throw new StateReplayedError();
    }
    return data.o as JsonValue;
  };

  /** Waits for a local first attempt, at most until `deadline` (performance.now()). */
  const waitLocal = async (settled: Promise<Settled>, deadline: number): Promise<Settled | undefined> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), Math.max(0, deadline - performance.now()));
    });
    try {
      return await Promise.race([settled, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };

  return async <S extends Opened>(state: S, answers: JsonValue): Promise<Admission<S>> => {
    if (store === undefined) return { state, replay: false, record: notRecorded };
    if (typeof store.claim !== 'function' || typeof store.record !== 'function') {
      await consume(state);
      return { state, replay: false, record: notRecorded };
    }
    const { id, expiresAtMs } = ledger(state);
    const digest = fingerprint(state.claims.sub, answers);
    const fp = typeof digest === 'string' ? digest : await digest;
    const key = `${id}\n${fp}`;
    const deadline = performance.now() + retryWaitMs;

    const local = inflight.get(key);
    if (local !== undefined) {
      const settled = await waitLocal(local, deadline);
      if (settled === NOTHING) throw new StateReplayedError();
      if (settled !== undefined) return { state, replay: true, outcome: await unseal(state, fp, settled.outcome) };
      // Still running here after the whole wait.
      throw new RoundInProgressError();
    }

    for (let pause = 10; ; pause = Math.min(MAX_POLL_MS, pause * 2)) {
      const found: ClaimResult = await fromStore(() => store.claim!(id, expiresAtMs, fp));
      switch (found.status) {
        case 'first': {
          let settle!: (settled: Settled) => void;
          inflight.set(key, new Promise<Settled>((resolve) => (settle = resolve)));
          let done = false;
          const record = async (outcome: JsonValue): Promise<boolean> => {
            if (done) throw new TypeError('Admission.record: called twice');
            done = true;
            let token = '';
            let kept = false;
            try {
              token = await seal(state, fp, outcome);
              kept = (await fromStore(() => store.record!(id, fp, token))) && token !== '';
              return kept;
            } finally {
              inflight.delete(key);
              settle(kept ? { outcome: token } : NOTHING);
            }
          };
          return { state, replay: false, record };
        }
        case 'recorded':
          if (typeof found.outcome !== 'string' || found.outcome === '') throw new StateReplayedError();
          return { state, replay: true, outcome: await unseal(state, fp, found.outcome) };
        case 'pending': {
          const left = deadline - performance.now();
          if (left <= 0) throw new RoundInProgressError();
          await sleep(Math.min(pause, left));
          break;
        }
        default:
          throw new StateReplayedError();
      }
    }
  };
}

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
export const OUTCOME_AUDIENCE = '#outcome';
/** First pause between two polls of a round in progress on another instance; it doubles up to {@link MAX_POLL_MS}. */
const FIRST_POLL_MS = 50;
/** Longest pause between two polls. */
const MAX_POLL_MS = 1_000;
/** Rounds remembered as stalled (polled for a whole wait, still pending): a bound on that memory. */
const MAX_STALLED = 1_024;
/** Answered to waiters when the first attempt recorded nothing they can use. */
const NOTHING: unique symbol = Symbol('nothing recorded');
/** Answered to waiters when the wait ran out with the round still running. */
const STILL_RUNNING: unique symbol = Symbol('still running');
type Settled = { outcome: string } | typeof NOTHING | typeof STILL_RUNNING;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Bounds on identical retries waiting for a round in progress (see `StateGuardOptions.maxWaitingRetries`). */
export interface WaitingBounds {
  perPrincipal: number;
  total: number;
}

export interface OutcomeDeps {
  store: ReplayStore | undefined;
  codec: StateCodec;
  audience: string;
  /** The id and expiry a state is consumed under (shared with the guard's `consume`). */
  ledger: (state: Opened) => { id: string; expiresAtMs: number };
  /** The guard's `consume`, for stores that do not record outcomes and for states whose outcomes are not kept. */
  consume: (state: Opened) => Promise<void>;
  now: () => number;
  /** How long an identical retry waits for a round in progress before `ERR_ROUND_IN_PROGRESS`. */
  retryWaitMs: number;
  /** Whether the outcome of a state may be recorded and returned (not under the shared unauthenticated principal, unless opted in). */
  recordable: (state: Opened) => Awaitable<boolean>;
  /** The per-principal budget of recorded outcome bytes (`take(principal tag, now, bytes)`), if any. */
  budget: { take(principal: string, t: number, weight: number): boolean } | undefined;
  waiting: WaitingBounds;
}

/**
 * Single use that tells an identical retry from a replay. The fingerprint of an attempt is a digest of the
 * principal tag the state carries and the canonical JSON of the answers: the state alone fixes the method, target
 * and arguments (its binding), so equal fingerprints on one state id mean the same request by the same principal.
 *
 * What an outcome may cost is bounded: an outcome is sealed only when it may be kept (the store's
 * `maxOutcomeBytes`), and kept only within the principal's byte budget (else recorded as "done, not kept"). Waiting
 * is bounded too: identical retries on this instance wait for the first attempt's promise (no polling); a round
 * in progress on another instance is polled by one poller per state on this instance, the others waiting on it;
 * at most `waiting.perPrincipal` retries of a principal, and `waiting.total` in all, wait at once (past it
 * `ERR_ROUND_IN_PROGRESS` at once); a round polled for a whole wait is remembered as stalled, and its later
 * retries ask the store once instead of polling again.
 */
export function createOutcomes(deps: OutcomeDeps): <S extends Opened>(state: S, answers: JsonValue) => Promise<Admission<S>> {
  const { store, codec, audience, ledger, consume, now, retryWaitMs, recordable, budget, waiting } = deps;
  const outcomeAudience = `${audience}${OUTCOME_AUDIENCE}`;
  /** Rounds this instance admitted and has not recorded yet: key → what they recorded, once they did. */
  const inflight = new Map<string, Promise<Settled>>();
  /** Rounds in progress on another instance that this instance polls: key → what the poll found. */
  const polls = new Map<string, Promise<Settled>>();
  /** Rounds polled for a whole wait and still pending: key → until when (epoch ms) they count as stalled. */
  const stalled = new Map<string, number>();
  /** Retries waiting, per principal tag, and in all. */
  const waiters = new Map<string, number>();
  let waitingTotal = 0;
  const notRecorded = async (): Promise<boolean> => false;
  const maxKept = (): number => Math.min(codec.maxTokenBytes, store?.maxOutcomeBytes ?? Number.POSITIVE_INFINITY);

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

  /**
   * The sealed outcome, or `''` (done, not kept) when it would not be kept: larger than the store keeps (told
   * before sealing when even the JSON is too large: a sealed token is at least a quarter of its JSON, whatever the
   * codec's encoding), past the principal's byte budget, or a codec failure.
   */
  const seal = async (state: Opened, fp: string, outcome: JsonValue): Promise<string> => {
    const { claims } = state;
    const limit = maxKept();
    let json: string;
    try {
      json = JSON.stringify(outcome);
    } catch {
      return '';
    }
    if (typeof json !== 'string' || json.length > 4 * limit) return '';
    const sealed: StateClaims = {
      v: CLAIMS_VERSION,
      iat: now(),
      exp: claims.exp,
      jti: claims.jti,
      aud: outcomeAudience,
      sub: claims.sub,
      req: claims.req,
      flow: claims.flow,
      data: { f: fp, o: outcome },
    };
    let token: string;
    try {
      token = await codec.seal(sealed);
    } catch {
      return '';
    }
    if (token.length > limit) return '';
    // The principal's share of what stores hold: charged only for what is kept.
    if (budget !== undefined && !budget.take(claims.sub, now(), token.length)) return '';
    return token;
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
      claims.aud !== outcomeAudience ||
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

  /** Races `settled` against the time left until `deadline` (performance.now()). */
  const within = async (settled: Promise<Settled>, deadline: number): Promise<Settled> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<Settled>((resolve) => {
      timer = setTimeout(() => resolve(STILL_RUNNING), Math.max(0, deadline - performance.now()));
    });
    try {
      return await Promise.race([settled, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };

  /** Polls the store for a round in progress elsewhere until it is recorded or `deadline` passes (one poll per key). */
  const poll = (key: string, id: string, expiresAtMs: number, fp: string, deadline: number): Promise<Settled> => {
    const running = polls.get(key);
    if (running !== undefined) return running;
    const run = async (): Promise<Settled> => {
      for (let pause = FIRST_POLL_MS; ; pause = Math.min(MAX_POLL_MS, pause * 2)) {
        await sleep(Math.min(pause, Math.max(0, deadline - performance.now())));
        if (performance.now() >= deadline) {
          if (stalled.size >= MAX_STALLED) stalled.delete(stalled.keys().next().value!);
          stalled.set(key, expiresAtMs);
          return STILL_RUNNING;
        }
        const found = await fromStore(() => store!.claim!(id, expiresAtMs, fp));
        if (found.status === 'recorded') return found.outcome === '' ? NOTHING : { outcome: found.outcome };
        if (found.status === 'first') {
          // The id expired while its round ran: taken now by this poll, and never run. Done, not kept.
          await store!.record!(id, fp, '').catch(() => false);
          return NOTHING;
        }
        if (found.status !== 'pending') return NOTHING;
      }
    };
    const polled = run().finally(() => polls.delete(key));
    polls.set(key, polled);
    return polled;
  };

  /** Waits for what `settled` brings (it ends by the deadline), as one of the bounded waiters of the state's principal. */
  const wait = async <S extends Opened>(state: S, fp: string, settled: () => Promise<Settled>): Promise<Admission<S>> => {
    const principal = state.claims.sub;
    const mine = waiters.get(principal) ?? 0;
    if (mine >= waiting.perPrincipal || waitingTotal >= waiting.total) throw new RoundInProgressError();
    waiters.set(principal, mine + 1);
    waitingTotal++;
    let result: Settled;
    try {
      result = await settled();
    } finally {
      waitingTotal--;
      const left = (waiters.get(principal) ?? 1) - 1;
      if (left === 0) waiters.delete(principal);
      else waiters.set(principal, left);
    }
    if (result === NOTHING) throw new StateReplayedError();
    if (result === STILL_RUNNING) throw new RoundInProgressError();
    return { state, replay: true, outcome: await unseal(state, fp, result.outcome) };
  };

  /** The first attempt: it runs the round and records its outcome once. */
  const owner = <S extends Opened>(state: S, id: string, fp: string, key: string): Admission<S> => {
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
        kept = (await fromStore(() => store!.record!(id, fp, token))) && token !== '';
        return kept;
      } finally {
        inflight.delete(key);
        settle(kept ? { outcome: token } : NOTHING);
      }
    };
    return { state, replay: false, record };
  };

  return async <S extends Opened>(state: S, answers: JsonValue): Promise<Admission<S>> => {
    if (store === undefined) return { state, replay: false, record: notRecorded };
    if (typeof store.claim !== 'function' || typeof store.record !== 'function') {
      await consume(state);
      return { state, replay: false, record: notRecorded };
    }
    const allowed = recordable(state);
    if (!(typeof allowed === 'boolean' ? allowed : await allowed)) {
      await consume(state);
      return { state, replay: false, record: notRecorded };
    }
    const { id, expiresAtMs } = ledger(state);
    const digest = fingerprint(state.claims.sub, answers);
    const fp = typeof digest === 'string' ? digest : await digest;
    const key = `${id}\n${fp}`;
    const deadline = performance.now() + retryWaitMs;

    const local = inflight.get(key);
    if (local !== undefined) return wait(state, fp, () => within(local, deadline));

    const found: ClaimResult = await fromStore(() => store.claim!(id, expiresAtMs, fp));
    switch (found.status) {
      case 'first':
        stalled.delete(key);
        return owner(state, id, fp, key);
      case 'recorded':
        if (typeof found.outcome !== 'string' || found.outcome === '') throw new StateReplayedError();
        return { state, replay: true, outcome: await unseal(state, fp, found.outcome) };
      case 'pending': {
        // A round polled for a whole wait already: this retry asked the store once, and is not polled again.
        const until = stalled.get(key);
        if (until !== undefined && until >= now()) throw new RoundInProgressError();
        stalled.delete(key);
        return wait(state, fp, () => poll(key, id, expiresAtMs, fp, deadline));
      }
      default:
        throw new StateReplayedError();
    }
  };
}

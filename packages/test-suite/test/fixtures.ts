import { createHmac, timingSafeEqual } from 'node:crypto';
import { type KeyRing, MrtrError, type ReplayStore, type StateCodec } from '@mrtr/core';
import type { TestFn } from '../src/index.js';
import { isStateClaims } from '@mrtr/core/codec';
import { isCanonicalBase64url } from '@mrtr/core/encoding';
import { KeyUnknownError, StateIntegrityError, StateMalformedError, StateTooLargeError, StoreUnavailableError } from '@mrtr/core/errors';
import { rejectUnknownOptions } from '@mrtr/core/options';
import {
  type ClaimResult,
  MAX_FINGERPRINT_MISSES,
  OUTCOME_STORE_LIMIT_OPTIONS,
  type OutcomeStoreLimits,
  parseOutcomeStoreLimits,
} from '@mrtr/core/store';

export interface CollectedTest {
  name: string;
  fn: () => Promise<void> | void;
}

/** Collects the tests a suite registers, so a test can run them and look at the outcome. */
export function collect(register: (it: TestFn) => void): CollectedTest[] {
  const tests: CollectedTest[] = [];
  register((name, fn) => tests.push({ name, fn }));
  return tests;
}

export async function runCollected(tests: CollectedTest[]): Promise<{ passed: string[]; failed: string[] }> {
  const passed: string[] = [];
  const failed: string[] = [];
  for (const t of tests) {
    try {
      await t.fn();
      passed.push(t.name);
    } catch {
      failed.push(t.name);
    }
  }
  return { passed, failed };
}

export interface ReferenceCodecFlaws {
  noMac?: boolean;
  ignoresTrailing?: boolean;
  lenientBase64?: boolean;
  noSizeCap?: boolean;
  throwsPlainErrors?: boolean;
  /** Captures a stack trace on every rejection. */
  stackTraces?: boolean;
  /** Appends the token to the message of every rejection. */
  tokenInMessage?: boolean;
  /** Keeps the cause of an integrity failure: an Error quoting the token. */
  tokenInCause?: boolean;
  /** Throws one shared instance per error class. */
  sharedErrors?: boolean;
  /** Turns Error.stackTraceLimit off for its rejections and does not put it back. */
  leaksStackTraceLimit?: boolean;
  /** Throws the base MrtrError with the right code instead of the concrete class. */
  untypedErrors?: boolean;
  /** Refuses padded base64url with an unanchored regular expression: quadratic on long runs of letters. */
  quadraticScan?: boolean;
}

const shared = new Map<string, MrtrError>();

/** A small, correct HMAC codec (and, with flaws, deliberately broken ones) to show the suite bites. */
export function referenceCodec(keys: KeyRing, flaws: ReferenceCodecFlaws = {}, maxTokenBytes = 8192): StateCodec {
  /** Every rejection goes through here, where the error-handling flaws are applied. */
  const reject = (error: MrtrError, token: string): never => {
    if (flaws.untypedErrors) error = new MrtrError(error.code);
    if (flaws.sharedErrors) {
      const first = shared.get(error.code) ?? error;
      shared.set(error.code, first);
      error = first;
    }
    if (flaws.tokenInCause && error.code === 'ERR_STATE_INTEGRITY')
      error = new StateIntegrityError({ cause: new Error(`MAC mismatch on ${token}`) });
    if (flaws.tokenInMessage) error.message = `${error.message}: ${String(token).slice(0, 200)}`;
    if (flaws.stackTraces) Error.captureStackTrace(error);
    if (flaws.leaksStackTraceLimit) Error.stackTraceLimit = 0;
    throw error;
  };
  const keyFor = (kid: string) => keys.subkeySync(kid, 'test/reference');
  const mac = (key: Uint8Array, text: string) => createHmac('sha256', key).update(text).digest();
  const decode = (text: string) => {
    if (!flaws.lenientBase64 && !isCanonicalBase64url(text)) return undefined;
    return Buffer.from(text, 'base64url');
  };
  return {
    id: 'reference',
    confidential: false,
    maxTokenBytes,
    keys,
    seal(claims) {
      const kid = keys.primaryKid;
      const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
      const signed = `r1.${kid}.${body}`;
      const tag = flaws.noMac ? 'nomac' : mac(keyFor(kid)!, signed).toString('base64url');
      return `r1.${kid}.${body}.${tag}`;
    },
    unseal(token) {
      if (typeof token !== 'string') return reject(new StateMalformedError(), token);
      if (!flaws.noSizeCap && token.length > maxTokenBytes) return reject(new StateTooLargeError(), token);
      if (flaws.quadraticScan && /[A-Za-z0-9_-]+=$/.test(token)) return reject(new StateMalformedError(), token);
      const parts = token.split('.');
      if (flaws.ignoresTrailing) parts.length = Math.min(parts.length, 4);
      if (parts.length !== 4 || parts[0] !== 'r1') {
        if (flaws.throwsPlainErrors) throw new Error('bad token');
        return reject(new StateMalformedError(), token);
      }
      const [, kid, body, tag] = parts as [string, string, string, string];
      const key = keyFor(kid);
      if (key === undefined) return reject(new KeyUnknownError(), token);
      if (!flaws.noMac) {
        const got = decode(tag);
        const signed = `r1.${kid}.${body}`;
        const want = mac(key, signed);
        if (got === undefined || got.length !== want.length || !timingSafeEqual(got, want)) return reject(new StateIntegrityError(), token);
      }
      const bytes = decode(body);
      if (bytes === undefined) return reject(new StateMalformedError(), token);
      let claims: unknown;
      try {
        claims = JSON.parse(bytes.toString('utf8'));
      } catch {
        return reject(new StateMalformedError(), token);
      }
      if (!isStateClaims(claims)) return reject(new StateMalformedError(), token);
      return { claims, kid };
    },
  };
}

/** A correct in-process store and a broken get-then-set one. */
export function referenceStore(
  options: { getThenSet?: boolean; now?: () => number; namespace?: string } & OutcomeStoreLimits = {},
): ReplayStore {
  rejectUnknownOptions('referenceStore', options, { ...OUTCOME_STORE_LIMIT_OPTIONS, getThenSet: true, now: true, namespace: true });
  const seen = new Map<string, number>();
  const now = options.now ?? Date.now;
  let closed = false;
  return {
    capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
    async consume(id, expiresAtMs) {
      if (typeof id !== 'string' || id.length === 0) throw new TypeError('id must be a non-empty string');
      if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) throw new TypeError('expiresAtMs must be finite');
      if (closed) throw new StoreUnavailableError();
      const existing = seen.get(id);
      const used = existing !== undefined && existing >= now();
      if (options.getThenSet) {
        // The classic bug: the check and the write are two steps with a gap between them.
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (used && !options.getThenSet) return false;
      if (options.getThenSet && used) return false;
      seen.set(id, expiresAtMs);
      return true;
    },
    async close() {
      closed = true;
    },
  };
}

/** Flaws of {@link referenceRecordingStore}. */
export interface RecordingFlaws {
  /** Keeps outcomes of any length. */
  noMaxOutcome?: boolean;
  /** Has no store-wide outcome budget. */
  noBudget?: boolean;
  /** Counts the budget, then awaits, then keeps (the check is stale under concurrency). */
  racyBudget?: boolean;
  /** Never drops an outcome however many claims with other fingerprints come. */
  noMisses?: boolean;
}

/** A correct in-process store that records outcomes ({@link OutcomeStoreLimits}, the misses rule), or a flawed one. */
export function referenceRecordingStore(
  flaws: RecordingFlaws,
  options: { now: () => number; namespace?: string } & OutcomeStoreLimits,
): ReplayStore & { maxOutcomeBytes: number } {
  rejectUnknownOptions('referenceRecordingStore', options, { ...OUTCOME_STORE_LIMIT_OPTIONS, now: true, namespace: true });
  const { now } = options;
  const { maxOutcomeBytes, outcomeBudgetBytes } = parseOutcomeStoreLimits('referenceRecordingStore', options);
  const held = new Map<string, { exp: number; fp?: string; misses: number; outcome?: string }>();
  const live = (id: string) => {
    const h = held.get(id);
    return h !== undefined && h.exp >= now() ? h : undefined;
  };
  const bytesHeld = () => [...held.keys()].reduce((sum, id) => sum + (live(id)?.outcome?.length ?? 0), 0);
  let closed = false;
  const check = (id: unknown, exp: unknown): void => {
    if (typeof id !== 'string' || id.length === 0) throw new TypeError('id must be a non-empty string');
    if (typeof exp !== 'number' || !Number.isFinite(exp)) throw new TypeError('expiresAtMs must be finite');
    if (closed) throw new StoreUnavailableError();
  };
  return {
    capabilities: {
      shared: false,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: false,
      clock: false,
      leases: false,
      epoch: false,
    },
    maxOutcomeBytes: flaws.noMaxOutcome ? Number.MAX_SAFE_INTEGER : maxOutcomeBytes,
    async consume(id, exp) {
      check(id, exp);
      if (live(id) !== undefined || exp <= now()) return false;
      held.set(id, { exp, misses: 0 });
      return true;
    },
    async claim(id, exp, fp): Promise<ClaimResult> {
      check(id, exp);
      const h = live(id);
      if (h === undefined) {
        if (exp <= now()) return { status: 'replayed' };
        held.set(id, { exp, fp, misses: 0 });
        return { status: 'first' };
      }
      if (h.fp === undefined) return { status: 'replayed' };
      if (h.fp !== fp) {
        if (++h.misses >= MAX_FINGERPRINT_MISSES && !flaws.noMisses) h.outcome = '';
        return { status: 'replayed' };
      }
      if (h.outcome === undefined) return { status: 'pending' };
      return h.outcome === '' ? { status: 'replayed' } : { status: 'recorded', outcome: h.outcome };
    },
    async record(id, fp, outcome) {
      if (closed) throw new StoreUnavailableError();
      const h = live(id);
      if (h === undefined || h.fp !== fp || h.outcome !== undefined) return false;
      const fits = flaws.noMaxOutcome || outcome.length <= maxOutcomeBytes;
      const room = flaws.noBudget || bytesHeld() + outcome.length <= outcomeBudgetBytes;
      if (flaws.racyBudget) await new Promise((resolve) => setImmediate(resolve));
      h.outcome = fits && room ? outcome : '';
      return h.outcome !== '';
    },
    async close() {
      closed = true;
    },
  };
}

/**
 * A store that batches the consumes of one tick, with a classic batching bug: it answers the batch's
 * distinct ids in sorted order but hands the answers out in arrival order, so a waiter can get another
 * id's answer. Correct for any batch of one id (the parallel test), wrong for a mixed burst.
 */
export function misansweringBatchStore(options: { now?: () => number; namespace?: string } = {}): ReplayStore {
  rejectUnknownOptions('misansweringBatchStore', options, { now: true, namespace: true });
  const seen = new Map<string, number>();
  const now = options.now ?? Date.now;
  let closed = false;
  let queue: { id: string; exp: number; resolve: (value: boolean) => void }[] = [];
  const flush = () => {
    const batch = queue;
    queue = [];
    const unique = [...new Set(batch.map((w) => w.id))];
    const answers = new Map<string, boolean>();
    for (const id of [...unique].sort()) {
      const held = seen.get(id);
      const won = held === undefined || held < now();
      if (won) seen.set(id, batch.find((w) => w.id === id)?.exp ?? 0);
      answers.set(id, won);
    }
    const sortedAnswers = [...unique].sort().map((id) => answers.get(id) as boolean);
    const given = new Set<string>();
    for (const waiter of batch) {
      if (given.has(waiter.id)) {
        waiter.resolve(false);
        continue;
      }
      waiter.resolve(sortedAnswers[given.size] as boolean); // the bug: by position, not by id
      given.add(waiter.id);
    }
  };
  return {
    capabilities: { shared: false, keyExchange: false, clock: false, leases: false, epoch: false },
    consume(id, expiresAtMs) {
      if (typeof id !== 'string' || id.length === 0) return Promise.reject(new TypeError('id must be a non-empty string'));
      if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs))
        return Promise.reject(new TypeError('expiresAtMs must be finite'));
      if (closed) return Promise.reject(new StoreUnavailableError());
      return new Promise<boolean>((resolve) => {
        if (queue.length === 0) queueMicrotask(flush);
        queue.push({ id, exp: expiresAtMs, resolve });
      });
    },
    async close() {
      closed = true;
    },
  };
}

/**
 * A shared in-memory "backend" with stores whose link can lose one reply, for the lostReply test.
 * `resolve` says what a store does when its write's reply is lost: 'owner' asks whether the stored owner
 * value is its own (correct), 'fail' always rejects ERR_STORE_UNAVAILABLE (burns the state), 'exists'
 * answers true whenever the id is stored (someone else's write counts as its own).
 */
export function lossyReferenceBackend(resolve: 'owner' | 'fail' | 'exists', now: () => number) {
  const rows = new Map<string, { owner: string; expiresAt: number }>();
  let sequence = 0;
  const make = (namespace: string, link?: { mode: 'normal' | 'late' | 'lost' }) => {
    let closed = false;
    const store: ReplayStore = {
      // One backend for every store it makes: a shared ledger.
      capabilities: { shared: true, keyExchange: false, clock: false, leases: false, epoch: false },
      async consume(id, expiresAtMs) {
        if (typeof id !== 'string' || id.length === 0) throw new TypeError('id must be a non-empty string');
        if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) throw new TypeError('expiresAtMs must be finite');
        if (closed) throw new StoreUnavailableError();
        const key = `${namespace}\u0000${id}`;
        const mine = `owner-${sequence++}`;
        const row = rows.get(key);
        const won = row === undefined || row.expiresAt < now();
        if (won) rows.set(key, { owner: mine, expiresAt: expiresAtMs });
        const mode = link?.mode ?? 'normal';
        if (mode === 'normal') return won;
        // The write ran; its answer is lost.
        if (link !== undefined && mode === 'late') link.mode = 'normal';
        if (resolve === 'fail') throw new StoreUnavailableError({ cause: new Error('reply lost') });
        if (mode === 'lost') throw new StoreUnavailableError({ cause: new Error('reply and check lost') });
        const stored = rows.get(key);
        if (resolve === 'exists') return stored !== undefined;
        if (stored?.owner === mine) return true;
        if (stored !== undefined && stored.expiresAt >= now()) return false;
        throw new StoreUnavailableError({ cause: new Error('unknown') });
      },
      async close() {
        closed = true;
      },
    };
    return store;
  };
  return {
    factory: (options: { namespace: string }) => {
      rejectUnknownOptions('lossyReferenceBackend', options, { namespace: true });
      return make(options.namespace);
    },
    lostReply: ({ namespace }: { namespace: string }) => {
      const link = { mode: 'normal' as 'normal' | 'late' | 'lost' };
      const store = make(namespace, link);
      return {
        store,
        loseNextReply(mode: 'late' | 'lost') {
          link.mode = mode;
        },
        restore() {
          link.mode = 'normal';
        },
        close: () => store.close(),
      };
    },
  };
}

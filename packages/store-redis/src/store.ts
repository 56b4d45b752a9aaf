import type { ClaimResult, KeyFingerprint } from '@mrtr/core';
import { type BackgroundError, base64urlEncode, parseKeyFingerprintOffer, randomBytes, StoreUnavailableError } from '@mrtr/core/authoring';
import { type ConsumeQueue, createConsumeQueue } from './batching.js';
import { openConnection, type RedisConnection } from './connection.js';
import { createEvictionGuard, type EvictionCheck, type EvictionGuard } from './eviction.js';
import { exchangeFingerprints } from './fingerprints.js';
import { fail, notWritten, REPLAYED, resolveLost } from './lost-reply.js';
import { createOutcomeQueue, type OutcomeQueue } from './outcomes.js';
import { type ParsedRedisStoreOptions, parseRedisStoreOptions, type RedisReplayStore, type RedisStoreOptions } from './options.js';
import { fingerprintMisuse } from './scripts.js';

/**
 * Replay store on Redis ≥ 6.2. Each `consume` is one atomic `SET key <owner> NX PXAT expiresAtMs` on
 * one key, where `<owner>` is 16 random bytes only this call knows: `"OK"` → `true` (first use), nil →
 * `false`. No multi-key command is used, so it runs unchanged on Redis Cluster. When the reply is lost
 * (timeout, connection dropped in flight) one `GET` asks whether the key holds this call's owner value:
 * yes → `true`, another value → `false`; otherwise, and on any error or unexpected reply, the consume
 * rejects with `StoreUnavailableError` (the original error as `cause`) — never `true` for a write that
 * is not this call's.
 *
 * The owned client fails fast while Redis is down (offline queue disabled, in-flight commands rejected
 * when the connection drops, not resent) and reconnects by itself with capped exponential backoff, so
 * consumes succeed again as soon as Redis is back.
 *
 * An `expiresAtMs` at or before this process's `Date.now()` resolves `false` without a command:
 * Redis would accept `SET … PXAT <past>` and drop the key at once, so every call would look like a
 * first use.
 *
 * Outcome recording (`claim`, `record`): batched like consumes, as calls of one Lua script that runs each claim
 * and record atomically on its id's one key — the key `consume` uses, so an id taken by either is taken for both —
 * one call per hash slot on a Cluster (see `outcomes.ts`). `claim` writes `p:<fingerprint>:<owner>` with the
 * expiry `consume` would give and counts claims with another fingerprint (the third drops the outcome); `record`
 * replaces it with `d:<fingerprint>:<outcome>` keeping that expiry (`KEEPTTL`), or with `d:<fingerprint>:` (done,
 * not kept) past `maxOutcomeBytes` or the ledger's `outcomeBudgetBytes`. A lost or failed batch is resolved with one
 * `MGET`: a claim is `first` only when the key holds this call's own owner value.
 *
 * Shared (`shared: true`): the fleet check's key fingerprints (`keyFingerprints`) are one hash of the ledger,
 * exchanged by one script judged by Redis's clock (see `fingerprints.ts`).
 */
export function createRedisStore(options: RedisStoreOptions = {}): RedisReplayStore {
  const parsed = parseRedisStoreOptions(options);
  const { keyPrefix, commandTimeoutMs, evictionPolicyCheck, onError, maxOutcomeBytes, outcomeBudgetBytes } = parsed;

  let closed = false;
  let closing: Promise<void> | undefined;
  const isClosed = (): boolean => closed;
  const warn = (error: BackgroundError): void => {
    try {
      onError(error);
    } catch {
      // a throwing hook must not break the store
    }
  };

  const connection = openConnection({ ...parsed, subject: { store: '', operation: 'consume' } }, warn, isClosed);
  const { client, owned, whenUsable, bounded } = connection;
  const eviction = createEvictionGuard(connection, evictionPolicyCheck, commandTimeoutMs, warn);
  const { consume, queue } = consumer(connection, parsed, eviction, isClosed);
  const whenOpen = opener(connection, eviction, isClosed);
  const { claim, record, outcomes } = outcomeRecorder(connection, parsed, whenOpen, isClosed);

  // The fleet check's exchange: one hash of the ledger (one slot on a Cluster, by the ledger's hash tag), named like
  // the budget keys so that no id of any ledger can name it.
  const fingerprintKey = `${keyPrefix.slice(0, -1)}%k{${keyPrefix.slice(0, -1)}}`;
  const keyFingerprints = (offer: readonly KeyFingerprint[]): Promise<KeyFingerprint[]> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    try {
      parseKeyFingerprintOffer(offer); // misuse rejects before any wait
    } catch (error) {
      return Promise.reject(error);
    }
    return whenOpen(() => exchangeFingerprints(connection, fingerprintKey, offer), false);
  };

  const close = (): Promise<void> => {
    closed = true;
    connection.stop();
    if (closing !== undefined) return closing;
    // Consumes still queued fail closed; a batch in flight settles by itself.
    queue.failAll(new StoreUnavailableError({ cause: new Error('store is closed') }));
    outcomes.failAll(new StoreUnavailableError({ cause: new Error('store is closed') }));
    closing = connection.end();
    return closing;
  };

  /** Public: an owned client first waits (bounded, as a consume does) for its connection. */
  const checkNow = async (): Promise<EvictionCheck> => {
    if (closed) return { status: 'unknown', error: new Error('store is closed') };
    if (owned) {
      try {
        await whenUsable();
      } catch (error) {
        return { status: 'unknown', error };
      }
    }
    return eviction.check();
  };

  const ready = async (): Promise<void> => {
    if (closed) throw new StoreUnavailableError({ cause: new Error('store is closed') });
    if (owned) {
      await whenUsable();
      return;
    }
    try {
      await bounded((client as unknown as { ping(): Promise<unknown> }).ping());
    } catch (cause) {
      fail(cause);
    }
  };

  return {
    capabilities: {
      shared: true,
      outcomes: { maxOutcomeBytes, outcomeBudgetBytes },
      keyExchange: true,
      clock: false,
      leases: false,
      epoch: false,
    },
    keyFingerprints,
    consume,
    claim,
    record,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    close,
    client,
    keyPrefix,
    checkEvictionPolicy: checkNow,
    ready,
  };
}

/**
 * `consume`: one `SET key <owner> NX PXAT` (batched with others while a batch is in flight), after an owned client's
 * start-up wait and the eviction gate; a lost reply is resolved by one `GET` of this call's owner value.
 */
function consumer(
  connection: RedisConnection,
  parsed: ParsedRedisStoreOptions,
  eviction: EvictionGuard,
  isClosed: () => boolean,
): { consume: (id: string, expiresAtMs: number) => Promise<boolean>; queue: ConsumeQueue } {
  const { keyPrefix, extraRetentionMs, batching } = parsed;
  const { commands, owned, whenUsable, bounded } = connection;

  const interpret = (reply: unknown): boolean => {
    if (reply === 'OK') return true;
    if (reply === null) return false;
    throw new StoreUnavailableError({ cause: new Error('unexpected reply to SET NX PXAT') });
  };
  const send = (key: string, at: number): Promise<boolean> => {
    const mine = base64urlEncode(randomBytes(16)); // a value only this consume knows
    return bounded(commands.set(key, mine, 'PXAT', at, 'NX')).then(interpret, (error: unknown) =>
      notWritten(error) ? fail(error) : resolveLost(connection, key, mine, error),
    );
  };

  const queue = createConsumeQueue(connection, parsed, send, isClosed);
  const write = batching ? queue.enqueue : send;
  const sendChecked = (key: string, at: number): Promise<boolean> => {
    const gate = eviction.gate();
    if (gate === undefined) return write(key, at);
    return gate.then(() => (isClosed() ? fail(new Error('store is closed')) : write(key, at)), fail);
  };

  const consume = (id: string, expiresAtMs: number): Promise<boolean> => {
    if (isClosed()) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    if (typeof id !== 'string' || id.length === 0) {
      return Promise.reject(new TypeError('consume: id must be a non-empty string'));
    }
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return Promise.reject(new TypeError('consume: expiresAtMs must be a finite number'));
    }
    if (expiresAtMs <= Date.now()) return Promise.resolve(false);
    const key = keyPrefix + id;
    // Round up: the id must be remembered until at least expiresAtMs.
    const at = Math.ceil(expiresAtMs) + extraRetentionMs;
    try {
      const wait = owned ? whenUsable() : undefined;
      if (wait === undefined) return sendChecked(key, at);
      return wait.then(() => (isClosed() ? fail(new Error('store is closed')) : sendChecked(key, at)));
    } catch (cause) {
      // ioredis may throw synchronously (e.g. a Cluster with no nodes): still never true.
      return Promise.reject(new StoreUnavailableError({ cause }));
    }
  };
  return { consume, queue };
}

/**
 * Runs `op` once the store may talk to Redis: an owned client's start-up wait and, when `gated`, the eviction
 * gate. With nothing to wait for, `op` runs (and its command is sent) synchronously, as a lone consume's is.
 */
type WhenOpen = <T>(op: () => Promise<T>, gated: boolean) => Promise<T>;

function opener(connection: RedisConnection, eviction: EvictionGuard, isClosed: () => boolean): WhenOpen {
  const { owned, whenUsable } = connection;
  return <T>(op: () => Promise<T>, gated: boolean): Promise<T> => {
    const go = (): Promise<T> => {
      if (isClosed()) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
      const gate = gated ? eviction.gate() : undefined;
      // The queue settles with ERR_STORE_UNAVAILABLE itself: nothing to wrap on the hot path.
      if (gate === undefined) return op();
      return gate.then(() => (isClosed() ? fail(new Error('store is closed')) : op()), fail).catch(fail);
    };
    try {
      const wait = owned ? whenUsable() : undefined;
      return wait === undefined ? go() : wait.then(go, fail);
    } catch (cause) {
      // ioredis may throw synchronously (e.g. a Cluster with no nodes): never first.
      return Promise.reject(new StoreUnavailableError({ cause }));
    }
  };
}

/**
 * Outcome recording. `consume` writes a 22-character owner value (base64url, no ':'); `claim` writes
 * `p:<fp>:<owner>` and `record` turns it into `d:<fp>:<outcome>`: one key per id, so the two share the ledger.
 * Claims and records are batched like consumes (one script call per batch, one per hash slot on a Cluster).
 */
function outcomeRecorder(
  connection: RedisConnection,
  parsed: ParsedRedisStoreOptions,
  whenOpen: WhenOpen,
  isClosed: () => boolean,
): Pick<RedisReplayStore, 'claim' | 'record'> & { outcomes: OutcomeQueue } {
  const { keyPrefix, extraRetentionMs, maxOutcomeBytes, outcomeBudgetBytes } = parsed;
  const ledgerBase = keyPrefix.slice(0, -1);
  const outcomes = createOutcomeQueue(
    connection,
    {
      maxBatchSize: parsed.maxBatchSize,
      maxQueued: parsed.maxQueued,
      outcomeBudgetBytes,
      // `%` never follows an encoded namespace but as `%25`/`%3A`: no id of any ledger can name these keys.
      budgetKeys: [`${ledgerBase}%o{${ledgerBase}}:h`, `${ledgerBase}%o{${ledgerBase}}:z`],
    },
    isClosed,
  );

  /** UTF-8 bytes ≤ 3 × UTF-16 code units: the exact count only when that bound does not settle it. */
  const outcomeFits = (outcome: string): boolean =>
    outcome.length <= maxOutcomeBytes && (outcome.length * 3 <= maxOutcomeBytes || Buffer.byteLength(outcome, 'utf8') <= maxOutcomeBytes);

  const claim = (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    if (isClosed()) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    if (typeof id !== 'string' || id.length === 0) return Promise.reject(new TypeError('claim: id must be a non-empty string'));
    if (typeof expiresAtMs !== 'number' || !Number.isFinite(expiresAtMs)) {
      return Promise.reject(new TypeError('claim: expiresAtMs must be a finite number'));
    }
    const misuse = fingerprintMisuse('claim', fingerprint);
    if (misuse !== undefined) return Promise.reject(misuse);
    // As for consume: an id that could not be remembered is never a first use.
    if (expiresAtMs <= Date.now()) return Promise.resolve(REPLAYED);
    const key = keyPrefix + id;
    const at = Math.ceil(expiresAtMs) + extraRetentionMs;
    return whenOpen(() => outcomes.claim(key, at, fingerprint), true);
  };

  const record = (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    if (isClosed()) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    if (typeof id !== 'string' || id.length === 0) return Promise.reject(new TypeError('record: id must be a non-empty string'));
    const misuse = fingerprintMisuse('record', fingerprint);
    if (misuse !== undefined) return Promise.reject(misuse);
    if (typeof outcome !== 'string') return Promise.reject(new TypeError('record: outcome must be a string'));
    // Too large: recorded as '' (done, not kept), so identical retries are replays and memory stays bounded.
    const kept = outcome !== '' && outcomeFits(outcome);
    return whenOpen(() => outcomes.record(keyPrefix + id, fingerprint, kept ? outcome : ''), false);
  };
  return { claim, record, outcomes };
}

import { base64urlEncode, randomBytes } from '@mrtr/core/encoding';
import { StoreUnavailableError } from '@mrtr/core/errors';
import {
  BackgroundError,
  fullStoreCapabilities,
  parseKeyFingerprintOffer,
  type ClaimOptions,
  type ClaimResult,
  type KeyFingerprint,
  type SpendOptions,
} from '@mrtr/core/store';
import { type ConsumeQueue, createConsumeQueue } from './batching.js';
import { openConnection, type RedisConnection, redisMs } from './connection.js';
import { createEpochKeeper, type EpochKeeper, epochKeyOf } from './epoch.js';
import { createEvictionGuard, type EvictionCheck, type EvictionGuard, persistenceWarning, readPersistence } from './eviction.js';
import { exchangeFingerprints } from './fingerprints.js';
import { runLeaseScript } from './leases.js';
import { fail, notWritten, resolveLost } from './lost-reply.js';
import { createOutcomeQueue, type OutcomeQueue } from './outcomes.js';
import { type ParsedRedisStoreOptions, parseRedisStoreOptions, type RedisReplayStore, type RedisStoreOptions } from './options.js';
import {
  claimMisuse,
  expiredError,
  fingerprintMisuse,
  idMisuse,
  leaseMisuse,
  ledgerLostError,
  ownerMisuse,
  spendMisuse,
} from './scripts.js';
import type { Waiter } from './waiter.js';

/**
 * Replay store on Redis ≥ 6.2. Redis's clock decides (`clock`): each `consume` is one call of a script on the id's
 * key (batched with others while a call is in flight) that reads `TIME`, refuses an `expiresAtMs` at or before it with
 * `StateExpiredError` (nothing written: never a `PXAT` in Redis's past), and else runs `SET key <owner> NX PXAT
 * expiresAtMs`, where `<owner>` is 16 random bytes only this call knows: set → `true` (first use), held → `false`. The
 * same step reads the ledger epoch (`epoch`, see `epoch.ts`): a `mintedAtMs` before it rejects with `LedgerLostError`.
 * Every script touches one hash slot, so it runs unchanged on Redis Cluster. When the reply is lost (timeout,
 * connection dropped in flight) one read asks whether the key holds this call's owner value: yes → `true`, another
 * value → `false`; otherwise, and on any error or unexpected reply, the consume rejects with `StoreUnavailableError`
 * (the original error as `cause`) — never `true` for a write that is not this call's.
 *
 * The owned client fails fast while Redis is down (offline queue disabled, in-flight commands rejected
 * when the connection drops, not resent) and reconnects by itself with capped exponential backoff, so
 * consumes succeed again as soon as Redis is back.
 *
 * Outcome recording (`claim`, `record`) and leases (`renew`, `release`): batched like consumes, as calls of one Lua
 * script that runs each claim and record atomically on its id's one key — the key `consume` uses, so an id taken by
 * either is taken for both — one call per hash slot on a Cluster (see `outcomes.ts`, `leases.ts`). A claim with an
 * `owner` holds a lease on Redis's clock (`leaseMs`), answers `pending` with `leaseLeftMs` while it runs, `unknown`
 * once it lapsed unrecorded, and is taken over by `reclaim` with the next fence. A lost or failed batch is resolved
 * by reading its keys back: a claim is `first` only when the key holds this call's own owner value.
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
  const { client, owned, whenUsable, bounded, commands } = connection;
  const isCluster = (client as { isCluster?: unknown }).isCluster === true;
  const ledgerBase = keyPrefix.slice(0, -1);
  const epochKey = epochKeyOf(ledgerBase, isCluster);
  const epochs = createEpochKeeper(connection, ledgerBase, isCluster, (epochMs, how) => {
    if (!closed) warn(newEpochReport(epochMs, how));
  });
  const ledger = { epochKey, sawEpoch: epochs.saw };
  const onStart = startReports(connection, epochs, commandTimeoutMs, warn, isClosed);
  const eviction = createEvictionGuard(connection, evictionPolicyCheck, commandTimeoutMs, warn, onStart);
  const { consume, queue } = consumer(connection, parsed, eviction, ledger, isClosed);
  const whenOpen = opener(connection, eviction, isClosed);
  const { claim, record, renew, release, outcomes } = outcomeRecorder(connection, parsed, whenOpen, ledger, isClosed);
  /** `ReplayStore.ledgerEpoch`: see `epoch.ts` (one script on one Redis; the master key of a Cluster). */
  const ledgerEpoch = (): Promise<number> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    return whenOpen(() => epochs.ledgerEpoch(), false);
  };
  const time = (): Promise<number> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    return whenOpen(async () => {
      try {
        return redisMs(await bounded(commands.time()));
      } catch (cause) {
        return fail(cause);
      }
    }, false);
  };

  // The fleet check's exchange: one hash of the ledger (one slot on a Cluster, by the ledger's hash tag), named like
  // the budget keys so that no id of any ledger can name it.
  const fingerprintKey = `${ledgerBase}%k{${ledgerBase}}`;
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
    capabilities: fullStoreCapabilities({ maxOutcomeBytes, outcomeBudgetBytes }),
    keyFingerprints,
    consume,
    claim,
    record,
    renew,
    release,
    ledgerEpoch,
    time,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    close,
    client,
    keyPrefix,
    namespace: parsed.namespace,
    checkEvictionPolicy: checkNow,
    checkPersistence: async () =>
      closed ? { status: 'unknown', error: new Error('store is closed') } : readPersistence(commands, commandTimeoutMs),
    ready,
  };
}

/**
 * `consume`: one call of the consume script (batched with others while a call is in flight), after an owned client's
 * start-up wait and the eviction gate; Redis's clock decides (see `batching.ts`). A lost reply is resolved by reading
 * back this call's owner value.
 */
function consumer(
  connection: RedisConnection,
  parsed: ParsedRedisStoreOptions,
  eviction: EvictionGuard,
  ledger: Ledger,
  isClosed: () => boolean,
): { consume: RedisReplayStore['consume']; queue: ConsumeQueue } {
  const { keyPrefix, extraRetentionMs, batching } = parsed;
  const { owned, whenUsable } = connection;

  const queue = createConsumeQueue(
    connection,
    { ...parsed, ...ledger, sendPlain: (waiter) => consumePlain(connection, waiter, extraRetentionMs, ledger) },
    isClosed,
  );
  const write = batching ? queue.enqueue : queue.sendNow;
  const sendChecked = (key: string, exp: number, minted: number | undefined): Promise<boolean> => {
    const gate = eviction.gate();
    if (gate === undefined) return write(key, exp, minted);
    return gate.then(() => (isClosed() ? fail(new Error('store is closed')) : write(key, exp, minted)), fail);
  };

  const consume = (id: string, expiresAtMs: number, options?: SpendOptions): Promise<boolean> => {
    if (isClosed()) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    const misuse = idMisuse('consume', id, expiresAtMs) ?? spendMisuse('consume', options);
    if (misuse !== undefined) return Promise.reject(misuse);
    const key = keyPrefix + id;
    // Round up: the id must be remembered until at least expiresAtMs.
    const exp = Math.ceil(expiresAtMs);
    const minted = options?.mintedAtMs;
    try {
      const wait = owned ? whenUsable() : undefined;
      if (wait === undefined) return sendChecked(key, exp, minted);
      return wait.then(() => (isClosed() ? fail(new Error('store is closed')) : sendChecked(key, exp, minted)));
    } catch (cause) {
      // ioredis may throw synchronously (e.g. a Cluster with no nodes): still never true.
      return Promise.reject(new StoreUnavailableError({ cause }));
    }
  };
  return { consume, queue };
}

/**
 * A consume by plain commands, for a client that may not run scripts (an ACL without `EVALSHA`/`EVAL`): Redis's `TIME`
 * first (an `expiresAtMs` at or before it is refused), the epoch read with `GET` when `mintedAtMs` is given (missing:
 * it cannot be written with Redis's time here, so the consume fails closed), then `SET key <owner> NX PXAT`; a lost
 * reply is resolved by one `GET` of this call's owner value.
 */
async function consumePlain(connection: RedisConnection, waiter: Waiter, extraRetentionMs: number, ledger: Ledger): Promise<boolean> {
  const { commands, bounded } = connection;
  const now = redisMs(await bounded(commands.time()));
  if (waiter.exp <= now) throw expiredError();
  if (waiter.minted !== undefined) {
    const epoch = await bounded(commands.get(ledger.epochKey(waiter.key)));
    if (epoch === null)
      throw new StoreUnavailableError({ cause: new Error('the ledger epoch is missing and scripts are refused (NOPERM)') });
    await ledger.sawEpoch(epoch);
    if (waiter.minted < Number(epoch)) throw ledgerLostError();
  }
  const mine = base64urlEncode(randomBytes(16)); // a value only this consume knows
  return bounded(commands.set(waiter.key, mine, 'PXAT', waiter.exp + extraRetentionMs, 'NX')).then(
    (reply) => {
      if (reply === 'OK') return true;
      if (reply === null) return false;
      throw new StoreUnavailableError({ cause: new Error('unexpected reply to SET NX PXAT') });
    },
    (error: unknown) => (notWritten(error) ? fail(error) : resolveLost(connection, waiter.key, mine, error)),
  );
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
 * Outcome recording and leases. `consume` writes a 22-character owner value (base64url, no ':'); `claim` writes
 * `p:<fp>:<owner>` (no owner given) or `L:<fp>:<owner>:<fence>:<till>` and `record` turns it into `d:<fp>:<outcome>` or
 * `R:<fp>:<owner>:<outcome>` (see `outcomes.ts`): one key per id, so the two share the ledger. Claims and records are
 * batched like consumes (one script call per batch, one per hash slot on a Cluster); `renew` and `release` are one
 * script call each (see `leases.ts`).
 */
function outcomeRecorder(
  connection: RedisConnection,
  parsed: ParsedRedisStoreOptions,
  whenOpen: WhenOpen,
  ledger: Ledger,
  isClosed: () => boolean,
): Pick<RedisReplayStore, 'claim' | 'record' | 'renew' | 'release'> & { outcomes: OutcomeQueue } {
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
      ...ledger,
    },
    isClosed,
  );
  const closed = (): Promise<never> => Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));

  /** UTF-8 bytes ≤ 3 × UTF-16 code units: the exact count only when that bound does not settle it. */
  const outcomeFits = (outcome: string): boolean =>
    outcome.length <= maxOutcomeBytes && (outcome.length * 3 <= maxOutcomeBytes || Buffer.byteLength(outcome, 'utf8') <= maxOutcomeBytes);

  const claim = (id: string, expiresAtMs: number, fingerprint: string, options?: ClaimOptions): Promise<ClaimResult> => {
    if (isClosed()) return closed();
    const misuse = idMisuse('claim', id, expiresAtMs) ?? fingerprintMisuse('claim', fingerprint) ?? claimMisuse(options);
    if (misuse !== undefined) return Promise.reject(misuse);
    const key = keyPrefix + id;
    const exp = Math.ceil(expiresAtMs);
    const args = {
      at: exp + extraRetentionMs,
      exp,
      owner: options?.owner,
      leaseMs: options?.leaseMs,
      reclaim: options?.reclaim === true,
      minted: options?.mintedAtMs,
    };
    return whenOpen(() => outcomes.claim(key, fingerprint, args), true);
  };

  const record = (
    id: string,
    fingerprint: string,
    outcome: string,
    options?: { readonly owner?: string | undefined },
  ): Promise<boolean> => {
    if (isClosed()) return closed();
    if (typeof id !== 'string' || id.length === 0) return Promise.reject(new TypeError('record: id must be a non-empty string'));
    const misuse = fingerprintMisuse('record', fingerprint) ?? ownerMisuse('record', options?.owner, false);
    if (misuse !== undefined) return Promise.reject(misuse);
    if (typeof outcome !== 'string') return Promise.reject(new TypeError('record: outcome must be a string'));
    // Too large: recorded as '' (done, not kept), so identical retries are replays and memory stays bounded.
    const kept = outcome !== '' && outcomeFits(outcome);
    return whenOpen(() => outcomes.record(keyPrefix + id, fingerprint, kept ? outcome : '', options?.owner), false);
  };

  const renew = (id: string, owner: string, leaseMs: number): Promise<boolean> => {
    if (isClosed()) return closed();
    const misuse = idMisuse('renew', id, 0) ?? ownerMisuse('renew', owner, true) ?? leaseMisuse('renew', leaseMs, true);
    if (misuse !== undefined) return Promise.reject(misuse);
    return whenOpen(() => runLeaseScript(connection, 'renew', keyPrefix + id, [owner, leaseMs]), false);
  };

  const release = (id: string, owner: string): Promise<boolean> => {
    if (isClosed()) return closed();
    const misuse = idMisuse('release', id, 0) ?? ownerMisuse('release', owner, true);
    if (misuse !== undefined) return Promise.reject(misuse);
    return whenOpen(() => runLeaseScript(connection, 'release', keyPrefix + id, [owner]), false);
  };
  return { claim, record, renew, release, outcomes };
}

/** What the spend scripts need of the ledger epoch: each id's epoch key, and where to report the epoch they read. */
interface Ledger {
  epochKey(key: string): string;
  sawEpoch: EpochKeeper['saw'];
}

/** The report of a new epoch (`STORE_LEDGER_EPOCH`): the ledger began, or a Cluster's slot began again. */
function newEpochReport(epochMs: number, how: 'began' | 'part'): BackgroundError {
  const at = new Date(epochMs).toISOString();
  const what =
    how === 'began'
      ? `the ledger began at ${at} (Redis's clock): it was empty — a first use, or Redis lost its data (restarted without persistence, flushed, failed over)`
      : `part of the ledger (a hash slot) began again at ${at} (Redis's clock): a master lost its data; the ledger's epoch is raised to it`;
  return new BackgroundError('STORE_LEDGER_EPOCH', `@mrtr/store-redis: ${what}. States minted before are refused (ERR_LEDGER_LOST).`);
}

/**
 * What runs on every `ready` of an owned client (before the first write of an injected one): the persistence report
 * (`STORE_NOT_PERSISTENT`, `STORE_PERSISTENCE_UNKNOWN`, each distinct report once) and the ledger epoch (`ledgerEpoch`:
 * written where missing; a new one is reported as `STORE_LEDGER_EPOCH`). Neither blocks a write: the scripts write a
 * missing epoch themselves.
 */
function startReports(
  connection: RedisConnection,
  epochs: EpochKeeper,
  timeoutMs: number,
  warn: (error: BackgroundError) => void,
  isClosed: () => boolean,
): () => void {
  let reported: string | undefined;
  return () => {
    void readPersistence(connection.commands, timeoutMs).then((result) => {
      const warning = persistenceWarning(result);
      if (warning !== undefined && warning.message !== reported && !isClosed()) {
        reported = warning.message;
        warn(warning);
      }
    });
    // A failure is left to the next call: the guard's ledgerEpoch, or the scripts, which write a missing epoch themselves.
    epochs.ledgerEpoch().catch(() => {});
  };
}

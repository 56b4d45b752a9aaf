import { KeyRing } from '../keys/keys.js';
import { type EventSink, type GuardEvent, createEventSink, isEventSink } from '../events.js';
import type { MintQuota, OutcomeQuota, RequestContext, StateGuardOptions, WaitingRetries } from './types.js';
import { NO_CAPABILITIES, storeCapabilities } from '../capabilities.js';
import type { CodecFactory, ReplayStore, StateCodec, StoreCapabilities } from '../interfaces.js';
import { intOption, YEAR_MS } from '../util/int-option.js';
import { MAX_LEASE_MS } from '../util/lease-args.js';
import type { WaitingBounds } from '../outcomes/wait.js';
import { createQuota, type Quota } from './quota.js';
import { type OptionNames, rejectUnknownOptions } from '../util/validate.js';

/** The names of {@link StateGuardOptions}, for an integration whose options hold the guard's (spread into its list). */
export const STATE_GUARD_OPTIONS: OptionNames<StateGuardOptions> = {
  keys: true,
  codec: true,
  allowEphemeralKeys: true,
  store: true,
  audience: true,
  ttlMs: true,
  flowTtlMs: true,
  maxRounds: true,
  clockSkewMs: true,
  maxTokenBytes: true,
  principal: true,
  unauthenticated: true,
  mintQuota: true,
  outcomeQuota: true,
  retryWaitMs: true,
  leaseMs: true,
  clockCheckMs: true,
  maxWaitingRetries: true,
  now: true,
  onEvent: true,
};
const MINT_QUOTA_OPTIONS: OptionNames<MintQuota> = { max: true, windowMs: true, maxPrincipals: true };
const OUTCOME_QUOTA_OPTIONS: OptionNames<OutcomeQuota> = { maxBytes: true, windowMs: true, maxPrincipals: true };
const WAITING_OPTIONS: OptionNames<WaitingRetries> = { perPrincipal: true, total: true };
const UNAUTHENTICATED_OPTIONS: OptionNames<Exclude<StateGuardOptions['unauthenticated'], 'reject' | undefined>> = {
  principal: true,
  recordOutcomes: true,
};

const DEFAULT_MAX_TOKEN_BYTES = 16 * 1024;
/** Default {@link OutcomeQuota.maxBytes}: 1 MiB per principal (about 60 re-asks quoting long arguments, 1,000 small results). */
const DEFAULT_OUTCOME_QUOTA_BYTES = 1024 * 1024;

/**
 * The mint quota: the one given, none for `false`, else one sized from the store's declared capacity (a store whose
 * `capabilities.capacity` is N holds that many ids: no principal may take more than a hundredth of it, and at least 16).
 */
function parseMintQuota(option: StateGuardOptions['mintQuota'], store: ReplayStore | undefined, lifetimeMs: number): Quota | undefined {
  if (option === false) return undefined;
  if (option !== undefined) {
    if (option !== null && typeof option === 'object') rejectUnknownOptions('createStateGuard: mintQuota', option, MINT_QUOTA_OPTIONS);
    return createQuota(option, lifetimeMs);
  }
  const capacity = store === undefined ? undefined : storeCapabilities(store).capacity;
  if (capacity === undefined) return undefined;
  return createQuota({ max: Math.max(16, Math.floor(capacity / 100)) }, lifetimeMs);
}

/** {@link StateGuardOptions} validated, with their defaults. */
export interface ParsedGuardOptions {
  keys: KeyRing;
  /** The codec built on `keys.current()` at construction. */
  codec: StateCodec;
  /** Builds the codec for a ring in force (`keys.current()`); with a fixed ring, only ever called with `keys`. */
  codecFor: (ring: KeyRing) => StateCodec;
  store: ReplayStore | undefined;
  /** What the store declared (`NO_CAPABILITIES` without a store). */
  capabilities: StoreCapabilities;
  audience: string;
  ttlMs: number;
  flowTtlMs: number;
  maxRounds: number;
  clockSkewMs: number;
  maxTokenBytes: number;
  readPrincipal: (request: RequestContext) => string | undefined;
  unauthenticated: 'reject' | { principal: string };
  /** Whether outcomes are recorded for the fixed unauthenticated principal. */
  recordUnauthenticated: boolean;
  quota: Quota | undefined;
  outcomeQuota: Quota;
  now: () => number;
  retryWaitMs: number;
  leaseMs: number;
  clockCheckMs: number;
  waiting: WaitingBounds;
  /** The event path, when `onEvent` is set. */
  events: EventSink<GuardEvent> | undefined;
}

/** Validates {@link StateGuardOptions} (labelled `TypeError`/`RangeError`). */
export function parseGuardOptions(options: StateGuardOptions): ParsedGuardOptions {
  if (options === null || typeof options !== 'object') throw new TypeError('createStateGuard: options must be an object');
  rejectUnknownOptions('createStateGuard', options, STATE_GUARD_OPTIONS);
  const { keys, store, audience } = options;
  if (!(keys instanceof KeyRing)) throw new TypeError('createStateGuard: keys must be a KeyRing');
  if (keys.refreshing && typeof options.codec !== 'function') {
    throw new TypeError(
      'createStateGuard: with a refreshing KeyRing pass the codec factory (e.g. codec: createHmacCodec): the guard builds the codec on each ring in force',
    );
  }
  const codecFor = (ring: KeyRing): StateCodec => buildCodec(options.codec, ring);
  const codec = codecFor(keys.current());
  if (store !== undefined && (store === null || typeof store !== 'object' || typeof store.consume !== 'function')) {
    throw new TypeError('createStateGuard: store must implement ReplayStore');
  }
  const capabilities = store === undefined ? NO_CAPABILITIES : labelled(() => storeCapabilities(store));
  const allowEphemeralKeys = options.allowEphemeralKeys ?? false;
  if (typeof allowEphemeralKeys !== 'boolean') throw new TypeError('createStateGuard: allowEphemeralKeys must be a boolean');
  if (keys.ephemeral && capabilities.shared && !allowEphemeralKeys) {
    throw new TypeError(
      'createStateGuard: a generated key (KeyRing.generate) with a store shared across processes: no other replica can open what this one seals. Give every replica the same keys (MRTR_KEYS, a KeyProvider), or set allowEphemeralKeys: true for a single process',
    );
  }
  if (typeof audience !== 'string' || audience.length === 0 || audience.length > 4096) {
    throw new TypeError('createStateGuard: audience must be a non-empty string');
  }
  // `${audience}#outcome` is the audience of this guard's sealed outcomes: an audience with that suffix would share
  // the outcome audience of the guard named without it.
  if (audience.endsWith('#outcome')) throw new TypeError('createStateGuard: audience must not end in "#outcome" (reserved for outcomes)');
  const ttlMs = intOption('ttlMs', options.ttlMs, 600_000, 1, YEAR_MS);
  const flowTtlMs = intOption('flowTtlMs', options.flowTtlMs, 1_800_000, 1, YEAR_MS);
  const maxRounds = intOption('maxRounds', options.maxRounds, 8, 1, 1000);
  const clockSkewMs = intOption('clockSkewMs', options.clockSkewMs, 5_000, 0, 600_000);
  const codecMax = codec.maxTokenBytes;
  if (typeof codecMax !== 'number' || !(codecMax > 0)) throw new TypeError('createStateGuard: codec.maxTokenBytes must be positive');
  const maxTokenBytes = intOption('maxTokenBytes', options.maxTokenBytes, Math.min(DEFAULT_MAX_TOKEN_BYTES, codecMax), 1, codecMax);
  const readPrincipal = options.principal ?? ((req: RequestContext) => req.principal);
  if (typeof readPrincipal !== 'function') throw new TypeError('createStateGuard: principal must be a function');
  const unauthenticated = options.unauthenticated ?? 'reject';
  if (
    unauthenticated !== 'reject' &&
    (unauthenticated === null ||
      typeof unauthenticated !== 'object' ||
      typeof unauthenticated.principal !== 'string' ||
      unauthenticated.principal === '')
  ) {
    throw new TypeError('createStateGuard: unauthenticated must be "reject" or { principal: string }');
  }
  if (unauthenticated !== 'reject') rejectUnknownOptions('createStateGuard: unauthenticated', unauthenticated, UNAUTHENTICATED_OPTIONS);
  let recordUnauthenticated = false;
  if (unauthenticated !== 'reject' && unauthenticated.recordOutcomes !== undefined) {
    if (typeof unauthenticated.recordOutcomes !== 'boolean') {
      throw new TypeError('createStateGuard: unauthenticated.recordOutcomes must be a boolean');
    }
    recordUnauthenticated = unauthenticated.recordOutcomes;
  }
  const lifetimeMs = ttlMs + 2 * clockSkewMs;
  const quota = parseMintQuota(options.mintQuota, store, lifetimeMs);
  const outcomeQuotaOptions: OutcomeQuota = options.outcomeQuota ?? {};
  if (outcomeQuotaOptions === null || typeof outcomeQuotaOptions !== 'object') {
    throw new TypeError('createStateGuard: outcomeQuota must be an object');
  }
  rejectUnknownOptions('createStateGuard: outcomeQuota', outcomeQuotaOptions, OUTCOME_QUOTA_OPTIONS);
  const maxBytes = intOption(
    'outcomeQuota.maxBytes',
    outcomeQuotaOptions.maxBytes,
    DEFAULT_OUTCOME_QUOTA_BYTES,
    1,
    Number.MAX_SAFE_INTEGER,
  );
  const outcomeQuota = createQuota({ ...outcomeQuotaOptions, max: maxBytes }, lifetimeMs, 'outcomeQuota', Number.MAX_SAFE_INTEGER);
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createStateGuard: now must be a function');
  const retryWaitMs = intOption('retryWaitMs', options.retryWaitMs, 3_000, 0, 600_000);
  const leaseMs = intOption('leaseMs', options.leaseMs, 30_000, 3, MAX_LEASE_MS);
  const clockCheckMs = intOption('clockCheckMs', options.clockCheckMs, 30_000, 0, YEAR_MS);
  const waitingOptions = options.maxWaitingRetries ?? {};
  if (waitingOptions === null || typeof waitingOptions !== 'object') {
    throw new TypeError('createStateGuard: maxWaitingRetries must be an object');
  }
  rejectUnknownOptions('createStateGuard: maxWaitingRetries', waitingOptions, WAITING_OPTIONS);
  const waiting: WaitingBounds = {
    perPrincipal: intOption('maxWaitingRetries.perPrincipal', waitingOptions.perPrincipal, 16, 0, 1_000_000),
    total: intOption('maxWaitingRetries.total', waitingOptions.total, 1_024, 0, 1_000_000),
  };
  const { onEvent } = options;
  let events: EventSink<GuardEvent> | undefined;
  if (typeof onEvent === 'function') events = createEventSink<GuardEvent>(keys, onEvent);
  else if (isEventSink(onEvent)) {
    if (onEvent.keys !== keys) throw new TypeError('createStateGuard: onEvent is an event sink built on another KeyRing');
    events = onEvent;
  } else if (onEvent !== undefined) throw new TypeError('createStateGuard: onEvent must be a function');
  return {
    keys,
    codec,
    codecFor,
    store,
    capabilities,
    audience,
    ttlMs,
    flowTtlMs,
    maxRounds,
    clockSkewMs,
    maxTokenBytes,
    readPrincipal,
    unauthenticated,
    recordUnauthenticated,
    quota,
    outcomeQuota,
    now,
    retryWaitMs,
    leaseMs,
    clockCheckMs,
    waiting,
    events,
  };
}

/** Runs a check whose `TypeError` is labelled `createStateGuard`. */
function labelled<T>(check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof TypeError) throw new TypeError(`createStateGuard: ${error.message}`);
    throw error;
  }
}

function buildCodec(codec: unknown, keys: KeyRing): StateCodec {
  let built: unknown = codec;
  if (typeof codec === 'function') {
    built = (codec as CodecFactory)(keys);
  } else if (codec !== null && typeof codec === 'object' && (codec as Partial<StateCodec>).keys !== keys) {
    throw new TypeError(
      'createStateGuard: the codec was built on another KeyRing; pass its factory (e.g. codec: createHmacCodec) so one ring feeds both',
    );
  }
  const c = built as Partial<StateCodec> | null;
  const checked =
    c === null || typeof c !== 'object' || typeof c.seal !== 'function' || typeof c.unseal !== 'function' ? undefined : (c as StateCodec);
  if (checked === undefined) throw new TypeError('createStateGuard: codec must be a codec factory or a StateCodec');
  if (checked.keys !== keys) throw new TypeError('createStateGuard: the codec factory returned a codec built on another KeyRing');
  return checked;
}

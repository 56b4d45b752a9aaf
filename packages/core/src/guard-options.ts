import { KeyRing } from './keys.js';
import { type EventSink, type GuardEvent, createEventSink, isEventSink } from './events.js';
import type { RequestContext, StateGuardOptions } from './guard-types.js';
import { asStateCodec, type CodecFactory, type ReplayStore, type StateCodec } from './interfaces.js';
import { intOption, YEAR_MS } from './int-option.js';
import { createQuota } from './quota.js';

const DEFAULT_MAX_TOKEN_BYTES = 16 * 1024;

/** {@link StateGuardOptions} validated, with their defaults. */
export interface ParsedGuardOptions {
  keys: KeyRing;
  codec: StateCodec;
  store: ReplayStore | undefined;
  audience: string;
  ttlMs: number;
  flowTtlMs: number;
  maxRounds: number;
  clockSkewMs: number;
  maxTokenBytes: number;
  readPrincipal: (request: RequestContext) => string | undefined;
  unauthenticated: 'reject' | { principal: string };
  quota: { take(principal: string, t: number): boolean } | undefined;
  now: () => number;
  retryWaitMs: number;
  /** The event path, when `onEvent` is set. */
  events: EventSink<GuardEvent> | undefined;
}

/** Validates {@link StateGuardOptions} (labelled `TypeError`/`RangeError`). */
export function parseGuardOptions(options: StateGuardOptions): ParsedGuardOptions {
  if (options === null || typeof options !== 'object') throw new TypeError('createStateGuard: options must be an object');
  const { keys, store, audience } = options;
  if (!(keys instanceof KeyRing)) throw new TypeError('createStateGuard: keys must be a KeyRing');
  const codec = buildCodec(options.codec, keys);
  if (store !== undefined && (store === null || typeof store.consume !== 'function')) {
    throw new TypeError('createStateGuard: store must implement ReplayStore');
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
  const quota = options.mintQuota === undefined ? undefined : createQuota(options.mintQuota, ttlMs + 2 * clockSkewMs);
  const now = options.now ?? Date.now;
  if (typeof now !== 'function') throw new TypeError('createStateGuard: now must be a function');
  const retryWaitMs = intOption('retryWaitMs', options.retryWaitMs, 10_000, 0, 600_000);
  if (store !== undefined && (typeof store.claim === 'function') !== (typeof store.record === 'function')) {
    throw new TypeError('createStateGuard: a store implements claim and record, both or neither');
  }
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
    store,
    audience,
    ttlMs,
    flowTtlMs,
    maxRounds,
    clockSkewMs,
    maxTokenBytes,
    readPrincipal,
    unauthenticated,
    quota,
    now,
    retryWaitMs,
    events,
  };
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
  // asStateCodec: a codec with the deprecated `open` only is still accepted, for one release.
  const checked = c === null || typeof c !== 'object' || typeof c.seal !== 'function' ? undefined : asStateCodec(c as StateCodec);
  if (checked === undefined) throw new TypeError('createStateGuard: codec must be a codec factory or a StateCodec');
  if (checked.keys !== keys) throw new TypeError('createStateGuard: the codec factory returned a codec built on another KeyRing');
  return checked;
}

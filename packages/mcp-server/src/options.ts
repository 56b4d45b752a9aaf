import type { ServerContext } from '@modelcontextprotocol/server';
import type {
  AnswerEvent,
  CodecFactory,
  FlowCompletedEvent,
  KeyRing,
  MintQuota,
  MrtrErrorCode,
  MrtrEvent,
  ReplayStore,
  StateCodec,
  StateGuardOptions,
} from '@mrtr/core';
import type { TaskOptions } from './tasks.js';

/** What `onReject` receives: the real reason behind an opaque wire error (for logs and metrics). */
export interface RejectEvent {
  /** The precise code, e.g. `ERR_STATE_INTEGRITY`, `ERR_STATE_BINDING`, `ERR_STORE_UNAVAILABLE`. */
  code: MrtrErrorCode;
  /** `tools/call`, `prompts/get` or `resources/read`. */
  method: string;
  /** Tool or prompt name, or resource URI; `undefined` when rejected before dispatch (size cap). */
  target: string | undefined;
}

export type { AnswerEvent, FlowCompletedEvent, MrtrEvent };

/** What to do with a question the client did not declare a capability for in this request. */
export type MissingCapabilityPolicy = 'fail' | 'degrade';

/**
 * Answers in `inputResponses` to a question this server has not sent yet in the flow: `'ignore'` asks the
 * question (the client must see it); `'accept'` takes a valid pre-supplied answer (the spec allows it;
 * only for questions whose answer needs no human confirmation).
 */
export type PresuppliedPolicy = 'ignore' | 'accept';

/** Options of {@link createMrtr}. Validated at construction (labelled `TypeError`/`RangeError`). */
export interface MrtrOptions {
  /** The key ring: the codec is built on it and the principal tags are derived from it. */
  keys: KeyRing;
  /**
   * Seals and opens request states: a codec factory, called with `keys` (`createHmacCodec`,
   * `createJweCodec`, `createAeadCodec`, or `(keys) => createAeadCodec(keys, { maxTokenBytes })`).
   */
  codec: CodecFactory | StateCodec;
  /**
   * Replay store: makes each round's state single-use (an older round's state, or a replay of a completed
   * flow, is rejected). Without it a state can be replayed until it expires.
   */
  store?: ReplayStore | undefined;
  /** This server's identity (name or URL); a state minted for another audience is rejected. */
  audience: string;
  /**
   * Reads the authenticated principal of a request: the user every state is bound to. It must name one user,
   * never something many users share. The SDK's `AuthInfo` carries `token`, `clientId` (the client
   * application: shared by all its users, so never a principal), `scopes`, `expiresAt`, `resource` and `extra`,
   * where a token verifier puts the user's claims; the default reads the subject from `extra.sub`. Return
   * `undefined` when there is none (then `unauthenticated` decides).
   * @default `sub:` + `ctx.http?.authInfo?.extra?.sub` (a non-empty string), else `undefined`
   */
  principal?: ((ctx: ServerContext) => string | undefined) | undefined;
  /**
   * Policy when `principal` yields nothing: `'reject'` answers every protected call with `-32600`
   * ("Authentication required"); `{ principal }` uses one fixed identity, in a namespace no authenticated
   * principal can reach (for stdio: `{ principal: 'local' }`).
   * @default 'reject'
   */
  unauthenticated?: 'reject' | { principal: string } | undefined;
  /** Lifetime of one round's state in ms. @default 600_000 */
  ttlMs?: number | undefined;
  /** Absolute lifetime of a whole flow in ms, fixed at round 1. @default 1_800_000 */
  flowTtlMs?: number | undefined;
  /** Most rounds (states minted) in one flow. @default 8 */
  maxRounds?: number | undefined;
  /** Tolerated clock difference between instances in ms. @default 5_000 */
  clockSkewMs?: number | undefined;
  /** Largest accepted `requestState` (checked before any decoding). @default min(16 KiB, codec.maxTokenBytes) */
  maxTokenBytes?: number | undefined;
  /**
   * Per-principal bound on states minted (answered `-32600` "Too many requests" past it), so no principal
   * can fill a bounded store that others depend on. @default none
   */
  mintQuota?: MintQuota | undefined;
  /** Default for {@link AskOptions.missingCapability}. @default 'fail' */
  missingCapability?: MissingCapabilityPolicy | undefined;
  /** Default for answers to questions not sent yet (see {@link PresuppliedPolicy}). @default 'ignore' */
  presupplied?: PresuppliedPolicy | undefined;
  /** Longest string (UTF-16 units) in any answer; a longer one makes the answer invalid, before any format check. @default 4096 */
  maxAnswerChars?: number | undefined;
  /**
   * Identical retries get the first answer: when a round's response is lost and the client sends the same state
   * with the same answers again (same principal), it gets the response the round produced the first time
   * (sealed by the codec and kept in the store until the state expires) instead of "invalid state", and the
   * handler does not run again. Needs a store that records outcomes (`claim`/`record`: memory, Redis, SQL);
   * with `false`, or a store without them, every retry is a replay (`-32602`). Different answers, or another
   * principal, are always a replay.
   * @default true
   */
  recordOutcomes?: boolean | undefined;
  /**
   * How long an identical retry waits for a first attempt still running before it gets `-32600` with
   * `data.reason: 'round_in_progress'` (retry later). 0–600000. @default 10_000
   */
  retryWaitMs?: number | undefined;
  /** Clock in ms since the epoch (tests). @default Date.now */
  now?: (() => number) | undefined;
  /** Called once for every rejected state and every server fault, with the real code. Must not throw. */
  onReject?: ((event: RejectEvent) => void) | undefined;
  /**
   * Called synchronously with one typed event per step: `flow.started`, `state.minted`, `state.opened`,
   * `answer.accepted`/`answer.ignored`, `state.rejected` (with its code), `store.error`, `flow.completed`.
   * Events hold sizes, names, key ids, durations and a keyed short flow id, never a token, key, argument or
   * answer. A throw or a rejected promise is swallowed and nothing waits for it: queue slow work yourself.
   * `onReject` is sugar for the `state.rejected` events. @default none (the guard is then not wrapped)
   */
  onEvent?: ((event: MrtrEvent) => void) | undefined;
  /**
   * Task support (tasks extension, `io.modelcontextprotocol/tasks`) for tools registered with `task`:
   * `{ store: createMemoryTaskStore(), ttlMs?, pollIntervalMs? }`. Tasks are bound to the same principal as states.
   */
  tasks?: TaskOptions | undefined;
}

/** The validated options the adapter runs on. */
export interface ResolvedOptions {
  guard: StateGuardOptions;
  principal: (ctx: ServerContext) => string | undefined;
  missingCapability: MissingCapabilityPolicy;
  presupplied: PresuppliedPolicy;
  maxAnswerChars: number;
  /** Whether a round is admitted with `guard.admit` (its outcome recorded for identical retries). */
  recordOutcomes: boolean;
  onReject: ((event: RejectEvent) => void) | undefined;
  onEvent: ((event: MrtrEvent) => void) | undefined;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The default principal: the token's subject (`authInfo.extra.sub`), prefixed `sub:`. Never the client id: it
 * names the client application, which many users share, so one user could redeem another's state and all of
 * them would share one mint quota. Without a subject the request has no principal.
 */
export function defaultPrincipal(ctx: ServerContext): string | undefined {
  const sub = (ctx.http?.authInfo?.extra as Record<string, unknown> | undefined)?.sub;
  return typeof sub === 'string' && sub.length > 0 ? `sub:${sub}` : undefined;
}

function oneOf<T extends string>(name: string, value: unknown, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (!allowed.includes(value as T)) throw new TypeError(`createMrtr: ${name} must be ${allowed.map((a) => `"${a}"`).join(' or ')}`);
  return value as T;
}

/** Validates {@link MrtrOptions}; the guard validates its own part when it is built. */
export function resolveOptions(options: MrtrOptions): ResolvedOptions {
  if (!isObject(options)) throw new TypeError('createMrtr: options must be an object');
  const { principal, onReject } = options;
  if (principal !== undefined && typeof principal !== 'function') throw new TypeError('createMrtr: principal must be a function');
  if (onReject !== undefined && typeof onReject !== 'function') throw new TypeError('createMrtr: onReject must be a function');
  const { onEvent } = options;
  if (onEvent !== undefined && typeof onEvent !== 'function') throw new TypeError('createMrtr: onEvent must be a function');
  const maxAnswerChars = options.maxAnswerChars ?? 4096;
  if (typeof maxAnswerChars !== 'number' || !Number.isSafeInteger(maxAnswerChars)) {
    throw new TypeError('createMrtr: maxAnswerChars must be an integer');
  }
  if (maxAnswerChars < 1 || maxAnswerChars > 1_048_576) throw new RangeError('createMrtr: maxAnswerChars must be between 1 and 1048576');
  const recordOutcomes = options.recordOutcomes ?? true;
  if (typeof recordOutcomes !== 'boolean') throw new TypeError('createMrtr: recordOutcomes must be a boolean');
  const guard: StateGuardOptions = {
    keys: options.keys,
    codec: options.codec,
    store: options.store,
    audience: options.audience,
    principal: (request) => request.principal,
    ...(options.unauthenticated !== undefined && { unauthenticated: options.unauthenticated }),
    ...(options.mintQuota !== undefined && { mintQuota: options.mintQuota }),
    ...(options.ttlMs !== undefined && { ttlMs: options.ttlMs }),
    ...(options.flowTtlMs !== undefined && { flowTtlMs: options.flowTtlMs }),
    ...(options.maxRounds !== undefined && { maxRounds: options.maxRounds }),
    ...(options.clockSkewMs !== undefined && { clockSkewMs: options.clockSkewMs }),
    ...(options.maxTokenBytes !== undefined && { maxTokenBytes: options.maxTokenBytes }),
    ...(options.retryWaitMs !== undefined && { retryWaitMs: options.retryWaitMs }),
    ...(options.now !== undefined && { now: options.now }),
  };
  return {
    guard,
    principal: principal ?? defaultPrincipal,
    missingCapability: oneOf('missingCapability', options.missingCapability, ['fail', 'degrade'], 'fail'),
    presupplied: oneOf('presupplied', options.presupplied, ['ignore', 'accept'], 'ignore'),
    maxAnswerChars,
    recordOutcomes: recordOutcomes && typeof options.store?.claim === 'function',
    onReject,
    onEvent,
  };
}

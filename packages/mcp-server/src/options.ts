import type { ServerContext } from '@modelcontextprotocol/server';
import { KeyRing, type MrtrErrorCode, type StateGuardOptions } from '@mrtr/core';
import { STATE_GUARD_OPTIONS } from '@mrtr/core/adapter';
import { type AnswerEvent, createEventSink, type FlowCompletedEvent, type MrtrEvent, safeEmitter } from '@mrtr/core/events';
import { intOption, isObject, type OptionNames, rejectUnknownOptions } from '@mrtr/core/options';
import { storeCapabilities } from '@mrtr/core/store';
import type { MissingCapabilityPolicy, PresuppliedPolicy, ResolvedOptions } from './rounds/options.js';
import { createPrincipalPolicy, defaultPrincipal } from './identity.js';
import type { TaskOptions } from './tasks/options.js';

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

/**
 * Options of {@link createMrtr}: every option of the state guard (`StateGuardOptions` of `@mrtr/core`, documented,
 * defaulted and validated there, and passed to it as they are) except `principal` and `onEvent`, which the adapter
 * takes in MCP's terms (the principal read from the MCP request, every event of the adapter and the guard), and the
 * adapter's own options. Validated at construction (labelled `TypeError`/`RangeError`).
 */
export interface MrtrOptions extends Omit<StateGuardOptions, 'principal' | 'onEvent'> {
  /**
   * Reads the authenticated principal of a request: the user every state is bound to. It must name one user,
   * never something many users share. The SDK's `AuthInfo` carries `token`, `clientId` (the client
   * application: shared by all its users, so never a principal), `scopes`, `expiresAt`, `resource` and `extra`,
   * where a token verifier puts the user's claims; the default reads the subject from `extra.sub`. Return
   * `undefined` when there is none (then `unauthenticated` decides: `'reject'` answers every protected call
   * with `-32600` "Authentication required"; for stdio, `{ principal: 'local' }`).
   * @default `sub:` + `ctx.http?.authInfo?.extra?.sub` (a non-empty string), else `undefined`
   */
  principal?: ((ctx: ServerContext) => string | undefined) | undefined;
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
   * Called once for every rejected state and every server fault, with the real code: a filter on the event
   * stream (every `state.rejected` event, as `{ code, method, target }`). A throw is swallowed. @default none
   */
  onReject?: ((event: RejectEvent) => void) | undefined;
  /**
   * Called synchronously with one typed event per step: `flow.started`, `state.minted`, `state.opened`,
   * `answer.accepted`/`answer.ignored`, `state.rejected` (with its code), `store.error`, `flow.completed`.
   * Events hold sizes, names, key ids, durations and a keyed short flow id, never a token, key, argument or
   * answer. A throw or a rejected promise is swallowed and nothing waits for it: queue slow work yourself.
   * `onReject` is a filter on these events (`state.rejected`). @default none (with neither hook, no event is built)
   */
  onEvent?: ((event: MrtrEvent) => void) | undefined;
  /**
   * Task support (tasks extension, `io.modelcontextprotocol/tasks`) for tools registered with `task`:
   * `{ store: createMemoryTaskStore(), ttlMs?, pollIntervalMs? }`. A task is bound to the principal its round is
   * bound to (one principal policy: `principal`, then `unauthenticated`). @default none (no tool may use `task`)
   */
  tasks?: TaskOptions | undefined;
}

const MRTR_OPTIONS: OptionNames<MrtrOptions> = {
  ...STATE_GUARD_OPTIONS,
  missingCapability: true,
  presupplied: true,
  maxAnswerChars: true,
  recordOutcomes: true,
  onReject: true,
  tasks: true,
};

function oneOf<T extends string>(name: string, value: unknown, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (!allowed.includes(value as T)) throw new TypeError(`createMrtr: ${name} must be ${allowed.map((a) => `"${a}"`).join(' or ')}`);
  return value as T;
}

/** Validates {@link MrtrOptions}; the guard validates its own part when it is built. */
export function resolveOptions(options: MrtrOptions): ResolvedOptions {
  if (!isObject(options)) throw new TypeError('createMrtr: options must be an object');
  rejectUnknownOptions('createMrtr', options, MRTR_OPTIONS);
  const { principal, onReject } = options;
  if (principal !== undefined && typeof principal !== 'function') throw new TypeError('createMrtr: principal must be a function');
  if (onReject !== undefined && typeof onReject !== 'function') throw new TypeError('createMrtr: onReject must be a function');
  const { onEvent } = options;
  if (onEvent !== undefined && typeof onEvent !== 'function') throw new TypeError('createMrtr: onEvent must be a function');
  const maxAnswerChars = intOption('createMrtr: maxAnswerChars', options.maxAnswerChars, 4096, 1, 1_048_576);
  const recordOutcomes = options.recordOutcomes ?? true;
  if (typeof recordOutcomes !== 'boolean') throw new TypeError('createMrtr: recordOutcomes must be a boolean');
  // The guard's own options pass through as they are (the guard validates them); the principal is read from
  // the MCP request by the adapter (`principal` takes a ServerContext, not the guard's request context).
  const {
    principal: _principal,
    onReject: _onReject,
    onEvent: _onEvent,
    missingCapability,
    presupplied,
    maxAnswerChars: _maxAnswerChars,
    recordOutcomes: _recordOutcomes,
    tasks: _tasks,
    ...guardOptions
  } = options;
  const hook = onEvent === undefined && onReject === undefined ? undefined : eventHook(onEvent, onReject);
  // A sink on the guard's ring (a bad ring is left for the guard to refuse with its own message).
  const events = hook !== undefined && options.keys instanceof KeyRing ? createEventSink<MrtrEvent>(options.keys, hook) : undefined;
  // The guard's principal is never read from the request context: the adapter resolves it (principalOf, with the same
  // `unauthenticated` the guard validates) and hands the guard the resolved Principal (RequestContext.resolvedPrincipal).
  const guard: StateGuardOptions = {
    ...guardOptions,
    ...((events ?? hook) !== undefined && { onEvent: (events ?? hook) as StateGuardOptions['onEvent'] }),
  };
  const store = options.store;
  const records = store !== undefined && storeCapabilities(store).outcomes !== undefined;
  if (recordOutcomes && store !== undefined && !records) {
    // Said once, at start: a store without claim/record turns every retry after a lost response into a replay.
    console.warn(
      'mrtr: recordOutcomes is on but the store does not record outcomes (its capabilities declare no outcomes): an identical retry after a lost response will be refused as a replay. Use a store that records outcomes (memory, Redis, SQL), or set recordOutcomes: false.',
    );
  }
  return {
    guard,
    principalOf: createPrincipalPolicy(principal ?? defaultPrincipal, guardOptions.unauthenticated),
    missingCapability: oneOf('missingCapability', missingCapability, ['fail', 'degrade'], 'fail'),
    presupplied: oneOf('presupplied', presupplied, ['ignore', 'accept'], 'ignore'),
    maxAnswerChars,
    recordOutcomes: recordOutcomes && records,
    events,
  };
}

/** `onEvent`, then `onReject` for a `state.rejected` event: each called apart, so that one's throw never skips the other. */
function eventHook(
  onEvent: ((event: MrtrEvent) => void) | undefined,
  onReject: ((event: RejectEvent) => void) | undefined,
): (event: MrtrEvent) => void {
  const event = onEvent === undefined ? undefined : safeEmitter(onEvent);
  const reject = onReject === undefined ? undefined : safeEmitter(onReject);
  return (e) => {
    event?.(e);
    if (reject !== undefined && e.type === 'state.rejected') reject({ code: e.code, method: e.method, target: e.target });
  };
}

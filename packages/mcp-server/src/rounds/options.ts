import type { ServerContext } from '@modelcontextprotocol/server';
import type { StateGuardOptions } from '@mrtr/core';
import type { Principal } from '@mrtr/core/adapter';
import type { EventSink, MrtrEvent } from '@mrtr/core/events';

/** What to do with a question the client did not declare a capability for in this request. */
export type MissingCapabilityPolicy = 'fail' | 'degrade';

/**
 * Answers in `inputResponses` to a question this server has not sent yet in the flow: `'ignore'` asks the
 * question (the client must see it); `'accept'` takes a valid pre-supplied answer (the spec allows it;
 * only for questions whose answer needs no human confirmation).
 */
export type PresuppliedPolicy = 'ignore' | 'accept';

/** The validated options the adapter runs on. */
export interface ResolvedOptions {
  guard: StateGuardOptions;
  /**
   * The principal policy (the `principal` option, then `unauthenticated`; see `identity.ts`): who a request is, for
   * the guard (resolved, never applied again) and for the tasks alike, so that a task is bound to exactly the
   * principal a round is.
   */
  principalOf: (ctx: ServerContext) => Principal;
  missingCapability: MissingCapabilityPolicy;
  presupplied: PresuppliedPolicy;
  maxAnswerChars: number;
  /** Whether a round is admitted with `guard.admit` (its outcome recorded for identical retries). */
  recordOutcomes: boolean;
  /** The one event path (`onEvent`, and `onReject` as a filter on it), shared with the guard; none without either hook. */
  events: EventSink<MrtrEvent> | undefined;
}

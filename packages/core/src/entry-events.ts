/**
 * `@mrtr/core/events`: the events the guard (and an adapter on top of it) reports to `onEvent`, and for an
 * integration that emits its own: `createEventSink` (one emitter and flow tagger shared with the guard),
 * `createFlowTagger` (the events' short flow id) and `safeEmitter` (a hook that can never throw into the caller).
 */
export {
  type AnswerEvent,
  createEventSink,
  createFlowTagger,
  type EventBase,
  type EventHook,
  type EventSink,
  type FlowCompletedEvent,
  type FlowStartedEvent,
  type GuardEvent,
  type MrtrEvent,
  type OutcomeDropReason,
  type OutcomeDroppedEvent,
  type RoundUnknownEvent,
  safeEmitter,
  type StateMintedEvent,
  type StateOpenedEvent,
  type StateRejectedEvent,
  type StateRetriedEvent,
  type StoreClockEvent,
  type StoreErrorEvent,
} from './events.js';

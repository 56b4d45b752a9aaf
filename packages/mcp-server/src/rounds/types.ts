import type {
  CallToolResult,
  CreateMessageRequestParams,
  CreateMessageResult,
  InputRequiredResult,
  Root,
} from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import type { InputRequestKind } from '../protocol/capabilities.js';
import type { FormContent, FormSchema } from './answers.js';
import type { TaskStartOptions, TaskWork } from './handoff.js';
import type { MissingCapabilityPolicy, PresuppliedPolicy } from './options.js';
import type { ElicitAnswer, ElicitFormQuestion, ElicitUrlQuestion, UrlAnswer } from './questions.js';

/** Per-question options of `need.elicit`, `elicitUrl`, `sample` and `roots`. */
export interface QuestionOptions {
  /**
   * An answer in this request's `inputResponses` to a question this server has not sent yet in the flow:
   * `'ignore'` asks the question; `'accept'` takes a valid pre-supplied answer.
   * @default the `presupplied` option of `createMrtr` ('ignore')
   */
  presupplied?: PresuppliedPolicy;
}

/** Options of {@link Need.ask}. */
export interface AskOptions {
  /**
   * Questions whose kind the client did not declare in this request's `_meta`: `'fail'` answers `-32021`
   * with `data.requiredCapabilities`; `'degrade'` leaves them out (and still fails when nothing is left to ask).
   * @default the `missingCapability` option of `createMrtr` ('fail')
   */
  missingCapability?: MissingCapabilityPolicy;
}

/**
 * The ask-style API handed to every protected handler. Each `elicit`/`sample`/`roots` call returns the
 * answer when this round's `inputResponses` or an earlier round (carried in the sealed state) supplied a
 * valid one for the same question, and otherwise collects the question and returns `undefined`.
 * Return `need.ask()` (or nothing) to send every collected question in one `InputRequiredResult` with a
 * freshly sealed state.
 *
 * An answer counts only when this server sent exactly that question in an earlier round of the same flow
 * (the question's digest is sealed in the state); a pre-supplied answer to a question not sent yet is
 * ignored unless `presupplied: 'accept'` is set for the question or the server. Each answer is validated (form content against `requestedSchema`: types, enum, required, min/max, lengths, formats;
 * sampling and roots results by shape); an invalid answer counts as missing, so the question is asked
 * again. Keys in `inputResponses` that this handler does not ask for are ignored.
 */
export interface Need {
  /** Round of this call in its flow: 1 without a state, else the presented state's round + 1. */
  readonly round: number;
  /**
   * 0, or for a tool registered with `reclaim: true` (at-least-once), how many earlier runs of this round stopped
   * unrecorded (their instance died mid-round): a fencing token to pass to the effect, so that it can tell this run
   * from an earlier one that may have got through.
   */
  readonly fence: number;
  /**
   * Most states one flow may mint (`maxRounds` of `createMrtr`): `ask()` in round `maxRounds + 1` is refused
   * with `-32602` (`ERR_FLOW_ROUNDS`). A handler that may ask many times (e.g. polling for a page to be
   * completed) finishes with its own clear result once `round > maxRounds` instead.
   */
  readonly maxRounds: number;
  /**
   * Whether the client declared the capability for `kind`: in this request's `_meta` (2026-07-28), or in its
   * session's `initialize` (a 2025-era client on a session). A 2025-era request without a session (stateless HTTP)
   * can be asked nothing: `false` for every kind.
   */
  can(kind: InputRequestKind): boolean;
  /** Form elicitation. `key` must be unique per handler; the same key asked twice must ask the same question. */
  elicit<const S extends FormSchema>(
    key: string,
    question: ElicitFormQuestion<S>,
    options?: QuestionOptions,
  ): ElicitAnswer<FormContent<S>> | undefined;
  /** URL elicitation (needs `elicitation.url`). */
  elicitUrl(key: string, question: ElicitUrlQuestion, options?: QuestionOptions): UrlAnswer | undefined;
  /** Sampling (`sampling/createMessage`; with `tools`/`toolChoice` it needs `sampling.tools`). */
  sample(key: string, params: CreateMessageRequestParams, options?: QuestionOptions): CreateMessageResult | undefined;
  /** The client's roots (`roots/list`); only `file://` URIs are accepted. */
  roots(key: string, options?: QuestionOptions): Root[] | undefined;
  /** Drops the answer to `key` (e.g. after `decline`) and asks its question again; call after asking it. */
  again(key: string): void;
  /** Keys of the questions collected so far in this round. */
  readonly pending: readonly string[];
  /**
   * The result to return when input is needed: the wrapper replaces it with an `InputRequiredResult`
   * carrying every collected question and a sealed state. With nothing collected it is a state-only
   * result (the client retries at once).
   */
  ask(options?: AskOptions): InputRequiredResult;
  /** JSON that an earlier round passed to `keep` (verified); `undefined` in round 1. */
  readonly kept: JsonValue | undefined;
  /** Carries JSON to the next round inside the sealed state (only if this round ends with `ask`). */
  keep(value: JsonValue): void;
}

/** {@link Need} for tools, with a helper to finish with a clear error result. */
export interface ToolNeed extends Need {
  /** `{ content: [{ type: 'text', text: message }], isError: true }`, e.g. after a `decline`. */
  fail(message: string): CallToolResult;
  /**
   * Ends the protected rounds and turns the call into a task (tasks extension, SEP-2663): return its value.
   * When this is a 2026-07-28 request whose client capabilities declare `io.modelcontextprotocol/tasks`, the client
   * gets a `CreateTaskResult` at once and `work` runs in the background (its result, or error, is read with
   * `tasks/get`; it may ask the kinds in the tool's `taskInput`, and others after `task.can`). Otherwise `work` runs
   * now and its result is the call's result. Only for tools registered with `task: 'optional' | 'required'`.
   */
  task(work: TaskWork, options?: TaskStartOptions): CallToolResult;
}

import type {
  CallToolResult,
  CreateMessageRequestParams,
  CreateMessageResult,
  GetPromptResult,
  Icon,
  McpServer,
  InputRequiredResult,
  ReadResourceResult,
  RegisteredPrompt,
  RegisteredResource,
  RegisteredResourceTemplate,
  RegisteredTool,
  ResourceMetadata,
  ResourceTemplate,
  Root,
  ScopeChallengeHandler,
  ServerContext,
  StandardSchemaWithJSON,
  ToolAnnotations,
  Variables,
} from '@modelcontextprotocol/server';
import type { Awaitable, JsonValue, StateGuard } from '@mrtr/core';
import type { InputRequestKind } from '@mrtr/core/authoring';
import type { FormContent, FormSchema } from './answers.js';
import type { MissingCapabilityPolicy, PresuppliedPolicy } from './options.js';
import type { TaskStartOptions, TaskWork } from './tasks.js';

/** An answer to a form elicitation. `decline`/`cancel` reach the handler as such. */
export type ElicitAnswer<T> = { action: 'accept'; content: T } | { action: 'decline' } | { action: 'cancel' };
/** An answer to a URL elicitation: `accept` is consent, not completion (spec EL7). */
export interface UrlAnswer {
  action: 'accept' | 'decline' | 'cancel';
}

/** A form elicitation question. */
export interface ElicitFormQuestion<S extends FormSchema> {
  mode?: 'form';
  message: string;
  requestedSchema: S;
}
/** A URL elicitation question (never put credentials or PII in `url`). */
export interface ElicitUrlQuestion {
  message: string;
  url: string;
}

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

/** A protected tool handler. Returning nothing while questions are pending means `need.ask()`. */
export type MrtrToolHandler<Args> = (
  args: Args,
  ctx: ServerContext,
  need: ToolNeed,
) => Awaitable<CallToolResult | InputRequiredResult | undefined>;
/** A protected prompt handler. */
export type MrtrPromptHandler<Args> = (
  args: Args,
  ctx: ServerContext,
  need: Need,
) => Awaitable<GetPromptResult | InputRequiredResult | undefined>;
/** A protected resource handler (`variables` only for templates). The binding target is `uri.href`. */
export type MrtrResourceHandler = (
  uri: URL,
  ctx: ServerContext,
  need: Need,
  variables: Variables | undefined,
) => Awaitable<ReadResourceResult | InputRequiredResult | undefined>;

/** The arguments a handler receives for an input schema (`{}` without one). */
export type ArgsOf<S> = S extends StandardSchemaWithJSON ? StandardSchemaWithJSON.InferOutput<S> : Record<string, never>;

/** The config of `mrtr.registerTool`: the SDK's `registerTool` config. */
export interface ToolConfig<
  I extends StandardSchemaWithJSON | undefined = StandardSchemaWithJSON | undefined,
  O extends StandardSchemaWithJSON | undefined = StandardSchemaWithJSON | undefined,
> {
  title?: string;
  description?: string;
  inputSchema?: I;
  outputSchema?: O;
  annotations?: ToolAnnotations;
  icons?: Icon[];
  scopeChallenge?: ScopeChallengeHandler;
  _meta?: Record<string, unknown>;
  /**
   * Task support (tasks extension): `'optional'` becomes a task only when the request can follow one (a
   * 2026-07-28 request that declares the extension; never a 2025-era one), else it runs synchronously;
   * `'required'` answers `-32021` (with `data.requiredCapabilities.extensions`) to any other request, before the
   * handler runs. Needs `tasks` in `createMrtr`.
   */
  task?: 'optional' | 'required';
  /**
   * The kinds of input the task's work asks (`task.elicit`: `'elicitation.form'`, `task.elicitUrl`:
   * `'elicitation.url'`, `task.sample`: `'sampling'`, or `'sampling.tools'` with `tools`/`toolChoice`,
   * `task.roots`: `'roots'`). Checked before the handler runs, in every round: a request that cannot follow a task,
   * or does not declare one of these, is answered `-32021` naming what is missing (an `'optional'` tool with
   * `taskInput` is then refused like a `'required'` one: its work could not ask). The work may ask another kind
   * only after `task.can(kind)` said `true`; asking one neither listed nor checked is a `TypeError`.
   * @default [] (the work asks nothing, or only after task.can)
   */
  taskInput?: readonly InputRequestKind[];
}
/** The config of `mrtr.registerPrompt`: the SDK's `registerPrompt` config. */
export interface PromptConfig<A extends StandardSchemaWithJSON | undefined = StandardSchemaWithJSON | undefined> {
  title?: string;
  description?: string;
  argsSchema?: A;
  icons?: Icon[];
  scopeChallenge?: ScopeChallengeHandler;
  _meta?: Record<string, unknown>;
}
/** The config of `mrtr.registerResource`: the SDK's resource metadata. */
export type ResourceConfig = ResourceMetadata & { scopeChallenge?: ScopeChallengeHandler };

/** The part of `ServerOptions` to spread into `new McpServer(info, { ...mrtr.serverOptions })`. */
export interface MrtrServerOptions {
  requestState: {
    /** Early, opaque rejection (size cap, non-token characters) before dispatch; full checks run in the round. */
    verify: (state: string, ctx: ServerContext) => undefined;
  };
}

/** Returned by {@link createMrtr}. */
export interface Mrtr {
  /** Spread into the `McpServer` options. */
  readonly serverOptions: MrtrServerOptions;
  /** The underlying state guard (mint/open with every check), for custom handlers. */
  readonly guard: StateGuard;
  /**
   * Registers a protected tool on `server` (through the SDK's `registerTool`). Every state is bound to
   * `name`, so a state of another tool, or of the same handler registered under another name, is rejected.
   */
  registerTool<I extends StandardSchemaWithJSON | undefined = undefined, O extends StandardSchemaWithJSON | undefined = undefined>(
    server: McpServer,
    name: string,
    config: ToolConfig<I, O>,
    handler: MrtrToolHandler<ArgsOf<I>>,
  ): RegisteredTool;
  /** Registers a protected prompt on `server`; states are bound to `name`. */
  registerPrompt<A extends StandardSchemaWithJSON | undefined = undefined>(
    server: McpServer,
    name: string,
    config: PromptConfig<A>,
    handler: MrtrPromptHandler<ArgsOf<A>>,
  ): RegisteredPrompt;
  /** Registers a protected resource (fixed URI) on `server`; states are bound to the URI read. */
  registerResource(server: McpServer, name: string, uri: string, config: ResourceConfig, handler: MrtrResourceHandler): RegisteredResource;
  /** Registers a protected resource template on `server`; states are bound to each URI read. */
  registerResource(
    server: McpServer,
    name: string,
    template: ResourceTemplate,
    config: ResourceConfig,
    handler: MrtrResourceHandler,
  ): RegisteredResourceTemplate;
}

import type {
  CallToolResult,
  GetPromptResult,
  InputRequiredResult,
  McpServer,
  ReadResourceResult,
  RegisteredPrompt,
  RegisteredResource,
  RegisteredResourceTemplate,
  RegisteredTool,
  ResourceTemplate,
  ServerContext,
  StandardSchemaWithJSON,
  Variables,
} from '@modelcontextprotocol/server';
import type { Awaitable, StateGuard } from '@mrtr/core';
import type { InputRequestKind } from './protocol/capabilities.js';
import type { Need, ToolNeed } from './rounds/types.js';

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

/**
 * The config parameter of an SDK registration method's current form: its last overload but one (the last is the
 * deprecated raw-shape form), with its schema type parameters at their constraints.
 */
type SdkConfig<Register> = Register extends { (...current: infer Current): unknown; (...deprecated: infer _): unknown }
  ? Current[1]
  : never;

/** The config of `mrtr.registerTool`: the SDK's `registerTool` config, and task support. */
export interface ToolConfig<
  I extends StandardSchemaWithJSON | undefined = StandardSchemaWithJSON | undefined,
  O extends StandardSchemaWithJSON | undefined = StandardSchemaWithJSON | undefined,
> extends Omit<SdkConfig<McpServer['registerTool']>, 'inputSchema' | 'outputSchema'> {
  inputSchema?: I;
  outputSchema?: O;
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
  /**
   * At-least-once instead of at-most-once for this tool's rounds (with `recordOutcomes` and a store that declares
   * `leases`): when the instance running a round dies before its result is recorded, an identical retry runs the round
   * again — with `need.fence` one higher — instead of being told "outcome unknown". Only for an effect that is safe to
   * run twice or that takes the fence downstream (an idempotency key, a fencing token). @default false
   */
  reclaim?: boolean;
  /**
   * Idempotency keys for this tool's first-round calls (a write that asks nothing must not write twice when a client
   * retries after a timeout). A call carrying a key — `params._meta["dev.mrtr/idempotency-key"]`, or the
   * `Idempotency-Key` HTTP header when `_meta` has none — is claimed under (principal, tool, key): the first runs; a
   * retry with the same arguments gets the recorded result, marked `_meta["dev.mrtr/replayed"]: true`; one while the
   * first still runs gets "in progress" (`-32600`, `data.reason: 'round_in_progress'`); the same key with other
   * arguments is refused (`-32602`, `onReject`: `ERR_IDEMPOTENCY_KEY_CONFLICT`). Past `ttlMs` the key is free and the
   * call runs again. A call without a key runs as usual; a key sent to a tool without `idempotency` is ignored.
   * Declared to clients in the tool's `_meta["dev.mrtr/idempotency"]` (`{ ttlMs }`). Needs a store that records
   * outcomes (a `TypeError` here otherwise). `true` takes the defaults.
   * @default none (keys ignored)
   */
  idempotency?: true | IdempotencyConfig;
}

/** The settings of {@link ToolConfig.idempotency}. */
export interface IdempotencyConfig {
  /** How long a key is held, ms: from 1 000 to the guard's `ttlMs`. @default the guard's `ttlMs` (600 000) */
  ttlMs?: number;
  /**
   * Record tool errors (`isError: true`) and replay them. Off: a tool error gives the key back and a retry runs the
   * call again — a failed write usually did not happen, and the retry is how it gets done (Stripe and Powertools do
   * the same). Errors thrown (JSON-RPC errors) are never recorded. @default false
   */
  replayErrors?: boolean;
}
/** The config of `mrtr.registerPrompt`: the SDK's `registerPrompt` config. */
export interface PromptConfig<A extends StandardSchemaWithJSON | undefined = StandardSchemaWithJSON | undefined>
  extends Omit<SdkConfig<McpServer['registerPrompt']>, 'argsSchema'> {
  argsSchema?: A;
}
/** The config of `mrtr.registerResource`: the SDK's `registerResource` config (the same for a URI and a template). */
export type ResourceConfig = Parameters<McpServer['registerResource']>[2];

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

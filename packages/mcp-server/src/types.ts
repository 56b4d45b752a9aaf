import type {
  CallToolResult,
  CreateMessageRequestParams,
  CreateMessageResult,
  GetPromptResult,
  InputRequiredResult,
  ReadResourceResult,
  Root,
  ServerContext,
  Variables,
} from '@modelcontextprotocol/server';
import type { InputRequestKind, JsonValue, KeyRing, MrtrErrorCode, ReplayStore, StateCodec, StateGuard } from '@mrtr/core';

/** What `onReject` receives: the real reason behind an opaque wire error (for logs and metrics). */
export interface RejectEvent {
  /** The precise code, e.g. `ERR_STATE_INTEGRITY`, `ERR_STATE_BINDING`, `ERR_STORE_UNAVAILABLE`. */
  code: MrtrErrorCode;
  /** `tools/call`, `prompts/get` or `resources/read`. */
  method: string;
  /** Tool or prompt name, or resource URI; `undefined` when rejected before dispatch (size cap). */
  target: string | undefined;
}

/** What to do with a question the client did not declare a capability for in this request. */
export type MissingCapabilityPolicy = 'fail' | 'degrade';

/** Options of {@link createMrtr}. Validated at construction (labelled `TypeError`/`RangeError`). */
export interface MrtrOptions {
  /** Seals and opens request states (`@mrtr/codec-hmac`, `@mrtr/codec-jwe`, `@mrtr/codec-aead`, ...). */
  codec: StateCodec;
  /** Key ring for the principal tag (use the same ring as the codec). */
  keys: KeyRing;
  /**
   * Replay store: makes each round's state single-use (an older round's state, or a replay of a completed
   * flow, is rejected). Without it a state can be replayed until it expires.
   */
  store?: ReplayStore | undefined;
  /** This server's identity (name or URL); a state minted for another audience is rejected. */
  audience: string;
  /**
   * Reads the authenticated principal of a request.
   * @default `ctx.http?.authInfo?.extra?.sub` (a non-empty string), else `ctx.http?.authInfo?.clientId`
   */
  principal?: ((ctx: ServerContext) => string | undefined) | undefined;
  /**
   * Policy when `principal` yields nothing: `'reject'` answers every protected call with `-32600`
   * ("Authentication required"); `{ principal }` uses one fixed principal (for stdio: `{ principal: 'local' }`).
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
  /** Default for {@link AskOptions.missingCapability}. @default 'fail' */
  missingCapability?: MissingCapabilityPolicy | undefined;
  /** Clock in ms since the epoch (tests). @default Date.now */
  now?: (() => number) | undefined;
  /** Called once for every rejected state and every store fault, with the real code. Must not throw. */
  onReject?: ((event: RejectEvent) => void) | undefined;
}

// ---------------------------------------------------------------- form schemas and typed answers

/** A string field of an elicitation form (`enum`/`oneOf` make it a single-select). */
export interface StringField {
  type: 'string';
  title?: string;
  description?: string;
  minLength?: number;
  maxLength?: number;
  format?: 'email' | 'uri' | 'date' | 'date-time';
  default?: string;
  enum?: readonly string[];
  enumNames?: readonly string[];
  oneOf?: readonly { const: string; title?: string }[];
}
/** A number field (`integer` rejects fractions). */
export interface NumberField {
  type: 'number' | 'integer';
  title?: string;
  description?: string;
  minimum?: number;
  maximum?: number;
  default?: number;
}
export interface BooleanField {
  type: 'boolean';
  title?: string;
  description?: string;
  default?: boolean;
}
/** A multi-select field: an array of strings out of `items.enum` / `items.anyOf[].const`. */
export interface MultiSelectField {
  type: 'array';
  title?: string;
  description?: string;
  minItems?: number;
  maxItems?: number;
  items: { type: 'string'; enum: readonly string[] } | { anyOf: readonly { const: string; title?: string }[] };
  default?: readonly string[];
}
export type FormField = StringField | NumberField | BooleanField | MultiSelectField;

/** The flat `requestedSchema` of a form elicitation (spec: no nesting). */
export interface FormSchema {
  $schema?: string;
  type: 'object';
  properties: { readonly [key: string]: FormField };
  required?: readonly string[];
}

/** The value type one field yields. */
export type FieldValue<F> = F extends { type: 'string'; enum: readonly (infer E extends string)[] }
  ? E
  : F extends { type: 'string'; oneOf: readonly { const: infer C extends string }[] }
    ? C
    : F extends { type: 'string' }
      ? string
      : F extends { type: 'number' | 'integer' }
        ? number
        : F extends { type: 'boolean' }
          ? boolean
          : F extends { type: 'array'; items: { enum: readonly (infer E extends string)[] } }
            ? E[]
            : F extends { type: 'array'; items: { anyOf: readonly { const: infer C extends string }[] } }
              ? C[]
              : F extends { type: 'array' }
                ? string[]
                : never;

type RequiredKeys<S extends FormSchema> = S['required'] extends readonly (infer K)[] ? K & keyof S['properties'] : never;
type Simplify<T> = { [K in keyof T]: T[K] } & {};

/** The validated `content` of an accepted form: required fields present, unrequested keys removed. */
export type FormContent<S extends FormSchema> = Simplify<
  { [K in RequiredKeys<S>]: FieldValue<S['properties'][K]> } & {
    [K in Exclude<keyof S['properties'], RequiredKeys<S>>]?: FieldValue<S['properties'][K]>;
  }
>;

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
 * Answers are pinned to a digest of the question: a changed question is asked again. Each answer is
 * validated (form content against `requestedSchema`: types, enum, required, min/max, lengths, formats;
 * sampling and roots results by shape); an invalid answer counts as missing, so the question is asked
 * again. Keys in `inputResponses` that this handler does not ask for are ignored.
 */
export interface Need {
  /** Round of this call in its flow: 1 without a state, else the presented state's round + 1. */
  readonly round: number;
  /**
   * Whether the client declared the capability for `kind` in this request's `_meta`. On a 2025-era
   * connection (legacy shim) capabilities are not visible here and this returns `true`; the SDK's shim
   * then gates with the `initialize`-time capabilities.
   */
  can(kind: InputRequestKind): boolean;
  /** Form elicitation. `key` must be unique per handler; the same key asked twice must ask the same question. */
  elicit<const S extends FormSchema>(key: string, question: ElicitFormQuestion<S>): ElicitAnswer<FormContent<S>> | undefined;
  /** URL elicitation (needs `elicitation.url`). */
  elicitUrl(key: string, question: ElicitUrlQuestion): UrlAnswer | undefined;
  /** Sampling (`sampling/createMessage`; with `tools`/`toolChoice` it needs `sampling.tools`). */
  sample(key: string, params: CreateMessageRequestParams): CreateMessageResult | undefined;
  /** The client's roots (`roots/list`); only `file://` URIs are accepted. */
  roots(key: string): Root[] | undefined;
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
}

type Awaitable<T> = T | Promise<T>;

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

/** What `mrtr.tool` returns: fits `registerTool` with or without an `inputSchema`. */
export interface ProtectedToolCallback<Args> {
  (args: Args, ctx: ServerContext): Promise<CallToolResult | InputRequiredResult>;
  (ctx: ServerContext): Promise<CallToolResult | InputRequiredResult>;
}
/** What `mrtr.prompt` returns: fits `registerPrompt` with or without an `argsSchema`. */
export interface ProtectedPromptCallback<Args> {
  (args: Args, ctx: ServerContext): Promise<GetPromptResult | InputRequiredResult>;
  (ctx: ServerContext): Promise<GetPromptResult | InputRequiredResult>;
}
/** What `mrtr.resource` returns: fits `registerResource` with a URI or a `ResourceTemplate`. */
export interface ProtectedResourceCallback {
  (uri: URL, ctx: ServerContext): Promise<ReadResourceResult | InputRequiredResult>;
  (uri: URL, variables: Variables, ctx: ServerContext): Promise<ReadResourceResult | InputRequiredResult>;
}

/** The part of `ServerOptions` to spread into `new McpServer(info, { ...mrtr.serverOptions })`. */
export interface MrtrServerOptions {
  requestState: {
    /** Early, opaque rejection (size cap, non-token characters) before dispatch; full checks run in the wrapper. */
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
   * Wraps a tool callback. `name` must be the name the tool is registered under: it is bound into every
   * state, so another tool's state is rejected.
   */
  tool<Args = Record<string, unknown>>(name: string, handler: MrtrToolHandler<Args>): ProtectedToolCallback<Args>;
  /** Wraps a prompt callback; `name` must be the registered prompt name. */
  prompt<Args = Record<string, string>>(name: string, handler: MrtrPromptHandler<Args>): ProtectedPromptCallback<Args>;
  /** Wraps a resource (or resource template) read callback; states are bound to the read URI. */
  resource(handler: MrtrResourceHandler): ProtectedResourceCallback;
}

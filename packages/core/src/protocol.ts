/**
 * MRTR protocol shapes for MCP 2026-07-28 (SEP-2322). Structural copies of `schema.ts`, so core needs no SDK.
 */

export const PROTOCOL_VERSION = '2026-07-28' as const;

export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

// ---------- elicitation ----------
export interface StringSchema {
  type: 'string';
  title?: string;
  description?: string;
  minLength?: number;
  maxLength?: number;
  format?: 'email' | 'uri' | 'date' | 'date-time';
  default?: string;
  enum?: string[];
  enumNames?: string[];
  oneOf?: { const: string; title?: string }[];
}
export interface NumberSchema {
  type: 'number' | 'integer';
  title?: string;
  description?: string;
  minimum?: number;
  maximum?: number;
  default?: number;
}
export interface BooleanSchema {
  type: 'boolean';
  title?: string;
  description?: string;
  default?: boolean;
}
export interface MultiSelectSchema {
  type: 'array';
  title?: string;
  description?: string;
  minItems?: number;
  maxItems?: number;
  items: { type: 'string'; enum: string[] } | { anyOf: { const: string; title?: string }[] };
  default?: string[];
}
export type PrimitiveSchemaDefinition = StringSchema | NumberSchema | BooleanSchema | MultiSelectSchema;

export interface ElicitRequestedSchema {
  $schema?: string;
  type: 'object';
  properties: { [key: string]: PrimitiveSchemaDefinition };
  required?: string[];
}
export interface ElicitRequestFormParams {
  mode?: 'form';
  message: string;
  requestedSchema: ElicitRequestedSchema;
}
export interface ElicitRequestURLParams {
  mode: 'url';
  message: string;
  url: string;
}
export interface ElicitRequest {
  method: 'elicitation/create';
  params: ElicitRequestFormParams | ElicitRequestURLParams;
}
export type ElicitContentValue = string | number | boolean | string[];
export interface ElicitResult {
  action: 'accept' | 'decline' | 'cancel';
  content?: { [key: string]: ElicitContentValue };
}

// ---------- sampling ----------
export interface TextContent {
  type: 'text';
  text: string;
}
export interface SamplingMessage {
  role: 'user' | 'assistant';
  content: unknown;
}
export interface CreateMessageRequestParams {
  messages: SamplingMessage[];
  maxTokens: number;
  modelPreferences?: {
    hints?: { name?: string }[];
    costPriority?: number;
    speedPriority?: number;
    intelligencePriority?: number;
  };
  systemPrompt?: string;
  includeContext?: 'none' | 'thisServer' | 'allServers';
  temperature?: number;
  stopSequences?: string[];
  metadata?: JsonObject;
  tools?: unknown[];
  toolChoice?: { mode?: 'auto' | 'required' | 'none' };
}
export interface CreateMessageRequest {
  method: 'sampling/createMessage';
  params: CreateMessageRequestParams;
}
export interface CreateMessageResult extends SamplingMessage {
  model: string;
  stopReason?: string;
}

// ---------- roots ----------
export interface ListRootsRequest {
  method: 'roots/list';
  params?: { _meta?: Record<string, unknown> };
}
export interface Root {
  uri: string;
  name?: string;
}
export interface ListRootsResult {
  roots: Root[];
}

// ---------- MRTR ----------
export type InputRequest = ElicitRequest | CreateMessageRequest | ListRootsRequest;
export type InputRequests = { [key: string]: InputRequest };
export type InputResponse = ElicitResult | CreateMessageResult | ListRootsResult;
export type InputResponses = { [key: string]: InputResponse };

export interface InputRequiredResult {
  resultType: 'input_required';
  inputRequests?: InputRequests;
  requestState?: string;
  _meta?: Record<string, unknown>;
}

/** The params a retry adds to `tools/call`, `prompts/get` and `resources/read`. */
export interface InputResponseRequestParams {
  inputResponses?: InputResponses;
  requestState?: string;
}

export interface ClientCapabilities {
  experimental?: Record<string, unknown>;
  roots?: Record<string, unknown>;
  sampling?: { context?: Record<string, unknown>; tools?: Record<string, unknown> };
  elicitation?: { form?: Record<string, unknown>; url?: Record<string, unknown> };
  extensions?: Record<string, unknown>;
  [key: string]: unknown;
}

/** The three methods that may answer `input_required`. */
export const MRTR_METHODS: readonly ['tools/call', 'prompts/get', 'resources/read'] = [
  'tools/call',
  'prompts/get',
  'resources/read',
];
export type MrtrMethod = (typeof MRTR_METHODS)[number];

/** True only for `tools/call`, `prompts/get` and `resources/read`: no other request may return `input_required`. */
export function canReturnInputRequired(method: string): method is MrtrMethod {
  return method === 'tools/call' || method === 'prompts/get' || method === 'resources/read';
}

export interface InputRequiredSpec {
  inputRequests?: InputRequests | undefined;
  requestState?: string | undefined;
}

/**
 * Builds an `InputRequiredResult`. An empty `inputRequests` map is dropped (never emitted);
 * a result with neither requests nor state is refused with a `TypeError`.
 */
export function inputRequired(spec: InputRequiredSpec): InputRequiredResult {
  if (spec === null || typeof spec !== 'object') {
    throw new TypeError('inputRequired: spec must be an object');
  }
  const { inputRequests, requestState } = spec;
  if (requestState !== undefined && (typeof requestState !== 'string' || requestState.length === 0)) {
    throw new TypeError('inputRequired: requestState must be a non-empty string');
  }
  let hasRequests = false;
  if (inputRequests !== undefined) {
    if (inputRequests === null || typeof inputRequests !== 'object' || Array.isArray(inputRequests)) {
      throw new TypeError('inputRequired: inputRequests must be an object map');
    }
    for (const [key, request] of Object.entries(inputRequests)) {
      if (!isInputRequest(request)) {
        throw new TypeError(`inputRequired: inputRequests[${JSON.stringify(key)}] is not an input request`);
      }
      hasRequests = true;
    }
  }
  if (!hasRequests && requestState === undefined) {
    throw new TypeError('inputRequired: needs at least one input request or a requestState');
  }
  const result: InputRequiredResult = { resultType: 'input_required' };
  if (hasRequests) result.inputRequests = inputRequests as InputRequests;
  if (requestState !== undefined) result.requestState = requestState;
  return result;
}

/** True for a value shaped like an embedded MRTR request (`{method, params}`, no `jsonrpc`/`id`). */
export function isInputRequest(value: unknown): value is InputRequest {
  if (value === null || typeof value !== 'object') return false;
  const { method, params } = value as { method?: unknown; params?: unknown };
  if (method === 'roots/list') return params === undefined || (params !== null && typeof params === 'object');
  if (method !== 'elicitation/create' && method !== 'sampling/createMessage') return false;
  return params !== null && typeof params === 'object';
}

export function isInputRequiredResult(value: unknown): value is InputRequiredResult {
  return (
    value !== null &&
    typeof value === 'object' &&
    (value as { resultType?: unknown }).resultType === 'input_required'
  );
}

/** Kind of an answer in `inputResponses`, told apart by shape as the spec says. */
export type InputResponseKind = 'elicit' | 'sampling' | 'roots';

export function inputResponseKind(value: unknown): InputResponseKind | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if (v.action === 'accept' || v.action === 'decline' || v.action === 'cancel') return 'elicit';
  if (Array.isArray(v.roots)) return 'roots';
  if ((v.role === 'user' || v.role === 'assistant') && 'content' in v) return 'sampling';
  return undefined;
}

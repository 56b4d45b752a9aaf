// The demo's flows as a client sees them: shared by the bundled client (Node, src/client.ts) and the playground
// page (browser, src/playground/). No Node or DOM API here: only what both have (TextEncoder, atob, JSON).
import type { Client } from '@modelcontextprotocol/client';

/** The protocol revision the clients pin (`versionNegotiation: { mode: { pin } }`). */
export const PROTOCOL_VERSION = '2026-07-28';

export type Json = Record<string, unknown>;

/** What the playground page learns about this server (GET /playground.json): nothing secret. */
export interface PlaygroundConfig {
  codec: string;
  ttlMs: number;
  /** The guard's clock-skew tolerance: a state is refused once `exp + skewMs` has passed. */
  skewMs: number;
  auth: 'bearer' | 'anonymous';
  mcpPath: string;
  /** The MCP endpoints by codec: one (`mcpPath`), or three with `--codec all`. */
  endpoints: { codec: string; path: string }[];
}

export type TargetKind = 'tool' | 'prompt' | 'resource';

/** One thing of the demo a client can call: a tool, the prompt or the resource template. */
export interface Target {
  kind: TargetKind;
  /** Tool or prompt name; the URI template for the resource. */
  name: string;
  /** What it asks, for people. */
  summary: string;
  /** Arguments that lead through the whole flow (deploy: to production, so every round is seen). */
  args: Json;
}

export const TARGETS: readonly Target[] = [
  { kind: 'tool', name: 'delete_files', summary: 'a confirmation form (boolean)', args: { paths: ['notes/a.txt', 'notes/b.txt'] } },
  { kind: 'tool', name: 'deploy', summary: 'three forms: enum, boolean, typed name', args: { service: 'web' } },
  {
    kind: 'tool',
    name: 'summarize',
    summary: 'sampling (you stand in for the model)',
    args: { text: 'MRTR lets a server ask mid-request. The state travels sealed. Each state is single-use.' },
  },
  { kind: 'tool', name: 'list_workspace', summary: 'roots (an editable list)', args: {} },
  { kind: 'tool', name: 'connect_account', summary: 'URL elicitation: a page on this server', args: { provider: 'github' } },
  { kind: 'prompt', name: 'incident_report', summary: 'a form: enum, text, boolean, integer, multi-select', args: { service: 'web' } },
  { kind: 'resource', name: 'runbook://{service}', summary: 'a form: enum', args: { service: 'web' } },
];

/** `rollout`: a form, then a task. Only clients that declare the tasks extension can call it (the page, the bundled client). */
export const ROLLOUT_TARGET: Target = {
  kind: 'tool',
  name: 'rollout',
  summary: 'a form, then a task: its status as it runs, an approval midway (production)',
  args: { service: 'web' },
};

export function findTarget(name: string): Target | undefined {
  if (name === ROLLOUT_TARGET.name) return ROLLOUT_TARGET;
  return TARGETS.find((t) => t.name === name || (t.kind === 'resource' && name.startsWith('runbook')));
}

/** `runbook://{service}` with `{ service: 'web' }` → `runbook://web` (the variable URI-encoded). */
export function resourceUri(template: string, args: Json): string {
  return template.replace(/\{(\w+)\}/g, (_m, name: string) => encodeURIComponent(String(args[name] ?? '')));
}

/** What a round sends besides the call itself. */
export interface RoundExtra {
  inputResponses?: Json | undefined;
  requestState?: string | undefined;
  /** `params._meta` of the request (the playground's idempotency key on a first round). */
  meta?: Json | undefined;
}

/** The JSON-RPC method and params of one round of `target` with `args`. */
export function requestOf(target: Target, args: Json, extra: RoundExtra = {}): { method: string; params: Json } {
  const more: Json = {};
  if (extra.inputResponses !== undefined) more.inputResponses = extra.inputResponses;
  if (extra.requestState !== undefined) more.requestState = extra.requestState;
  if (extra.meta !== undefined) more._meta = extra.meta;
  switch (target.kind) {
    case 'tool':
      return { method: 'tools/call', params: { name: target.name, arguments: args, ...more } };
    case 'prompt':
      return { method: 'prompts/get', params: { name: target.name, arguments: args, ...more } };
    case 'resource':
      return { method: 'resources/read', params: { uri: resourceUri(target.name, args), ...more } };
  }
}

/** One round through the official client in manual mode: the complete or the `input_required` result. */
export async function sendRound(client: Client, target: Target, args: Json, extra: RoundExtra = {}): Promise<Json> {
  const request = requestOf(target, args, extra);
  return (await client.request(request as never, { allowInputRequired: true })) as Json;
}

/** The JSON-RPC messages of an MCP HTTP response body: one JSON object, or the `data:` lines of an SSE stream. */
export function parseMessages(text: string): Json[] {
  const trimmed = text.trim();
  const parse = (data: string): Json[] => {
    try {
      const value: unknown = JSON.parse(data);
      return value !== null && typeof value === 'object' && !Array.isArray(value) ? [value as Json] : [];
    } catch {
      return [];
    }
  };
  if (trimmed.startsWith('{')) return parse(trimmed);
  return trimmed
    .split(/\r?\n/)
    .filter((line) => line.startsWith('data:'))
    .flatMap((line) => parse(line.slice(5).trim()));
}

/** Who sends a request by hand: the capabilities it declares (the tasks extension among them) and its client info. */
export interface WireClient {
  capabilities: Json;
  clientInfo: Json;
}

/**
 * The headers and body of a 2026-07-28 request sent without the SDK client (which cannot follow a task): the
 * `_meta` envelope, and `Mcp-Name` = the tool name for `tools/call`, the task id for `tasks/*`.
 */
export function wireRequest(
  id: string | number,
  method: string,
  params: Json,
  client: WireClient,
): { headers: Record<string, string>; body: string } {
  const name = method === 'tools/call' ? params.name : params.taskId;
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': PROTOCOL_VERSION,
    'mcp-method': method,
    ...(typeof name === 'string' && { 'mcp-name': name }),
  };
  const meta = {
    'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
    'io.modelcontextprotocol/clientCapabilities': client.capabilities,
    'io.modelcontextprotocol/clientInfo': client.clientInfo,
  };
  return { headers, body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } }) };
}

/** The capabilities both clients declare: every kind of question the demo asks. */
export const CLIENT_CAPABILITIES = { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} } as const;

/** UTF-8 bytes of a string. */
export const byteLength = (text: string): number => new TextEncoder().encode(text).length;

function base64urlText(segment: string): string {
  const b64 = segment.replace(/-/g, '+').replace(/_/g, '/');
  const binary = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

function jsonSegment(segment: string | undefined): Json | undefined {
  if (segment === undefined || !/^[A-Za-z0-9_-]{1,16384}$/.test(segment)) return undefined;
  try {
    const value: unknown = JSON.parse(base64urlText(segment));
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Json) : undefined;
  } catch {
    return undefined;
  }
}

/** What a client can tell from a `requestState` without any key. */
export interface TokenView {
  codec: 'hmac' | 'jwe' | 'aead' | 'unknown';
  kid: string | undefined;
  bytes: number;
  /** Whether the client can read what the state carries. */
  readable: boolean;
  /** The HMAC codec's claims (integrity only: readable by anyone who holds the token). */
  claims?: Json;
  /** The JWE protected header (readable; the payload is not). */
  header?: Json;
}

/**
 * Reads a token's public parts: `m1.<kid>.<claims>.<mac>` (HMAC), `x1.<kid>.<sealed>` (AEAD) or a compact
 * JWE (`<header>.<key>.<iv>.<ciphertext>.<tag>`). Nothing here is verified: this is the client's view.
 */
export function describeToken(token: string): TokenView {
  const bytes = byteLength(token);
  const parts = token.split('.');
  if (parts[0] === 'm1' && parts.length === 4) {
    const claims = jsonSegment(parts[2]);
    return { codec: 'hmac', kid: parts[1], bytes, readable: claims !== undefined, ...(claims !== undefined && { claims }) };
  }
  if (parts[0] === 'x1' && parts.length === 3) return { codec: 'aead', kid: parts[1], bytes, readable: false };
  if (parts.length === 5) {
    const header = jsonSegment(parts[0]);
    if (header !== undefined) {
      const kid = typeof header.kid === 'string' ? header.kid : undefined;
      return { codec: 'jwe', kid, bytes, readable: false, header };
    }
  }
  return { codec: 'unknown', kid: undefined, bytes, readable: false };
}

/** `"environment" (form: environment)`, `"summary" (sampling)`, … for a timeline line. */
export function describeQuestion(key: string, request: Json): string {
  const params = (request.params ?? {}) as Json;
  if (request.method === 'sampling/createMessage') return `${key} (sampling)`;
  if (request.method === 'roots/list') return `${key} (roots)`;
  if (params.mode === 'url') return `${key} (URL)`;
  const fields = Object.keys(((params.requestedSchema as Json | undefined)?.properties ?? {}) as Json);
  return `${key} (form: ${fields.join(', ')})`;
}

/** The enum values of a form field (`enum`, or `oneOf` of `const`s). */
export function optionsOf(schema: Json): unknown[] | undefined {
  const oneOf = schema.oneOf as Json[] | undefined;
  if (Array.isArray(oneOf)) return oneOf.map((o) => o.const);
  return Array.isArray(schema.enum) ? (schema.enum as unknown[]) : undefined;
}

/**
 * An answer that leads the flow on: the last enum option (production for deploy), `true` for booleans, the
 * call's own argument for a field of the same name (deploy's typed service name), a stand-in model reply,
 * one root. URL questions are answered by the caller (the page must be completed first).
 */
export function scriptedAnswer(request: Json, args: Json): Json {
  const params = (request.params ?? {}) as Json;
  if (request.method === 'sampling/createMessage') {
    return { role: 'assistant', content: { type: 'text', text: 'MRTR keeps mid-request questions safe.' }, model: 'mrtr-demo-client' };
  }
  if (request.method === 'roots/list') return { roots: [{ uri: 'file:///work/demo', name: 'demo' }] };
  if (params.mode === 'url') return { action: 'accept' };
  const properties = ((params.requestedSchema as Json | undefined)?.properties ?? {}) as Record<string, Json>;
  const content: Json = {};
  for (const [field, schema] of Object.entries(properties)) {
    const options = optionsOf(schema);
    if (options !== undefined) content[field] = options.at(-1);
    else if (schema.type === 'boolean') content[field] = true;
    else if (schema.type === 'number' || schema.type === 'integer') content[field] = 1;
    else if (schema.type === 'array') content[field] = (optionsOf((schema.items ?? {}) as Json) ?? []).slice(0, 1);
    else content[field] = typeof args[field] === 'string' ? args[field] : 'Checkout errors for some users.';
  }
  return { action: 'accept', content };
}

/** The text of a complete result of any of the three methods (content blocks, prompt messages, contents). */
export function resultText(result: Json): string {
  const blocks = (result.content ?? []) as { text?: string }[];
  const messages = ((result.messages ?? []) as { content?: { text?: string } }[]).map((m) => m.content ?? {});
  const contents = (result.contents ?? []) as { text?: string }[];
  return [...blocks, ...messages, ...contents]
    .map((b) => b.text ?? '')
    .filter((t) => t.length > 0)
    .join('\n');
}

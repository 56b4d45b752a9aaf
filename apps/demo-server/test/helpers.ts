import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema, ResultSchema } from '@modelcontextprotocol/core';
import { spawn } from 'node:child_process';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'vitest';
import * as z from 'zod/v4';

import { CLI, type RunningDemo } from '../scripts/lib.mjs';

export { freshKeys, type RunningDemo, serviceUrl, startDemo } from '../scripts/lib.mjs';

export const PROTOCOL_VERSION = '2026-07-28';

/**
 * `@modelcontextprotocol/core` 2.4.0 exports no `InputRequiredResultSchema`; this is the 2026-07-28
 * `InputRequiredResult` composed from the official exported parts (`ResultSchema` and the three embedded
 * request schemas) plus the rule that at least one of `inputRequests`/`requestState` is present.
 */
export const InputRequiredResultSchema = ResultSchema.extend({
  resultType: z.literal('input_required'),
  inputRequests: z.record(z.string(), z.union([ElicitRequestSchema, CreateMessageRequestSchema, ListRootsRequestSchema])).optional(),
  requestState: z.string().optional(),
}).refine((r) => (r.inputRequests !== undefined && Object.keys(r.inputRequests).length > 0) || r.requestState !== undefined);

export type Json = Record<string, unknown>;

export interface ClientOptions {
  token?: string;
  capabilities?: Json;
  autoFulfill?: boolean;
  onElicit?: (params: Json) => Json | Promise<Json>;
  onSample?: (params: Json) => Json | Promise<Json>;
  roots?: { uri: string; name?: string }[];
}

export interface Connected {
  client: Client;
  /** Every JSON-RPC message the server sent, as on the wire (JSON or SSE bodies). */
  wire: Json[];
  close(): Promise<void>;
}

function parseBody(text: string): Json[] {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) return [JSON.parse(trimmed) as Json];
  const out: Json[] = [];
  for (const line of trimmed.split(/\r?\n/)) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (data.startsWith('{')) out.push(JSON.parse(data) as Json);
  }
  return out;
}

/** The official SDK client over real HTTP to a spawned mrtr-demo, pinned to 2026-07-28. */
export async function connectClient(url: string, options: ClientOptions = {}): Promise<Connected> {
  const wire: Json[] = [];
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: async (input, init) => {
      const headers = new Headers(init?.headers);
      if (options.token !== undefined) headers.set('authorization', `Bearer ${options.token}`);
      const response = await fetch(input, { ...init, headers });
      const text = await response.clone().text();
      if (text.length > 0 && (response.headers.get('content-type') ?? '').match(/json|event-stream/)) wire.push(...parseBody(text));
      return response;
    },
  });
  const client = new Client(
    { name: 'mrtr-demo-e2e', version: '1.0.0' },
    {
      versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
      capabilities: (options.capabilities ?? { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} }) as never,
      inputRequired: { autoFulfill: options.autoFulfill ?? false, maxRounds: 10 },
    },
  );
  const { onElicit, onSample, roots } = options;
  if (onElicit) client.setRequestHandler('elicitation/create', async (request) => (await onElicit(request.params as Json)) as never);
  if (onSample) client.setRequestHandler('sampling/createMessage', async (request) => (await onSample(request.params as Json)) as never);
  if (roots) client.setRequestHandler('roots/list', async () => ({ roots }) as never);
  await client.connect(transport);
  return { client, wire, close: () => client.close() };
}

export interface RoundParams {
  inputResponses?: Json;
  requestState?: string;
}

/** One manual `tools/call` round: the complete or the input_required result. */
export async function callTool(client: Client, name: string, args: Json, extra: RoundParams = {}): Promise<Json> {
  return (await client.request(
    { method: 'tools/call', params: { name, arguments: args, ...extra } as never },
    { allowInputRequired: true },
  )) as Json;
}

export async function getPrompt(client: Client, name: string, args: Record<string, string>, extra: RoundParams = {}): Promise<Json> {
  return (await client.request(
    { method: 'prompts/get', params: { name, arguments: args, ...extra } as never },
    { allowInputRequired: true },
  )) as Json;
}

export async function readResource(client: Client, uri: string, extra: RoundParams = {}): Promise<Json> {
  return (await client.request({ method: 'resources/read', params: { uri, ...extra } as never }, { allowInputRequired: true })) as Json;
}

/** The last result the server sent on the wire. */
export function lastResult(wire: Json[]): Json {
  for (let i = wire.length - 1; i >= 0; i--) {
    const message = wire[i]!;
    if ('result' in message) return message.result as Json;
    if ('error' in message) throw new Error(`last message was an error: ${JSON.stringify(message.error)}`);
  }
  throw new Error('no result on the wire');
}

/** Asserts the promise rejects with a JSON-RPC error and returns it. */
export async function rejection(promise: Promise<unknown>): Promise<ProtocolError> {
  const error = await promise.then(
    (value) => {
      throw new Error(`expected a JSON-RPC error, got ${JSON.stringify(value)}`);
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProtocolError);
  return error as ProtocolError;
}

/** The opaque rejection every bad state gets. */
export async function expectStateRejected(promise: Promise<unknown>): Promise<void> {
  const error = await rejection(promise);
  expect(error.code).toBe(-32602);
  expect(error.message).toContain('Invalid or expired requestState');
  expect((error.data as Json | undefined)?.reason).toBe('invalid_request_state');
}

export const accept = (content: Json) => ({ action: 'accept', content });

/** Changes one character in the middle of a token (keeps it printable and the same length). */
export function tamper(state: string): string {
  const i = Math.floor(state.length / 2);
  const c = state[i] === 'A' ? 'B' : 'A';
  return state.slice(0, i) + c + state.slice(i + 1);
}

export function textOf(result: Json): string {
  const content = result.content as { type: string; text?: string }[] | undefined;
  return (content ?? []).map((block) => block.text ?? '').join('\n');
}

export interface RawResponse {
  status: number;
  headers: Headers;
  body: Json | undefined;
  text: string;
}

export interface RawRpcOptions {
  token?: string;
  headers?: Record<string, string>;
  capabilities?: Json;
}

/** The headers and body of a hand-built 2026-07-28 JSON-RPC POST. */
export function rpcRequest(method: string, params: Json, options: RawRpcOptions = {}): { headers: Record<string, string>; body: string } {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': PROTOCOL_VERSION,
    'mcp-method': method,
    ...(typeof params.name === 'string' ? { 'mcp-name': params.name } : {}),
    ...(typeof params.uri === 'string' ? { 'mcp-name': params.uri } : {}),
    ...(options.token !== undefined ? { authorization: `Bearer ${options.token}` } : {}),
    ...options.headers,
  };
  const body = {
    jsonrpc: '2.0',
    id: Math.floor(Math.random() * 1e9),
    method,
    params: {
      ...params,
      _meta: {
        ...(params._meta as Json | undefined),
        'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
        'io.modelcontextprotocol/clientCapabilities': options.capabilities ?? { elicitation: {} },
        'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1.0.0' },
      },
    },
  };
  return { headers, body: JSON.stringify(body) };
}

/** A hand-built 2026-07-28 JSON-RPC POST (for HTTP-level checks). */
export async function rawRpc(url: string, method: string, params: Json, options: RawRpcOptions = {}): Promise<RawResponse> {
  const response = await fetch(url, { method: 'POST', ...rpcRequest(method, params, options) });
  const text = await response.text();
  const messages = text.length > 0 && /json|event-stream/.test(response.headers.get('content-type') ?? '') ? parseBody(text) : [];
  return { status: response.status, headers: response.headers, body: messages[messages.length - 1], text };
}

export interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs mrtr-demo to completion (for the cases that must exit by themselves). */
export function runCli(args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 15_000): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`mrtr-demo ${args.join(' ')} did not exit within ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `result` as a replay answers it (an identical retry, a keyed retry): the same, marked `_meta["dev.mrtr/replayed"]` (issue 42). */
export function replayed(result: Json): Json {
  return { ...result, _meta: { ...(result._meta as Json | undefined), 'dev.mrtr/replayed': true } };
}

export interface DropProxy {
  url: URL;
  /** Tool-call responses dropped, and those the upstream marked as replayed. */
  stats: { toolCalls: number; dropped: number; replayed: number };
  close(): Promise<void>;
}

/**
 * An HTTP proxy on 127.0.0.1 that sends each request to the next upstream in turn and reads the whole answer; every
 * `dropEvery`th answer to a `tools/call` is then lost: the client's socket is destroyed after the upstream answered,
 * so the call ran and its response never arrives (issue 42).
 */
export async function dropProxy(upstreams: readonly URL[], dropEvery: number): Promise<DropProxy> {
  const stats = { toolCalls: 0, dropped: 0, replayed: 0 };
  let next = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const upstream = upstreams[next++ % upstreams.length]!;
      const target = new URL(req.url ?? '/', upstream);
      const forward = httpRequest(target, { method: req.method, headers: { ...req.headers, host: target.host } }, (answer) => {
        const parts: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => parts.push(chunk));
        answer.on('end', () => {
          const text = Buffer.concat(parts);
          if (body.includes('"method":"tools/call"')) {
            if (text.includes('"dev.mrtr/replayed":true')) stats.replayed++;
            if (++stats.toolCalls % dropEvery === 0) {
              stats.dropped++;
              req.socket.destroy();
              return;
            }
          }
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          res.end(text);
        });
      });
      forward.on('error', () => req.socket.destroy());
      forward.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/mcp`),
    stats,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** `mrtr_demo_effects_total{tool}` of one instance, from its /metrics (with `token` when it runs with tokens). */
export async function effects(demo: RunningDemo, tool: string, token?: string): Promise<number> {
  const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
  const text = await (await fetch(new URL('/metrics', demo.url), { headers })).text();
  const line = text.split('\n').find((l) => l.startsWith(`mrtr_demo_effects_total{tool="${tool}",`));
  expect(line, `no mrtr_demo_effects_total series for ${tool}`).toBeDefined();
  return Number(line!.slice(line!.lastIndexOf(' ') + 1));
}

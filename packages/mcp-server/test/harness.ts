import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type AuthInfo, createMcpHandler, McpServer, ResourceTemplate } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { type CodecFactory, KeyRing, type ReplayStore, type StateCodec } from '@mrtr/core';
import { expect } from 'vitest';
import * as z from 'zod/v4';
import { createMrtr, type Mrtr, type MrtrEvent, type MrtrOptions, type RejectEvent } from '../src/index.js';

export const AUDIENCE = 'https://files.test';

export interface Clock {
  now(): number;
  advance(ms: number): void;
}
export function fakeClock(start = Date.now()): Clock {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

export interface Setup extends Partial<Omit<MrtrOptions, 'codec' | 'keys' | 'onReject'>> {
  /** Record events (the default: every suite also exercises the event-wrapped guard); `false` leaves the guard bare. */
  events?: boolean;
  codec?: CodecFactory | StateCodec;
  keys?: KeyRing;
  store?: ReplayStore;
}

export interface Fixture {
  mrtr: Mrtr;
  keys: KeyRing;
  rejects: RejectEvent[];
  /** Every `onEvent` event, in order. */
  events: MrtrEvent[];
  /** Side effects the tools performed (a test checks a rejected call did nothing). */
  effects: string[];
  buildServer(): McpServer;
}

const confirmSchema = {
  type: 'object',
  properties: { ok: { type: 'boolean', title: 'Really?' } },
  required: ['ok'],
} as const;

/** A server with the tools, prompt and resource the end-to-end tests use. */
export function fixture(setup: Setup = {}): Fixture {
  const keys = setup.keys ?? KeyRing.generate();
  const codec = setup.codec ?? createHmacCodec;
  const rejects: RejectEvent[] = [];
  const effects: string[] = [];
  const events: MrtrEvent[] = [];
  const { keys: _k, codec: _c, events: record, onEvent, ...rest } = setup;
  const mrtr = createMrtr({
    ...rest,
    codec,
    keys,
    audience: setup.audience ?? AUDIENCE,
    onReject: (e) => rejects.push(e),
    ...(record !== false && {
      onEvent: (e: MrtrEvent) => {
        events.push(e);
        return onEvent?.(e);
      },
    }),
  });

  const buildServer = (): McpServer => {
    const server = new McpServer({ name: 'mrtr-test', version: '1.0.0' }, { ...mrtr.serverOptions });
    mrtr.registerTool(
      server,
      'delete_files',
      { description: 'Deletes files after confirmation', inputSchema: z.object({ path: z.string() }) },
      async ({ path }, _ctx, need) => {
        const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
        if (!confirm) return need.ask();
        if (confirm.action !== 'accept') return need.fail(`Cancelled: ${confirm.action}`);
        if (!confirm.content.ok) return { content: [{ type: 'text', text: `Kept ${path}` }] };
        effects.push(`deleted ${path}`);
        return { content: [{ type: 'text', text: `Deleted ${path}` }] };
      },
    );
    // Carries its argument to the next round with `keep` (so a codec that refuses the text fails the seal).
    mrtr.registerTool(server, 'keep_text', { inputSchema: z.object({ text: z.string() }) }, async ({ text }, _ctx, need) => {
      need.keep(text);
      const note = need.elicit('note', {
        message: 'Note?',
        requestedSchema: { type: 'object', properties: { note: { type: 'string' } }, required: ['note'] },
      });
      if (!note) return need.ask();
      return { content: [{ type: 'text', text: `${text}: ${note.action === 'accept' ? note.content.note : note.action}` }] };
    });
    mrtr.registerTool(
      server,
      'archive_files',
      { description: 'Same question, other tool', inputSchema: z.object({ path: z.string() }) },
      async ({ path }, _ctx, need) => {
        const confirm = need.elicit('confirm', { message: `Delete ${path}?`, requestedSchema: confirmSchema });
        if (!confirm) return need.ask();
        effects.push(`archived ${path}`);
        return { content: [{ type: 'text', text: `Archived ${path}` }] };
      },
    );
    // SEP-2322's two-round example: round 2 depends on round 1's answer, which only the state carries.
    mrtr.registerTool(server, 'resolve_item', { inputSchema: z.object({ id: z.number() }) }, async ({ id }, _ctx, need) => {
      const resolution = need.elicit('resolution', {
        message: `Resolution of #${id}?`,
        requestedSchema: {
          type: 'object',
          properties: { resolution: { type: 'string', enum: ['Fixed', 'Duplicate', 'Won\u2019t fix'] } },
          required: ['resolution'],
        },
      });
      if (!resolution) return need.ask();
      if (resolution.action !== 'accept') return need.fail('Cancelled');
      let text = `#${id} resolved as ${resolution.content.resolution}`;
      if (resolution.content.resolution === 'Duplicate') {
        const dup = need.elicit('duplicate_of', {
          message: 'Duplicate of which item?',
          requestedSchema: {
            type: 'object',
            properties: { duplicateOf: { type: 'integer', minimum: 1 } },
            required: ['duplicateOf'],
          },
        });
        if (!dup) return need.ask();
        if (dup.action !== 'accept') return need.fail('Cancelled');
        text += ` of #${dup.content.duplicateOf}`;
      }
      effects.push(text);
      return { content: [{ type: 'text', text }] };
    });
    // One new question per round, `rounds` times (flow limits); with `stopAtLimit`, ends with its own error
    // once the flow can mint no more states.
    mrtr.registerTool(
      server,
      'steps',
      { inputSchema: z.object({ rounds: z.number().int(), stopAtLimit: z.boolean().optional() }) },
      async ({ rounds, stopAtLimit }, _ctx, need) => {
        for (let i = 1; i <= rounds; i++) {
          const answer = need.elicit(`step${i}`, {
            message: `Step ${i}?`,
            requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
          });
          if (!answer && stopAtLimit && need.round > need.maxRounds) return need.fail(`out of rounds in round ${need.round}`);
          if (!answer) return need.ask();
        }
        return { content: [{ type: 'text', text: `done in round ${need.round}` }] };
      },
    );
    // Capability-aware: asks by form elicitation when allowed, always samples; degrades.
    mrtr.registerTool(server, 'summarise', { inputSchema: z.object({ topic: z.string() }) }, async ({ topic }, _ctx, need) => {
      const style = need.can('elicitation.form')
        ? need.elicit('style', {
            message: 'Style?',
            requestedSchema: { type: 'object', properties: { style: { type: 'string' } }, required: ['style'] },
          })
        : undefined;
      const sample = need.sample('draft', {
        messages: [{ role: 'user', content: { type: 'text', text: `Summarise ${topic}` } }],
        maxTokens: 100,
      });
      if (!sample || (need.can('elicitation.form') && !style)) return need.ask({ missingCapability: 'degrade' });
      const text = sample.content && !Array.isArray(sample.content) && sample.content.type === 'text' ? sample.content.text : '';
      return { content: [{ type: 'text', text: `${text} (${style?.action === 'accept' ? style.content.style : 'plain'})` }] };
    });
    // Strict variant: a form question for a client that cannot answer it fails with -32021.
    mrtr.registerTool(server, 'strict_confirm', {}, async (_args, _ctx, need) => {
      const confirm = need.elicit('confirm', { message: 'Sure?', requestedSchema: confirmSchema });
      if (!confirm) return need.ask();
      return { content: [{ type: 'text', text: 'confirmed' }] };
    });
    mrtr.registerTool(server, 'connect_account', {}, async (_args, _ctx, need) => {
      const consent = need.elicitUrl('link', { message: 'Link your account', url: 'https://files.test/link' });
      if (!consent) return need.ask();
      return { content: [{ type: 'text', text: `link: ${consent.action}` }] };
    });
    mrtr.registerTool(server, 'workspace', {}, async (_args, _ctx, need) => {
      const roots = need.roots('client_roots');
      if (!roots) return need.ask();
      return { content: [{ type: 'text', text: roots.map((r) => r.uri).join(',') }] };
    });
    mrtr.registerTool(server, 'agent_step', {}, async (_args, _ctx, need) => {
      const answer = need.sample('plan', {
        messages: [{ role: 'user', content: { type: 'text', text: 'plan' } }],
        maxTokens: 10,
        tools: [{ name: 'ls', inputSchema: { type: 'object' } }],
      });
      if (!answer) return need.ask();
      return { content: [{ type: 'text', text: answer.model }] };
    });
    mrtr.registerPrompt(server, 'greeting', { argsSchema: z.object({ tone: z.string() }) }, async ({ tone }, _ctx, need) => {
      const name = need.elicit('user_name', {
        message: 'Your name?',
        requestedSchema: { type: 'object', properties: { name: { type: 'string', minLength: 1 } }, required: ['name'] },
      });
      if (!name) return need.ask();
      if (name.action !== 'accept') throw new Error('declined');
      return { messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${name.content.name}, ${tone}` } }] };
    });
    mrtr.registerResource(
      server,
      'report',
      new ResourceTemplate('report://{id}', { list: undefined }),
      { mimeType: 'text/plain' },
      async (uri, _ctx, need, variables) => {
        const confirm = need.elicit('confirm', { message: `Open ${uri.href}?`, requestedSchema: confirmSchema });
        if (!confirm) return need.ask();
        return { contents: [{ uri: uri.href, text: `report ${String(variables?.id)}` }] };
      },
    );
    return server;
  };
  return { mrtr, keys, rejects, events, effects, buildServer };
}

export interface ConnectOptions {
  /** `authInfo.extra.sub`; `null` = no authInfo at all. */
  sub?: string | null;
  capabilities?: Record<string, unknown>;
  autoFulfill?: boolean;
  onElicit?: (params: Record<string, unknown>) => Record<string, unknown>;
  onSample?: (params: Record<string, unknown>) => Record<string, unknown>;
  maxRounds?: number;
  /** Headers added to every HTTP request of the client (e.g. `Idempotency-Key`). */
  headers?: Record<string, string>;
  /** The handler the client talks to. @default the SDK's `createMcpHandler` over `f.buildServer` (legacy rejected) */
  handler?: { fetch(request: Request, options?: { authInfo?: AuthInfo }): Promise<Response> };
  /** Sees every HTTP answer (status and headers; its body is the client's to read). */
  onResponse?: (response: Response) => void;
}

/** JSON-RPC messages as the server sent them (JSON or SSE bodies), per client. */
export const wireLog = new WeakMap<Client, Record<string, unknown>[]>();

function parseBody(text: string): Record<string, unknown>[] {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) return [JSON.parse(trimmed) as Record<string, unknown>];
  const out: Record<string, unknown>[] = [];
  for (const line of trimmed.split(/\r?\n/)) {
    if (line.startsWith('data:')) {
      const data = line.slice(5).trim();
      if (data.startsWith('{')) out.push(JSON.parse(data) as Record<string, unknown>);
    }
  }
  return out;
}

/** A real SDK client talking to `createMcpHandler` in process (Streamable HTTP, 2026-07-28). */
export async function connect(f: Fixture, options: ConnectOptions = {}): Promise<Client> {
  const handler = options.handler ?? createMcpHandler(() => f.buildServer(), { legacy: 'reject' });
  const sub = options.sub === undefined ? 'alice' : options.sub;
  const authInfo: AuthInfo | undefined =
    sub === null ? undefined : { token: `t-${sub}`, clientId: 'test-client', scopes: [], extra: { sub } };
  const log: Record<string, unknown>[] = [];
  const transport = new StreamableHTTPClientTransport(new URL('http://test.local/mcp'), {
    fetch: async (url, init) => {
      const request = new Request(url, init);
      for (const [name, value] of Object.entries(options.headers ?? {})) request.headers.set(name, value);
      const response = await handler.fetch(request, authInfo === undefined ? {} : { authInfo });
      options.onResponse?.(response);
      const text = await response.clone().text();
      if (text.length > 0) log.push(...parseBody(text));
      return response;
    },
  });
  const client = new Client(
    { name: 'e2e', version: '1.0.0' },
    {
      versionNegotiation: { mode: 'auto' },
      capabilities: (options.capabilities ?? { elicitation: { form: {} } }) as never,
      inputRequired: { autoFulfill: options.autoFulfill ?? false, maxRounds: options.maxRounds ?? 10 },
    },
  );
  if (options.onElicit) {
    const onElicit = options.onElicit;
    client.setRequestHandler('elicitation/create', async (request) => onElicit(request.params as never) as never);
  }
  if (options.onSample) {
    const onSample = options.onSample;
    client.setRequestHandler('sampling/createMessage', async (request) => onSample(request.params as never) as never);
  }
  wireLog.set(client, log);
  await client.connect(transport);
  return client;
}

export interface CallParams {
  inputResponses?: Record<string, unknown>;
  requestState?: string;
}

/** One manual round of `tools/call` (no auto-fulfil): returns the complete or input_required result. */
export async function callTool(client: Client, name: string, args: Record<string, unknown>, extra: CallParams = {}) {
  return (await client.request(
    { method: 'tools/call', params: { name, arguments: args, ...extra } as never },
    { allowInputRequired: true },
  )) as Record<string, unknown>;
}

/** `result` as a replay answers it: the same, marked `_meta["dev.mrtr/replayed"]: true` (issue 42). */
export function replayed(result: Record<string, unknown>): Record<string, unknown> {
  return { ...result, _meta: { ...(result._meta as object), 'dev.mrtr/replayed': true } };
}

/** Asserts the promise rejects with a JSON-RPC error and returns it. */
export async function wireError(promise: Promise<unknown>): Promise<ProtocolError> {
  const error = await promise.then(
    () => {
      throw new Error('expected a JSON-RPC error');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProtocolError);
  return error as ProtocolError;
}

/** A view of `store` whose lease renewals fail: the instance holding it is cut off from the store, its leases lapse. */
export const cutOff = (store: ReplayStore): ReplayStore =>
  new Proxy(store, {
    get: (target, property) =>
      property === 'renew' ? () => Promise.reject(new Error('partitioned')) : Reflect.get(target, property, target),
  });

// The README's table of tools, prompt and resource names each question by the key the server sends and each
// form field by its name in `requestedSchema`: this drives every flow to its end and checks both against the wire.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Connected,
  callTool,
  connectClient,
  freshKeys,
  getPrompt,
  type Json,
  type RunningDemo,
  readResource,
  startDemo,
} from './helpers.js';

const README = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

/** `name` cell → the questions of its "asks" cell: key → field names (empty for sampling, roots and URL). */
function tableRows(): Map<string, Map<string, string[]>> {
  const rows = new Map<string, Map<string, string[]>>();
  for (const line of README.split('\n')) {
    const cells = line.split('|').map((cell) => cell.trim());
    const name = /^(?:tool|prompt|resource template) `([^`(]+)/.exec(cells[1] ?? '')?.[1];
    if (name === undefined) continue;
    const questions = new Map<string, string[]>();
    for (const m of (cells[2] ?? '').matchAll(/(form|sampling|roots|URL elicitation) `(\w+)`(?: \(([^)]*)\))?/g)) {
      questions.set(
        m[2]!,
        [...(m[3] ?? '').matchAll(/`(\w+)`:/g)].map((f) => f[1]!),
      );
    }
    rows.set(name, questions);
  }
  return rows;
}

/** An answer to one input request that leads the flow on (production for `deploy`, so every round is seen). */
function answer(request: Json, args: Json): Json {
  const params = (request.params ?? {}) as Json;
  if (request.method === 'sampling/createMessage') {
    return { role: 'assistant', content: { type: 'text', text: 'A summary.' }, model: 'stand-in' };
  }
  if (request.method === 'roots/list') return { roots: [{ uri: 'file:///work', name: 'work' }] };
  if (params.mode === 'url') return { action: 'accept' };
  const properties = ((params.requestedSchema as Json).properties ?? {}) as Record<string, Json>;
  const content: Json = {};
  for (const [field, schema] of Object.entries(properties)) {
    const options = (schema.oneOf as Json[] | undefined)?.map((o) => o.const) ?? (schema.enum as unknown[] | undefined);
    const items = schema.items as Json | undefined;
    if (options !== undefined) content[field] = options.at(-1);
    else if (schema.type === 'array') content[field] = (items?.enum as unknown[] | undefined)?.slice(0, 2) ?? [];
    else if (schema.type === 'integer' || schema.type === 'number') content[field] = 3;
    else if (schema.type === 'boolean') content[field] = true;
    else content[field] = typeof args[field] === 'string' ? args[field] : 'text';
  }
  return { action: 'accept', content };
}

let demo: RunningDemo;
let client: Connected;

beforeAll(async () => {
  demo = await startDemo([], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '', MRTR_DEMO_CONNECT_WAIT_MS: '1' } });
  client = await connectClient(demo.url);
});

afterAll(async () => {
  await client?.close();
  expect(await demo?.stop()).toBe(0);
});

describe('README table of tools', () => {
  const calls: Record<string, [(extra: Json) => Promise<Json>, Json]> = {
    delete_files: [(extra) => callTool(client.client, 'delete_files', { paths: ['a'] }, extra), { paths: ['a'] }],
    deploy: [(extra) => callTool(client.client, 'deploy', { service: 'web' }, extra), { service: 'web' }],
    send_email: [(extra) => callTool(client.client, 'send_email', { to: 'bob@example.com', subject: 'Hi' }, extra), {}],
    summarize: [(extra) => callTool(client.client, 'summarize', { text: 'One. Two.' }, extra), {}],
    list_workspace: [(extra) => callTool(client.client, 'list_workspace', {}, extra), {}],
    connect_account: [(extra) => callTool(client.client, 'connect_account', { provider: 'github' }, extra), {}],
    incident_report: [(extra) => getPrompt(client.client, 'incident_report', { service: 'web' }, extra), { service: 'web' }],
    'runbook://{service}': [(extra) => readResource(client.client, 'runbook://web', extra), { service: 'web' }],
  };

  it('lists every tool, the prompt and the resource this test drives', () => {
    expect([...tableRows().keys()].sort()).toEqual(Object.keys(calls).sort());
  });

  it.each(Object.keys(calls))('%s: the question keys and form fields are the ones the server sends', async (name) => {
    const [call, args] = calls[name]!;
    const seen = new Map<string, string[]>();
    let result = await call({});
    // Bounded: the longest flow (deploy to production) has 4 rounds; connect_account's page is never completed,
    // so its first round is enough.
    for (let round = 1; result.resultType === 'input_required' && round <= 4; round++) {
      const requests = result.inputRequests as Record<string, Json>;
      const responses: Json = {};
      for (const [key, request] of Object.entries(requests)) {
        const schema = (request.params as Json | undefined)?.requestedSchema as Json | undefined;
        seen.set(key, Object.keys((schema?.properties ?? {}) as Json));
        responses[key] = answer(request, args);
      }
      if (name === 'connect_account') break;
      result = await call({ inputResponses: responses, requestState: result.requestState });
    }
    if (name !== 'connect_account') expect(result.resultType).not.toBe('input_required');
    expect(seen).toEqual(tableRows().get(name));
  });
});

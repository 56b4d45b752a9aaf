// The real-client matrix: every demo flow (TARGETS: five tools, the prompt, the resource template) driven by the
// clients hosts really run, over the demo's real HTTP server and over --stdio, each answering the server's
// questions programmatically. A flow passes when it completes with the expected result, every question was asked
// exactly once and the server logged exactly one completion for it; otherwise it must fail with the documented
// -32021 naming the capability the client lacks. The README's "Clients that work with the demo" table must equal
// what this file observed.
import { readFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { Client as V2Client } from '@modelcontextprotocol/client';
import { StdioClientTransport as V2StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { StreamableHTTPClientTransport as V2HttpClientTransport } from '@modelcontextprotocol/client';
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as V1StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as V1HttpClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport as V1Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI } from '../scripts/lib.mjs';
import {
  CLIENT_CAPABILITIES,
  type Json,
  PROTOCOL_VERSION,
  resourceUri,
  resultText,
  scriptedAnswer,
  TARGETS,
  type Target,
} from '../src/flows.js';
import { freshKeys, type RunningDemo, startDemo } from './helpers.js';

/** Every client call is bounded by this; a flow that takes longer fails the test (no hang). */
const CALL_TIMEOUT_MS = 30_000;
/** Bound on waiting for a server log line or the end of the server's stderr. */
const LOG_WAIT_MS = 15_000;

const TOKEN = 'matrix-token-0123456789abcdef';
const PRINCIPAL = 'matrix';

type ClientKind = 'sdk-1.x' | 'v2-default' | 'v2-pinned';
type TransportKind = 'HTTP' | 'stdio';
type Capability = 'elicitation.form' | 'elicitation.url' | 'sampling' | 'roots';

interface Row {
  /** The README's client cell (without backticks). */
  client: string;
  transport: TransportKind;
  kind: ClientKind;
  /** What the client declares at initialize (2025) or in every request's `_meta` (2026-07-28). */
  capabilities: Json;
  /** The protocol version the client must end up on. */
  version: string;
}

const SDK1 = '@modelcontextprotocol/sdk 1.32.2';
const V2_DEFAULT = '@modelcontextprotocol/client 2.4.0, defaults';
const V2_PINNED = '@modelcontextprotocol/client 2.4.0, pinned to 2026-07-28';
const FULL = CLIENT_CAPABILITIES as unknown as Json;

const ROWS: Row[] = [
  { client: SDK1, transport: 'HTTP', kind: 'sdk-1.x', capabilities: FULL, version: '2025-11-25' },
  { client: V2_DEFAULT, transport: 'HTTP', kind: 'v2-default', capabilities: FULL, version: '2025-11-25' },
  { client: V2_PINNED, transport: 'HTTP', kind: 'v2-pinned', capabilities: FULL, version: PROTOCOL_VERSION },
  { client: SDK1, transport: 'stdio', kind: 'sdk-1.x', capabilities: FULL, version: '2025-11-25' },
  { client: V2_DEFAULT, transport: 'stdio', kind: 'v2-default', capabilities: FULL, version: '2025-11-25' },
  { client: V2_PINNED, transport: 'stdio', kind: 'v2-pinned', capabilities: FULL, version: PROTOCOL_VERSION },
  // A host without a model to lend (no sampling): summarize must fall back, not fail.
  {
    client: `${V2_DEFAULT}, no sampling`,
    transport: 'HTTP',
    kind: 'v2-default',
    capabilities: { elicitation: { form: {}, url: {} }, roots: {} },
    version: '2025-11-25',
  },
  // A host that declares nothing (as the Inspector's --cli mode): every question it cannot be asked is refused
  // with -32021 naming the capability; summarize still falls back.
  { client: `${V2_DEFAULT}, no capabilities`, transport: 'HTTP', kind: 'v2-default', capabilities: {}, version: '2025-11-25' },
  // A host that declares elicitation the pre-2025-11-25 way (`elicitation: {}` means form only): the URL flow
  // must get the documented -32021 naming elicitation.url, and nothing is created for it.
  {
    client: `${SDK1}, elicitation: {} (form only)`,
    transport: 'HTTP',
    kind: 'sdk-1.x',
    capabilities: { elicitation: {}, sampling: {}, roots: {} },
    version: '2025-11-25',
  },
];

/** What each flow asks (in order) and what its complete result says when every question was answered. */
const FLOWS: Record<string, { needs: Capability[]; asks: string[]; result: RegExp; fallback?: RegExp }> = {
  delete_files: {
    needs: ['elicitation.form'],
    asks: ['form(confirm)'],
    result: /^Deleted 2 files \(simulated\):\n- notes\/a\.txt\n- notes\/b\.txt$/,
  },
  deploy: {
    needs: ['elicitation.form'],
    asks: ['form(environment)', 'form(confirm)', 'form(service)'],
    result: /^Deployed web to production \(simulated, release [\w-]+\) after 4 round\(s\)\.$/,
  },
  summarize: {
    needs: ['sampling'],
    asks: ['sampling'],
    result: /^Summary \(by mrtr-demo-client\): MRTR keeps mid-request questions safe\.$/,
    fallback:
      /^Summary \(first sentences; the client did not offer sampling\): MRTR lets a server ask mid-request\. The state travels sealed\.$/,
  },
  list_workspace: { needs: ['roots'], asks: ['roots'], result: /^Workspace roots \(1\):\n- demo: file:\/\/\/work\/demo$/ },
  connect_account: { needs: ['elicitation.url'], asks: ['url'], result: /^Connected your github account \(simulated\)\.$/ },
  incident_report: {
    needs: ['elicitation.form'],
    asks: ['form(severity,impact,resolved,customers,regions)'],
    result:
      /^Write a blameless incident report for web\. Severity: sev3\. Customer impact: Checkout errors for some users\.\.? About 1 customer\(s\) affected\. Regions: eu\. Status: resolved\./,
  },
  'runbook://{service}': { needs: ['elicitation.form'], asks: ['form(environment)'], result: /^# web runbook \(production\)\n/ },
};

function declares(capabilities: Json, capability: Capability): boolean {
  const elicitation = capabilities.elicitation as Json | undefined;
  switch (capability) {
    case 'elicitation.form':
      // An empty elicitation object is form mode (the 2025-06-18 shape).
      return elicitation !== undefined && (Object.keys(elicitation).length === 0 || elicitation.form !== undefined);
    case 'elicitation.url':
      return elicitation?.url !== undefined;
    default:
      return capabilities[capability] !== undefined;
  }
}

/** The cell this file requires for a row and a flow (the README must say the same). */
function expectedCell(row: Row, name: string): string {
  const flow = FLOWS[name]!;
  const missing = flow.needs.filter((need) => !declares(row.capabilities, need));
  if (missing.length === 0) return 'pass';
  if (flow.fallback !== undefined) return 'pass (fallback)';
  return `-32021 ${missing.join(', ')}`;
}

// ---------------------------------------------------------------------------------------------- the server log

/** The demo's JSON round log (`--log json`) as it arrives on the server's stderr. */
class ServerLog {
  text = '';
  rounds: Json[] = [];
  ended = false;
  private pending = '';
  private waiters = new Set<() => void>();

  constructor(stream: Readable) {
    stream.on('data', (chunk: Buffer | string) => {
      const text = chunk.toString();
      this.text += text;
      const lines = (this.pending + text).split('\n');
      this.pending = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.startsWith('{')) continue;
        try {
          const parsed = JSON.parse(line) as Json;
          if (parsed.msg === 'mrtr round') this.rounds.push(parsed);
        } catch {
          // not a log line
        }
      }
      this.wake();
    });
    stream.once('end', () => {
      this.ended = true;
      this.wake();
    });
    stream.once('close', () => {
      this.ended = true;
      this.wake();
    });
  }

  private wake(): void {
    for (const waiter of this.waiters) waiter();
  }

  /** Resolves once `check()` holds (checked on every chunk); fails after `LOG_WAIT_MS`. */
  until(check: () => boolean, what: string): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const waiter = () => {
        if (!check()) return;
        clearTimeout(timer);
        this.waiters.delete(waiter);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`server log: no ${what} within ${LOG_WAIT_MS} ms\n${this.text.slice(-4000)}`));
      }, LOG_WAIT_MS);
      this.waiters.add(waiter);
    });
  }

  count(outcome: string, target?: string): number {
    return this.rounds.filter((r) => r.outcome === outcome && (target === undefined || r.target === target)).length;
  }
}

/** The log's `target` of a flow: the tool or prompt name, or the resource's URI. */
function logTarget(target: Target): string {
  return target.kind === 'resource' ? resourceUri(target.name, target.args) : target.name;
}

// ---------------------------------------------------------------------------------------------- the clients

/** Answers the server's questions like a host whose user says yes to everything. */
class Answers {
  current: Target = TARGETS[0]!;
  asked: string[] = [];
  pages = 0;
  private readonly pageOrigin: () => string;
  private readonly token: string | undefined;
  constructor(pageOrigin: () => string, token: string | undefined) {
    this.pageOrigin = pageOrigin;
    this.token = token;
  }

  async answer(method: string, params: Json): Promise<Json> {
    const request = { method, params };
    if (method === 'sampling/createMessage') this.asked.push('sampling');
    else if (method === 'roots/list') this.asked.push('roots');
    else if (params.mode === 'url') {
      this.asked.push('url');
      await this.completePage(String(params.url));
    } else {
      const fields = Object.keys(((params.requestedSchema as Json | undefined)?.properties ?? {}) as Json);
      this.asked.push(`form(${fields.join(',')})`);
    }
    return scriptedAnswer(request, this.current.args);
  }

  /** The person at the browser completes the connect page (only on the demo's own origin) before accepting. */
  private async completePage(link: string): Promise<void> {
    const url = new URL(link);
    expect(url.origin).toBe(this.pageOrigin());
    const form = new URLSearchParams({ decision: 'connect', ...(this.token !== undefined && { token: this.token }) });
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url.origin },
      body: form.toString(),
      redirect: 'manual',
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
    await response.arrayBuffer();
    expect(response.status).toBe(200);
    this.pages++;
  }
}

interface Driver {
  version(): string | undefined;
  run(target: Target): Promise<Json>;
  close(): Promise<void>;
}

interface Endpoint {
  /** HTTP: the demo's /mcp URL. */
  url?: string;
  /** stdio: how to start the demo. */
  stdio?: { command: string; args: string[]; env: Record<string, string> };
}

/** Rejects after `ms` (and says what hung); the SDK's own timeouts are set as well. */
function bounded<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function connectV2(row: Row, endpoint: Endpoint, answers: Answers): Promise<{ driver: Driver; stderr?: Readable }> {
  const client = new V2Client(
    { name: `matrix-${row.kind}`, version: '1.0.0' },
    {
      ...(row.kind === 'v2-pinned' && { versionNegotiation: { mode: { pin: PROTOCOL_VERSION } } }),
      capabilities: row.capabilities as never,
    },
  );
  if (row.capabilities.elicitation !== undefined) {
    client.setRequestHandler(
      'elicitation/create',
      async (request) => (await answers.answer(request.method, request.params as Json)) as never,
    );
  }
  if (row.capabilities.sampling !== undefined) {
    client.setRequestHandler(
      'sampling/createMessage',
      async (request) => (await answers.answer(request.method, request.params as Json)) as never,
    );
  }
  if (row.capabilities.roots !== undefined) {
    client.setRequestHandler(
      'roots/list',
      async (request) => (await answers.answer(request.method, (request.params ?? {}) as Json)) as never,
    );
  }
  let stderr: Readable | undefined;
  if (endpoint.url !== undefined) {
    await bounded(
      client.connect(new V2HttpClientTransport(new URL(endpoint.url), { requestInit: { headers: { authorization: `Bearer ${TOKEN}` } } })),
      CALL_TIMEOUT_MS,
      'connect',
    );
  } else {
    const transport = new V2StdioClientTransport({ ...endpoint.stdio!, stderr: 'pipe' });
    stderr = transport.stderr as Readable;
    await bounded(client.connect(transport), CALL_TIMEOUT_MS, 'connect');
  }
  const options = { timeout: CALL_TIMEOUT_MS, maxTotalTimeout: CALL_TIMEOUT_MS };
  const driver: Driver = {
    version: () => client.getNegotiatedProtocolVersion(),
    async run(target) {
      switch (target.kind) {
        case 'tool':
          return (await client.callTool({ name: target.name, arguments: target.args }, options)) as Json;
        case 'prompt':
          return (await client.getPrompt({ name: target.name, arguments: target.args as Record<string, string> }, options)) as Json;
        case 'resource':
          return (await client.readResource({ uri: resourceUri(target.name, target.args) }, options)) as Json;
      }
    },
    close: () => client.close(),
  };
  return { driver, ...(stderr !== undefined && { stderr }) };
}

async function connectV1(row: Row, endpoint: Endpoint, answers: Answers): Promise<{ driver: Driver; stderr?: Readable }> {
  const client = new V1Client({ name: 'matrix-sdk-1.x', version: '1.0.0' }, { capabilities: row.capabilities as never });
  if (row.capabilities.elicitation !== undefined) {
    client.setRequestHandler(
      ElicitRequestSchema,
      async (request) => (await answers.answer(request.method, request.params as Json)) as never,
    );
  }
  if (row.capabilities.sampling !== undefined) {
    client.setRequestHandler(
      CreateMessageRequestSchema,
      async (request) => (await answers.answer(request.method, request.params as Json)) as never,
    );
  }
  if (row.capabilities.roots !== undefined) {
    client.setRequestHandler(
      ListRootsRequestSchema,
      async (request) => (await answers.answer(request.method, (request.params ?? {}) as Json)) as never,
    );
  }
  let stderr: Readable | undefined;
  // 1.x hands the negotiated version to its transport (`setProtocolVersion`, when the transport has one).
  let negotiated: string | undefined;
  let transport: V1Transport;
  if (endpoint.url !== undefined) {
    transport = new V1HttpClientTransport(new URL(endpoint.url), { requestInit: { headers: { authorization: `Bearer ${TOKEN}` } } });
  } else {
    const stdio = new V1StdioClientTransport({ ...endpoint.stdio!, stderr: 'pipe' });
    stderr = stdio.stderr as Readable;
    transport = stdio;
  }
  const setVersion = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (version: string) => {
    negotiated = version;
    setVersion?.(version);
  };
  await bounded(client.connect(transport), CALL_TIMEOUT_MS, 'connect');
  const options = { timeout: CALL_TIMEOUT_MS, maxTotalTimeout: CALL_TIMEOUT_MS };
  const driver: Driver = {
    version: () => negotiated,
    async run(target) {
      switch (target.kind) {
        case 'tool':
          return (await client.callTool({ name: target.name, arguments: target.args }, undefined, options)) as Json;
        case 'prompt':
          return (await client.getPrompt({ name: target.name, arguments: target.args as Record<string, string> }, options)) as Json;
        case 'resource':
          return (await client.readResource({ uri: resourceUri(target.name, target.args) }, options)) as Json;
      }
    },
    close: () => client.close(),
  };
  return { driver, ...(stderr !== undefined && { stderr }) };
}

// ---------------------------------------------------------------------------------------------- the matrix

/** `client | transport` → tool → cell, as observed. */
const observed = new Map<string, Map<string, string>>();
const rowKey = (client: string, transport: string) => `${client} | ${transport}`;

const README = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

/** The README's "Clients that work with the demo" table: `client | transport` → column → cell (backticks dropped). */
function readmeMatrix(): { columns: string[]; rows: Map<string, Map<string, string>> } {
  const start = README.indexOf('## Clients that work with the demo');
  expect(start, 'README section "## Clients that work with the demo"').toBeGreaterThanOrEqual(0);
  const end = README.indexOf('\n## ', start + 1);
  const section = README.slice(start, end === -1 ? undefined : end);
  const lines = section.split('\n').filter((line) => line.startsWith('|'));
  const split = (line: string) =>
    line
      .split('|')
      .slice(1, -1)
      .map((cell) => cell.replace(/`/g, '').trim());
  const header = split(lines[0] ?? '');
  const columns = header.slice(2);
  const rows = new Map<string, Map<string, string>>();
  for (const line of lines.slice(2)) {
    const cells = split(line);
    rows.set(rowKey(cells[0]!, cells[1]!), new Map(columns.map((column, i) => [column, cells[i + 2] ?? ''])));
  }
  return { columns, rows };
}

async function runRow(row: Row): Promise<void> {
  const keys = freshKeys();
  let demo: RunningDemo | undefined;
  let endpoint: Endpoint;
  let pageOrigin: () => string;
  let stderr: Readable | undefined;
  if (row.transport === 'HTTP') {
    demo = await startDemo(['--log', 'json'], {
      env: { MRTR_KEYS: keys, MRTR_DEMO_TOKENS: `${PRINCIPAL}:${TOKEN}` },
      timeoutMs: CALL_TIMEOUT_MS,
    });
    endpoint = { url: demo.url };
    pageOrigin = () => demo!.origin;
    stderr = demo.child.stderr!;
  } else {
    endpoint = {
      stdio: {
        command: process.execPath,
        args: [CLI, '--stdio', '--log', 'json'],
        env: { ...(process.env as Record<string, string>), MRTR_KEYS: keys },
      },
    };
    pageOrigin = () => {
      const origin = /connect pages on (http:\/\/\S+)\/connect\//.exec(log?.text ?? '')?.[1];
      if (origin === undefined) throw new Error('the stdio demo did not print its connect page origin');
      return origin;
    };
  }
  const answers = new Answers(() => pageOrigin(), row.transport === 'HTTP' ? TOKEN : undefined);
  let log: ServerLog | undefined = stderr === undefined ? undefined : new ServerLog(stderr);
  const connected = row.kind === 'sdk-1.x' ? await connectV1(row, endpoint, answers) : await connectV2(row, endpoint, answers);
  if (connected.stderr !== undefined) log = new ServerLog(connected.stderr);
  const serverLog = log!;
  const cells = new Map<string, string>();
  observed.set(rowKey(row.client, row.transport), cells);
  const problems: string[] = [];
  try {
    expect(connected.driver.version()).toBe(row.version);
    for (const target of TARGETS) {
      answers.current = target;
      answers.asked = [];
      const flow = FLOWS[target.name]!;
      const want = expectedCell(row, target.name);
      const completedBefore = serverLog.count('completed', logTarget(target));
      const mintedBefore = serverLog.count('minted', logTarget(target));
      let cell: string;
      try {
        const result = await bounded(
          connected.driver.run(target),
          CALL_TIMEOUT_MS + 5_000,
          `${row.client} over ${row.transport}: ${target.name}`,
        );
        const text = resultText(result);
        if (result.isError === true) cell = `isError: ${text}`;
        else if (flow.fallback?.test(text) === true && want === 'pass (fallback)') cell = 'pass (fallback)';
        else if (flow.result.test(text)) cell = 'pass';
        else cell = `unexpected result: ${text}`;
      } catch (error) {
        const e = error as { code?: unknown; message?: string; data?: Json };
        const required = e.data?.requiredCapabilities as Json | undefined;
        const named = required === undefined ? [] : capabilityPaths(required);
        if (e.code === -32021 && named.length > 0) {
          cell = `-32021 ${named.join(', ')}`;
          // The message says which capability and what to do (clients often show only the message).
          for (const path of named) expect(e.message).toContain(path.replace(/\.(\w+)$/, ' ($1)'));
          expect(e.message).toMatch(/did not declare .* capability this request needs/);
        } else {
          cell = `error ${String(e.code ?? '')} ${e.message ?? String(error)}`.trim();
        }
      }
      cells.set(target.name, cell);
      if (cell !== want) {
        problems.push(`${target.name}: expected ${want}, observed ${cell}`);
        continue;
      }
      if (cell === 'pass') {
        // Each question once, then exactly one completion of this flow in the server's log.
        expect(answers.asked, `${target.name}: questions asked`).toEqual(flow.asks);
        await serverLog.until(() => serverLog.count('completed', logTarget(target)) > completedBefore, `completion of ${target.name}`);
        if (target.name === 'connect_account') expect(answers.pages).toBe(1);
      } else {
        // A fallback or a refusal asks nothing and starts no flow (no state minted, no connect link).
        expect(answers.asked, `${target.name}: questions asked`).toEqual([]);
        expect(serverLog.count('minted', logTarget(target))).toBe(mintedBefore);
      }
    }
  } finally {
    await bounded(connected.driver.close(), CALL_TIMEOUT_MS, 'close');
    if (demo !== undefined) expect(await demo.stop()).toBe(0);
  }
  // The server is gone: its whole log is in. Exactly once, and nothing refused on the way.
  await serverLog.until(() => serverLog.ended, 'end of the server log');
  for (const target of TARGETS) {
    const cell = cells.get(target.name);
    expect(serverLog.count('completed', logTarget(target)), `${target.name}: completions`).toBe(cell === 'pass' ? 1 : 0);
  }
  expect(serverLog.count('rejected'), 'rejected states').toBe(0);
  expect(serverLog.count('store_error'), 'store errors').toBe(0);
  expect(problems).toEqual([]);
  // The README says what this row observed.
  const readmeRow = readmeMatrix().rows.get(rowKey(row.client, row.transport));
  expect(readmeRow && Object.fromEntries(readmeRow), `README row for ${row.client} over ${row.transport}`).toEqual(
    Object.fromEntries(cells),
  );
}

/** `{ elicitation: { url: {} } }` → `['elicitation.url']`. */
function capabilityPaths(required: Json, prefix = ''): string[] {
  const out: string[] = [];
  for (const [key, value] of Object.entries(required)) {
    const path = prefix === '' ? key : `${prefix}.${key}`;
    const inner = value !== null && typeof value === 'object' ? Object.keys(value as Json) : [];
    if (inner.length === 0) out.push(path);
    else out.push(...capabilityPaths(value as Json, path));
  }
  return out;
}

describe('real clients × every demo flow', () => {
  it('the README table has one row per client and transport driven here, and one column per flow', () => {
    const { columns, rows } = readmeMatrix();
    expect(columns).toEqual(TARGETS.map((t) => t.name));
    expect([...rows.keys()]).toEqual(ROWS.map((row) => rowKey(row.client, row.transport)));
  });

  it.each(ROWS.map((row) => [`${row.client} over ${row.transport}`, row] as const))(
    '%s',
    async (_name, row) => {
      await runRow(row);
    },
    240_000,
  );
});

afterAll(() => {
  // For the report: the observed matrix, one line per row.
  for (const [key, cells] of observed) console.log(`${key}: ${[...cells].map(([t, c]) => `${t}=${c}`).join('; ')}`);
});

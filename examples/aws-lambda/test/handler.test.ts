import type { AddressInfo } from 'node:net';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { generateKey } from '@mrtr/core';
import { createTable } from '@mrtr/store-dynamodb';
import dynalite from 'dynalite';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { HttpApiEvent, HttpApiResult } from '../src/handler.ts';

// The Lambda handler, imported twice (two execution environments), invoked with API Gateway HTTP API v2 events, on
// DynamoDB played by dynalite (in process: nothing to skip for).
type Handler = (event: HttpApiEvent) => Promise<HttpApiResult>;
const TASKS = 'io.modelcontextprotocol/tasks';
const yes = { confirm: { action: 'accept', content: { ok: true } } };

describe('AWS Lambda handler (DynamoDB store)', () => {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  const tableName = `example-${process.pid}`;
  const instances: Handler[] = [];
  let dynamo: DynamoDBClient;
  let id = 0;

  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const env = { AWS_ENDPOINT_URL_DYNAMODB: endpoint, AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test' };
    dynamo = new DynamoDBClient({ endpoint, region: env.AWS_REGION, credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
    await createTable(dynamo, tableName, { timeToLive: false });
    for (const [name, value] of Object.entries(env)) vi.stubEnv(name, value);
    vi.stubEnv('MRTR_TABLE', tableName);
    vi.stubEnv('MRTR_KEYS', `k1:${generateKey()}`);
    for (let i = 0; i < 2; i++) {
      vi.resetModules();
      instances.push(((await import('../src/handler.ts')) as { handler: Handler }).handler);
    }
    expect(instances[0]).not.toBe(instances[1]);
  });
  afterAll(async () => {
    vi.unstubAllEnvs();
    dynamo?.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  /** An HTTP API v2 event carrying one JSON-RPC request, as API Gateway sends it after its JWT authorizer. */
  const event = (method: string, params: Record<string, unknown>, sub = 'alice', tasks = false): HttpApiEvent => {
    const name = typeof params.name === 'string' ? params.name : typeof params.taskId === 'string' ? params.taskId : undefined;
    const caps: Record<string, unknown> = { elicitation: { form: {} }, ...(tasks && { extensions: { [TASKS]: {} } }) };
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: ++id,
      method,
      params: {
        ...params,
        _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': caps },
      },
    });
    return {
      rawPath: '/mcp',
      rawQueryString: '',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': method,
        ...(name !== undefined && { 'mcp-name': name }),
      },
      body: Buffer.from(body).toString('base64'),
      isBase64Encoded: true,
      requestContext: {
        domainName: 'abc.execute-api.us-east-1.amazonaws.com',
        http: { method: 'POST' },
        authorizer: { jwt: { claims: { sub } } },
      },
    };
  };
  // biome-ignore lint/suspicious/noExplicitAny: wire JSON read field by field in the assertions
  type Wire = { result?: Record<string, any>; error?: { code: number; message: string } };
  const invoke = async (instance: number, e: HttpApiEvent): Promise<Wire> => {
    const result = await instances[instance]!(e);
    expect(result.statusCode).toBe(200);
    return JSON.parse(result.body) as Wire;
  };
  const runs = async (kind: string): Promise<number> => {
    const { Item } = await dynamo.send(
      new GetItemCommand({ TableName: tableName, Key: { pk: { S: `example#runs#${kind}` } }, ConsistentRead: true }),
    );
    return Number(Item?.n?.N ?? 0);
  };
  const confirm = (requestState: string, answers: unknown = yes) =>
    event('tools/call', { name: 'delete_report', arguments: {}, requestState, inputResponses: answers });

  it('asks for confirmation, then runs once on confirmation', async () => {
    const before = await runs('delete');
    const first = await invoke(0, event('tools/call', { name: 'delete_report', arguments: {} }));
    expect(first.result?.resultType).toBe('input_required');
    const done = await invoke(0, confirm(first.result?.requestState));
    expect(done.result?.content).toEqual([{ type: 'text', text: 'Deleted.' }]);
    expect(await runs('delete')).toBe(before + 1);
  });

  it('refuses a tampered state and a state of another user', async () => {
    const before = await runs('delete');
    const first = await invoke(0, event('tools/call', { name: 'delete_report', arguments: {} }));
    const state = first.result?.requestState as string;
    const tampered = state.slice(0, 20) + (state[20] === 'A' ? 'B' : 'A') + state.slice(21);
    expect((await invoke(1, confirm(tampered))).error).toBeDefined();
    const other = event('tools/call', { name: 'delete_report', arguments: {}, requestState: state, inputResponses: yes }, 'mallory');
    expect((await invoke(1, other)).error).toBeDefined();
    expect(await runs('delete')).toBe(before);
  });

  it('refuses a replay with other answers on the other instance', async () => {
    const before = await runs('delete');
    const first = await invoke(0, event('tools/call', { name: 'delete_report', arguments: {} }));
    await invoke(0, confirm(first.result?.requestState));
    expect((await invoke(1, confirm(first.result?.requestState, { confirm: { action: 'decline' } }))).error).toBeDefined();
    expect(await runs('delete')).toBe(before + 1);
  });

  it('an identical retry after a lost response is answered from the record; the tool ran once', async () => {
    const before = await runs('delete');
    const first = await invoke(0, event('tools/call', { name: 'delete_report', arguments: {} }));
    await instances[0]!(confirm(first.result?.requestState)); // ran; its response never reached the client
    expect(await runs('delete')).toBe(before + 1);
    const retried = await invoke(1, confirm(first.result?.requestState));
    expect(retried.result?.content).toEqual([{ type: 'text', text: 'Deleted.' }]);
    expect(await runs('delete')).toBe(before + 1);
  });

  /** An HTTP API v2 event carrying a 2025-era client's request (no `_meta` era fields; a session id once it has one). */
  const legacyEvent = (method: string, params: Record<string, unknown>, session?: string): HttpApiEvent => {
    const base = event(method, {});
    const headers: Record<string, string | undefined> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    };
    if (method !== 'initialize') headers['mcp-protocol-version'] = '2025-11-25';
    if (session !== undefined) headers['mcp-session-id'] = session;
    return { ...base, headers, body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params }), isBase64Encoded: false };
  };
  /** The result of an invocation, or `'hung'` when it did not return within 10 s (the bound of a failing run only). */
  const bounded = async (result: Promise<HttpApiResult>): Promise<HttpApiResult | 'hung'> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hung = new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), 10_000)));
    try {
      return await Promise.race([result, hung]);
    } finally {
      clearTimeout(timer);
    }
  };

  it('a 2025-era client is refused at once with -32022 (unsupported protocol version), never hung (a buffered response cannot carry its questions)', async () => {
    const before = await runs('delete');
    const init = await instances[0]!(
      legacyEvent('initialize', {
        protocolVersion: '2025-11-25',
        capabilities: { elicitation: {} },
        clientInfo: { name: 'old', version: '1' },
      }),
    );
    expect(init.statusCode).toBe(400);
    expect(init.headers['mcp-session-id']).toBeUndefined(); // no session was opened
    const refusal = JSON.parse(init.body) as { error: { code: number; message: string; data: { supported: string[] } } };
    expect(refusal.error).toEqual({
      code: -32022,
      message: 'Unsupported protocol version: 2025-11-25',
      data: { supported: ['2026-07-28'], requested: '2025-11-25' },
    });
    // Its tools/call (here with a session id it could have got from another environment) is refused too, not hung
    // waiting for an answer that the buffered response could never deliver; the tool did not run.
    const call = await bounded(instances[1]!(legacyEvent('tools/call', { name: 'delete_report', arguments: {} }, 'a-session-id')));
    expect(call).not.toBe('hung');
    expect((call as HttpApiResult).statusCode).toBe(400);
    expect(JSON.parse((call as HttpApiResult).body).error).toEqual(refusal.error);
    expect(await runs('delete')).toBe(before);
  });

  it('a task: created at once, its work done within the invocation, readable from the other instance', async () => {
    const before = await runs('build');
    const created = await invoke(0, event('tools/call', { name: 'build_report', arguments: {} }, 'alice', true));
    expect(created.result?.resultType).toBe('task');
    const taskId = created.result?.taskId as string;
    // The invocation returned: the work ran inside it, and its result is in DynamoDB for any instance.
    expect(await runs('build')).toBe(before + 1);
    const read = await invoke(1, event('tasks/get', { taskId }, 'alice', true));
    expect(read.result?.status).toBe('completed');
    expect(read.result?.result?.content).toEqual([{ type: 'text', text: 'Report ready.' }]);
    expect((await invoke(1, event('tasks/get', { taskId }, 'mallory', true))).error).toBeDefined();
  });
});

// src/handler.ts: an MCP server as an AWS Lambda function behind an API Gateway HTTP API (payload format 2.0).
import { DynamoDBClient, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { McpServer } from '@modelcontextprotocol/server';
import { createHmacCodec } from '@mrtr/codec-hmac';
import { KeyRing } from '@mrtr/core';
import type { TaskStore } from '@mrtr/core/tasks';
import { createMrtr } from '@mrtr/mcp-server';
import { createHttpHandler } from '@mrtr/mcp-server/http';
import { createDynamoStore, createDynamoTaskStore } from '@mrtr/store-dynamodb';

/** The parts of an API Gateway HTTP API v2 event this handler reads (`@types/aws-lambda`'s `APIGatewayProxyEventV2`). */
export interface HttpApiEvent {
  rawPath: string;
  rawQueryString?: string;
  headers?: Record<string, string | undefined>;
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
  requestContext: {
    domainName: string;
    http: { method: string };
    /** A JWT authorizer's verified claims: the user every state and task is bound to. */
    authorizer?: { jwt?: { claims?: Record<string, string | number | boolean | string[]> } };
  };
}
/** `APIGatewayProxyStructuredResultV2`. */
export interface HttpApiResult {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  isBase64Encoded: boolean;
}
/** The part of the Lambda context used: how long this invocation may still run. */
export interface LambdaContext {
  getRemainingTimeInMillis(): number;
}

/**
 * Work started by this invocation (a task's work and its writes to the task store): Lambda freezes the environment
 * once the handler returns, so the handler waits for it.
 */
const inFlight = new Set<Promise<unknown>>();
function within<T>(work: Promise<T>): Promise<T> {
  inFlight.add(work);
  const done = () => inFlight.delete(work);
  void work.then(done, done);
  return work;
}
/** The task store, with every write tracked (the task's final status is written after its work returns). */
function tracked(store: TaskStore): TaskStore {
  return {
    create: (record) => within(store.create(record)),
    get: (taskId) => store.get(taskId),
    update: (taskId, change) => within(store.update(taskId, change)),
  };
}

const required = (name: string): string => {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} must be set (see examples/aws-lambda/README.md)`);
  return value;
};

// Once per execution environment (cold start). MRTR_KEYS: from Secrets Manager / SSM at deploy time (or fetched
// here before the first request); the same ring on every function that must open the others' states.
const tableName = required('MRTR_TABLE');
const dynamo = new DynamoDBClient({}); // region and credentials from the Lambda environment (AWS_ENDPOINT_URL_DYNAMODB for local tests)
const mrtr = createMrtr({
  keys: KeyRing.parse(required('MRTR_KEYS')),
  codec: createHmacCodec,
  store: createDynamoStore({ client: dynamo, tableName, namespace: 'reports' }),
  audience: process.env.MCP_AUDIENCE ?? 'https://reports.example.com/mcp',
  tasks: { store: tracked(createDynamoTaskStore({ client: dynamo, tableName, namespace: 'reports' })) },
});

/** The tool's side effect: one counter item per report kind (so a test can see how often it ran). */
const count = (kind: string) =>
  dynamo.send(
    new UpdateItemCommand({
      TableName: tableName,
      Key: { pk: { S: `example#runs#${kind}` } },
      UpdateExpression: 'ADD #n :one',
      ExpressionAttributeNames: { '#n': 'n' },
      ExpressionAttributeValues: { ':one': { N: '1' } },
    }),
  );

/** A new server per request (the SDK's web handler serves each on a fresh instance). */
function buildServer(): McpServer {
  const server = new McpServer({ name: 'reports', version: '1.0.0' }, { ...mrtr.serverOptions });
  mrtr.registerTool(server, 'delete_report', { description: 'Deletes the report, after a confirmation' }, async (_args, _ctx, need) => {
    const answer = need.elicit('confirm', {
      message: 'Delete the report?',
      requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
    });
    if (!answer) return need.ask();
    if (answer.action !== 'accept' || answer.content.ok !== true) return { content: [{ type: 'text', text: 'Kept.' }] };
    await count('delete');
    return { content: [{ type: 'text', text: 'Deleted.' }] };
  });
  // A task: the client gets the task at once and polls tasks/get; the work runs within this invocation.
  mrtr.registerTool(server, 'build_report', { description: 'Builds the monthly report', task: 'optional' }, async (_args, _ctx, need) =>
    need.task((task) =>
      within(
        (async () => {
          await task.status('collecting');
          await count('build');
          return { content: [{ type: 'text' as const, text: 'Report ready.' }] };
        })(),
      ),
    ),
  );
  return server;
}

// 2026-07-28 clients only (`legacy: 'reject'`): a 2025-era client is answered at once with the SDK's unsupported-version
// error (HTTP 400). Serving one needs a session, over which the server asks a protected tool's question on the streamed
// response of its `tools/call`; an HTTP API buffers that response (the handler returns once, with the whole body), so
// the question never reaches the client and the call hangs until a timeout, the tool never running. A session would
// also live in one execution environment only, while the client's next request may land on another.
const mcp = createHttpHandler(buildServer, { legacy: 'reject' });

/**
 * Waits until nothing this invocation started is running: the work, then the write of its result (started when the
 * work returns, so looked for again after each round). Bounded by the invocation's time left and by 100 rounds.
 */
async function settled(context: LambdaContext | undefined): Promise<void> {
  const deadline = Date.now() + Math.max(0, (context?.getRemainingTimeInMillis() ?? 30_000) - 1_000);
  for (let round = 0; round < 100; round++) {
    await new Promise((resolve) => setImmediate(resolve)); // let what just settled start its next write
    if (inFlight.size === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), Math.max(0, deadline - Date.now()))));
    const outcome = await Promise.race([Promise.allSettled([...inFlight]), late]);
    clearTimeout(timer);
    if (outcome === 'late') return;
  }
}

const toRequest = (event: HttpApiEvent): Request => {
  const query = event.rawQueryString ? `?${event.rawQueryString}` : '';
  const headers = new Headers();
  for (const [name, value] of Object.entries(event.headers ?? {})) if (value !== undefined) headers.set(name, value);
  if (event.cookies?.length) headers.set('cookie', event.cookies.join('; '));
  const method = event.requestContext.http.method;
  const body =
    event.body === undefined || method === 'GET' ? undefined : event.isBase64Encoded ? Buffer.from(event.body, 'base64') : event.body;
  return new Request(`https://${event.requestContext.domainName}${event.rawPath}${query}`, { method, headers, body: body ?? null });
};

/** The Lambda handler: event → `Request` → the MCP web handler → response; then waits for the work it started. */
export async function handler(event: HttpApiEvent, context?: LambdaContext): Promise<HttpApiResult> {
  const sub = event.requestContext.authorizer?.jwt?.claims?.sub;
  const authInfo =
    typeof sub === 'string' && sub !== '' ? { token: 'jwt', clientId: 'api-gateway', scopes: [], extra: { sub } } : undefined;
  const response = await mcp.fetch(toRequest(event), authInfo === undefined ? {} : { authInfo });
  const body = await response.text(); // buffered: an HTTP API without response streaming
  // Tasks started by this request finish before the environment freezes (bounded by the invocation's time left).
  await settled(context);
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { statusCode: response.status, headers, body, isBase64Encoded: false };
}

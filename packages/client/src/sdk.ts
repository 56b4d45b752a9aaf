// Every place this package reaches past the public API of `@modelcontextprotocol/client` 2.4 (the peer range is
// pinned to `~2.4.0`; test/sdk-contract.test.ts fails loudly if a new SDK moves one):
// - the client's capabilities, to declare the tasks extension on one request (read from its `_meta` envelope);
// - the handlers registered with `setRequestHandler`, to answer embedded input requests with them;
// - the transport's `onmessage`, to catch a `resultType: "task"` answer, which the 2.4 client rejects and drops.
import type { Client } from '@modelcontextprotocol/client';

export type Json = Record<string, unknown>;
export const isObject = (value: unknown): value is Json => value !== null && typeof value === 'object' && !Array.isArray(value);

/** The extension a request declares to be answered with a task. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
const CAPABILITIES_META = 'io.modelcontextprotocol/clientCapabilities';
/** Where a caught task answer travels inside the error the SDK client surfaces for it (never on the wire). */
export const TASK_MARK = 'dev.mrtr/client:task';

type Handler = (request: Json, ctx: Json) => Promise<unknown>;
type OnMessage = (message: unknown, extra?: unknown) => void;
interface Internals {
  _outboundMetaEnvelope?(): Json | undefined;
  _getRequestHandler?(method: string): Handler | undefined;
  transport?: { onmessage?: OnMessage } | undefined;
}
const internals = (client: Client): Internals => client as unknown as Internals;

/** The `_meta` entry that declares the tasks extension on one request: the client's own capabilities plus it. */
export function tasksMeta(client: Client): Json {
  const capabilities = internals(client)._outboundMetaEnvelope?.()?.[CAPABILITIES_META];
  if (!isObject(capabilities)) throw new TypeError('withMrtr: the client is not connected in the 2026-07-28 era');
  const extensions = isObject(capabilities.extensions) ? capabilities.extensions : {};
  return { [CAPABILITIES_META]: { ...capabilities, extensions: { ...extensions, [TASKS_EXTENSION]: {} } } };
}

/** Whether the connected server advertises the tasks extension. */
export function serverHasTasks(client: Client): boolean {
  return isObject(client.getServerCapabilities()?.extensions?.[TASKS_EXTENSION]);
}

/**
 * Answers one embedded input request with the handler registered on the client for its method (through the same
 * wrapped chain the SDK's own auto-fulfilment uses, so its validation applies), or `undefined` if none is registered.
 */
export function registeredHandler(
  client: Client,
  method: string,
): ((key: string, params: Json | undefined, signal: AbortSignal) => Promise<unknown>) | undefined {
  const handler = internals(client)._getRequestHandler?.(method);
  if (handler === undefined) return undefined;
  const unavailable = (member: string) => () => {
    throw new TypeError(`ctx.mcpReq.${member} is not available while answering an embedded input request`);
  };
  return (key, params, signal) =>
    handler(
      { jsonrpc: '2.0', id: key, method, ...(params !== undefined && { params }) },
      {
        sessionId: undefined,
        mcpReq: {
          id: key,
          method,
          _meta: params?._meta,
          requestState: () => undefined,
          signal,
          send: unavailable('send'),
          notify: unavailable('notify'),
        },
      },
    );
}

const wrapped = new WeakSet<OnMessage>();

/**
 * Makes a `resultType: "task"` answer reach this package: the SDK client rejects such a result without its fields, so
 * the transport hands it on as a JSON-RPC error carrying the task under {@link TASK_MARK}, which {@link taskOf}
 * reads back. Only requests that declared the tasks extension get a task; this package is what declares it.
 */
export function catchTasks(client: Client): void {
  const transport = internals(client).transport;
  const inner = transport?.onmessage;
  if (transport === undefined || inner === undefined) throw new TypeError('withMrtr: the client is not connected');
  if (wrapped.has(inner)) return;
  const outer: OnMessage = (message, extra) => {
    if (isObject(message) && 'id' in message && isObject(message.result) && message.result.resultType === 'task') {
      const error = { code: -32603, message: 'Task answer (handled by @mrtr/client)', data: { [TASK_MARK]: message.result } };
      inner.call(transport, { jsonrpc: '2.0', id: message.id, error }, extra);
      return;
    }
    inner.call(transport, message, extra);
  };
  wrapped.add(outer);
  transport.onmessage = outer;
}

/** The task a caught answer carried, if `error` is one. */
export function taskOf(error: unknown): Json | undefined {
  const data = isObject(error) ? (error as { data?: unknown }).data : undefined;
  const task = isObject(data) ? data[TASK_MARK] : undefined;
  return isObject(task) && typeof task.taskId === 'string' ? task : undefined;
}

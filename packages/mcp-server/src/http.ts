import {
  type AuthInfo,
  type CreateMcpHandlerOptions,
  createMcpHandler,
  isLegacyRequest,
  type McpHandlerRequestOptions,
  type McpHttpHandler,
  type McpRequestContext,
  type McpServer,
  type McpServerFactory,
  type Server,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import { intOption } from '@mrtr/core/authoring';

/** Options of the sessions that serve 2025-era clients (see {@link HttpHandlerOptions.sessions}). */
export interface LegacySessionOptions {
  /** Most open sessions; a new one past it is refused with `503` until one closes or idles out. @default 1000 */
  max?: number | undefined;
  /** Most open sessions of one user; a new one past it closes that user's least recently used one. @default 16 */
  maxPerUser?: number | undefined;
  /** A session unused this long is closed (its client gets `404` and starts a new one). @default 1_800_000 */
  idleMs?: number | undefined;
  /**
   * Who owns a session: every request of a session must come from the same owner, or it is answered `404` as if
   * the session did not exist. Return `undefined` for an anonymous request.
   * @default `authInfo.clientId` and `authInfo.extra.sub` together (never the token, which a refresh changes)
   */
  owner?: ((authInfo: AuthInfo | undefined) => string | undefined) | undefined;
  /** Clock in ms (tests). @default Date.now */
  now?: (() => number) | undefined;
}

/** Options of {@link createHttpHandler}: the SDK's `createMcpHandler` options, with `legacy` served by sessions. */
export interface HttpHandlerOptions extends Omit<CreateMcpHandlerOptions, 'legacy'> {
  /**
   * How 2025-era clients (SDK 1.x, the v2 client's default mode, most hosts today) are served:
   * - `'sessions'`: on session-based Streamable HTTP, as a 2025 server would. The SDK's legacy shim then sends a
   *   protected handler's questions to the client over the session and retries the handler with the answers,
   *   so every state is still sealed, bound and single use.
   * - `'reject'`: not at all (2026-07-28 clients only), answered with the SDK's unsupported-version error.
   *
   * The SDK's own default (stateless serving of 2025 requests) is not offered: there the server cannot send a
   * request back to the client, so no question can ever be asked.
   * @default 'sessions'
   */
  legacy?: 'sessions' | 'reject' | undefined;
  /** Bounds of the 2025-era sessions. @default {} (each bound at its own default) */
  sessions?: LegacySessionOptions | undefined;
}

/** What {@link createHttpHandler} returns: the SDK's handler shape (`toNodeHandler` takes it), plus a session count. */
export interface HttpHandler extends McpHttpHandler {
  /** Open 2025-era sessions (for metrics and tests). */
  readonly sessionCount: number;
}

interface Session {
  id: string;
  owner: string;
  transport: WebStandardStreamableHTTPServerTransport;
  server: McpServer | Server;
  lastUsed: number;
}

const SESSION_HEADER = 'mcp-session-id';

const defaultOwner = (authInfo: AuthInfo | undefined): string | undefined => {
  if (authInfo === undefined) return undefined;
  const sub = (authInfo.extra as Record<string, unknown> | undefined)?.sub;
  return JSON.stringify([authInfo.clientId, typeof sub === 'string' ? sub : null]);
};

/** A positive integer option (no upper bound but the safe integers). */
const positiveInt = (name: string, value: unknown, fallback: number): number =>
  intOption(`createHttpHandler: ${name}`, value, fallback, 1, Number.MAX_SAFE_INTEGER);

function jsonRpcError(status: number, code: number, message: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });
}

/**
 * Serves MCP over HTTP from a server factory (a new `McpServer` per call, as with the SDK's `createMcpHandler`):
 * 2026-07-28 requests on the SDK's stateless path, and 2025-era clients on sessions, where the SDK's legacy shim
 * can ask them the questions of mrtr-protected tools, prompts and resources.
 *
 * Sessions are bounded in number, per user and in idle time, and bound to the user who opened them. A factory
 * that returns the same server twice is refused with a clear error (a shared server cannot serve two
 * connections: the SDK would hang or fail without a word).
 *
 * ```ts
 * const handler = createHttpHandler(() => buildServer());
 * createServer(toNodeHandler(handler)).listen(3000); // toNodeHandler from @modelcontextprotocol/node
 * ```
 */
export function createHttpHandler(factory: McpServerFactory, options: HttpHandlerOptions = {}): HttpHandler {
  if (typeof factory !== 'function') throw new TypeError('createHttpHandler: factory must be a function that returns a new McpServer');
  if (options === null || typeof options !== 'object') throw new TypeError('createHttpHandler: options must be an object');
  const { legacy = 'sessions', sessions: sessionOptions = {}, ...sdkOptions } = options;
  if (legacy !== 'sessions' && legacy !== 'reject') throw new TypeError('createHttpHandler: legacy must be "sessions" or "reject"');
  const max = positiveInt('sessions.max', sessionOptions.max, 1000);
  const maxPerUser = positiveInt('sessions.maxPerUser', sessionOptions.maxPerUser, 16);
  const idleMs = positiveInt('sessions.idleMs', sessionOptions.idleMs, 1_800_000);
  const ownerOf = sessionOptions.owner ?? defaultOwner;
  const now = sessionOptions.now ?? Date.now;
  if (typeof ownerOf !== 'function') throw new TypeError('createHttpHandler: sessions.owner must be a function');
  if (typeof now !== 'function') throw new TypeError('createHttpHandler: sessions.now must be a function');
  const report = (error: Error): void => {
    if (sdkOptions.onerror === undefined) {
      console.error(error);
      return;
    }
    try {
      sdkOptions.onerror(error);
    } catch {
      // A reporting hook never changes the answer.
    }
  };

  // A server instance serves one connection: the factory must make a new one each time.
  const handedOut = new WeakSet<object>();
  const fresh = async (ctx: McpRequestContext): Promise<McpServer | Server> => {
    const server = await factory(ctx);
    if (server === null || typeof server !== 'object' || typeof (server as { connect?: unknown }).connect !== 'function') {
      throw new TypeError('createHttpHandler: the factory must return an McpServer (or Server)');
    }
    if (handedOut.has(server)) {
      throw new TypeError(
        'createHttpHandler: the factory returned a server it had returned before. Build a new McpServer in every call ' +
          '(() => { const server = new McpServer(...); register tools; return server; }), not one shared instance',
      );
    }
    handedOut.add(server);
    return server;
  };
  const modern = createMcpHandler(
    async (ctx) => {
      try {
        return await fresh(ctx);
      } catch (error) {
        report(error as Error);
        throw error;
      }
    },
    { ...sdkOptions, legacy: 'reject' },
  );
  if (legacy === 'reject') return Object.assign(modern, { sessionCount: 0 });

  /** Open sessions, least recently used first (a use moves a session to the end). */
  const open = new Map<string, Session>();
  /** Each owner's sessions, least recently used first. */
  const byOwner = new Map<string, Map<string, Session>>();
  let closing = false;

  const touch = (session: Session): void => {
    session.lastUsed = now();
    open.delete(session.id);
    open.set(session.id, session);
    const mine = byOwner.get(session.owner)!;
    mine.delete(session.id);
    mine.set(session.id, session);
  };
  const forget = (session: Session): boolean => {
    if (open.get(session.id) !== session) return false;
    open.delete(session.id);
    const mine = byOwner.get(session.owner);
    mine?.delete(session.id);
    if (mine?.size === 0) byOwner.delete(session.owner);
    return true;
  };
  const end = async (session: Session): Promise<void> => {
    forget(session);
    await session.transport.close().catch(report);
    await session.server.close().catch(report);
  };
  /** Closes sessions idle for `idleMs`: they are the first in `open`, so this stops at the first live one. */
  const sweep = (): void => {
    const t = now();
    for (const session of open.values()) {
      if (t - session.lastUsed < idleMs) break;
      void end(session);
    }
  };

  async function startSession(request: Request, requestOptions: McpHandlerRequestOptions | undefined, owner: string): Promise<Response> {
    sweep();
    const mine = byOwner.get(owner);
    if (mine !== undefined && mine.size >= maxPerUser) void end(mine.values().next().value!);
    if (open.size >= max) {
      report(new Error(`createHttpHandler: ${open.size} legacy sessions open (sessions.max): a new one was refused`));
      return jsonRpcError(503, -32000, 'Too many open sessions; try again later', { 'retry-after': '5' });
    }
    let server: McpServer | Server;
    try {
      server = await fresh({
        era: 'legacy',
        ...(requestOptions?.authInfo !== undefined && { authInfo: requestOptions.authInfo }),
        requestInfo: request,
      });
    } catch (error) {
      report(error as Error);
      return jsonRpcError(500, -32603, 'Internal error');
    }
    let session: Session | undefined;
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      ...(sdkOptions.maxRequestBodySize !== undefined && { maxRequestBodySize: sdkOptions.maxRequestBodySize }),
      ...(sdkOptions.keepAliveMs !== undefined && { keepAliveMs: sdkOptions.keepAliveMs }),
      onsessioninitialized: (id) => {
        session = { id, owner, transport, server, lastUsed: now() };
        open.set(id, session);
        let owned = byOwner.get(owner);
        if (owned === undefined) byOwner.set(owner, (owned = new Map()));
        owned.set(id, session);
      },
      onsessionclosed: () => {
        if (session !== undefined) void end(session);
      },
    });
    transport.onerror = report;
    await server.connect(transport);
    const response = await transport.handleRequest(request, requestOptions);
    // Not an initialize (or a refused one): no session was opened, so nothing may stay behind.
    if (session === undefined || closing) {
      await transport.close().catch(report);
      await server.close().catch(report);
    }
    return response;
  }

  async function fetch(request: Request, requestOptions?: McpHandlerRequestOptions): Promise<Response> {
    let isLegacy: boolean;
    try {
      isLegacy = await isLegacyRequest(request, requestOptions?.parsedBody, {
        ...(sdkOptions.maxRequestBodySize !== undefined && { maxRequestBodySize: sdkOptions.maxRequestBodySize }),
      });
    } catch {
      isLegacy = false; // the modern path owns every error answer (unreadable or oversized bodies included)
    }
    if (!isLegacy) return modern.fetch(request, requestOptions);
    if (closing) return jsonRpcError(503, -32000, 'Server is shutting down');
    const owner = ownerOf(requestOptions?.authInfo) ?? '';
    const id = request.headers.get(SESSION_HEADER);
    if (id === null) {
      if (request.method !== 'POST') return jsonRpcError(400, -32000, 'Bad Request: Mcp-Session-Id header is required');
      return startSession(request, requestOptions, owner);
    }
    const session = open.get(id);
    // Unknown, idled out, or another user's: the same 404, which tells a client to start a new session.
    if (session === undefined || session.owner !== owner || now() - session.lastUsed >= idleMs) {
      if (session !== undefined && session.owner === owner) void end(session);
      return jsonRpcError(404, -32001, 'Session not found');
    }
    touch(session);
    return session.transport.handleRequest(request, requestOptions);
  }

  return {
    fetch,
    notify: modern.notify,
    bus: modern.bus,
    get sessionCount() {
      return open.size;
    },
    async close() {
      closing = true;
      await Promise.all([...open.values()].map(end));
      await modern.close();
    },
  };
}

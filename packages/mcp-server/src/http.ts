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
  localhostAllowedHostnames,
  type Server,
  validateHostHeader,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import { intOption } from '@mrtr/core/authoring';

/** Options of the sessions that serve 2025-era clients (see {@link HttpHandlerOptions.sessions}). */
export interface LegacySessionOptions {
  /**
   * Most open sessions. A new one past it makes room by closing the least recently used session of whoever holds
   * the most (a user, or the anonymous sessions as one class), when that is the newcomer itself or holds at least
   * two more than the newcomer; otherwise, and always for an anonymous newcomer, it is refused with `503`.
   * @default 1000
   */
  max?: number | undefined;
  /** Most open sessions of one user (see `user`); a new one past it closes that user's least recently used one. @default 16 */
  maxPerUser?: number | undefined;
  /**
   * Most open anonymous sessions (requests without an owner), all together: each is its own owner, and a new one
   * past this bound is refused with `503` (it never closes another client's session). `0` refuses them all.
   * @default 100
   */
  maxAnonymous?: number | undefined;
  /** A session unused this long is closed (its client gets `404` and starts a new one). @default 1_800_000 */
  idleMs?: number | undefined;
  /**
   * Who owns a session: every request of a session must come from the same owner, or it is answered `404` as if
   * the session did not exist. Return `undefined` for an anonymous request.
   * @default `authInfo.clientId` and `authInfo.extra.sub` together (never the token, which a refresh changes)
   */
  owner?: ((authInfo: AuthInfo | undefined) => string | undefined) | undefined;
  /**
   * Whose share `maxPerUser` counts, for a request with an owner: one user reaches the server through many OAuth
   * clients (dynamic client registration makes client ids free), so the bound is per user, not per owner.
   * `undefined` counts the session against its owner.
   * @default `authInfo.extra.sub` when it is a string (else the owner); with a custom `owner`, the owner
   */
  user?: ((authInfo: AuthInfo | undefined) => string | undefined) | undefined;
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
  /**
   * The host names this handler answers to (DNS-rebinding protection), checked on every request before anything
   * else, whoever mounts `fetch` (`toNodeHandler`, Hono, Bun, Deno, a Worker): a request for another host is
   * answered `403`. Host names as the SDK's `validateHostHeader` takes them: no scheme, no port (any port
   * matches), IPv6 in brackets (`[::1]`). The `Host` header is read, or the request URL's host when there is none.
   * - `'localhost'`: `localhost`, `127.0.0.1` and `[::1]` only (a server for this machine).
   * - a list: those names (a public deployment: the names clients reach it by).
   * - `'any'` (or left out): no check. The handler cannot know where it is served, so it does not guess; a server
   *   reachable on a loopback or private address without a check is open to DNS rebinding from any web page.
   * @default 'any'
   */
  allowedHosts?: 'localhost' | 'any' | readonly string[] | undefined;
}

/** What {@link createHttpHandler} returns: the SDK's handler shape (`toNodeHandler` takes it), plus a session count. */
export interface HttpHandler extends McpHttpHandler {
  /** Open 2025-era sessions (for metrics and tests). */
  readonly sessionCount: number;
}

interface Session {
  id: string;
  /** The owner every request must match; `undefined` for an anonymous session (its id is its only credential). */
  owner: string | undefined;
  holder: Holder;
  transport: WebStandardStreamableHTTPServerTransport;
  server: McpServer | Server;
  lastUsed: number;
}

/** Whose sessions count together: one user, or the anonymous sessions as a class. */
interface Holder {
  key: string;
  /** Its open sessions, least recently used first. */
  sessions: Map<string, Session>;
  /** Its sessions being started (reserved before the first await, so concurrent starts see them). */
  starting: number;
}

const holds = (holder: Holder): number => holder.sessions.size + holder.starting;

const SESSION_HEADER = 'mcp-session-id';

const subOf = (authInfo: AuthInfo | undefined): string | undefined => {
  const sub = (authInfo?.extra as Record<string, unknown> | undefined)?.sub;
  return typeof sub === 'string' ? sub : undefined;
};

const defaultOwner = (authInfo: AuthInfo | undefined): string | undefined =>
  authInfo === undefined ? undefined : JSON.stringify([authInfo.clientId, subOf(authInfo) ?? null]);

/** A positive integer option (no upper bound but the safe integers). */
const positiveInt = (name: string, value: unknown, fallback: number): number =>
  intOption(`createHttpHandler: ${name}`, value, fallback, 1, Number.MAX_SAFE_INTEGER);

/** The host names of {@link HttpHandlerOptions.allowedHosts}, or `undefined` for no check. */
function parseAllowedHosts(value: unknown): string[] | undefined {
  if (value === undefined || value === 'any') return undefined;
  if (value === 'localhost') return localhostAllowedHostnames();
  if (!Array.isArray(value) || value.length === 0) {
    throw new TypeError('createHttpHandler: allowedHosts must be "localhost", "any" or a non-empty list of host names');
  }
  return value.map((host: unknown) => {
    // A host name is what the SDK's check compares: the hostname of http://<host>, unchanged but for case.
    let parsed: URL | undefined;
    try {
      parsed = typeof host === 'string' && host.length > 0 ? new URL(`http://${host}`) : undefined;
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined || parsed.hostname !== (host as string).toLowerCase() || parsed.port !== '') {
      throw new TypeError(
        `createHttpHandler: allowedHosts holds ${JSON.stringify(host)}, not a host name (no scheme, no port; IPv6 in brackets)`,
      );
    }
    return parsed.hostname;
  });
}

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
 * Sessions are bound to the owner who opened them (each anonymous session its own) and bounded in number, per
 * user, for anonymous clients as a class and in idle time (see {@link LegacySessionOptions}). A factory
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
  const { legacy = 'sessions', sessions: sessionOptions = {}, allowedHosts, ...sdkOptions } = options;
  const hostnames = parseAllowedHosts(allowedHosts);
  /** The `403` for a request to a host name not allowed, before anything reads it. */
  const refusedHost = (request: Request): Response | undefined => {
    if (hostnames === undefined) return undefined;
    const checked = validateHostHeader(request.headers.get('host') ?? new URL(request.url).host, hostnames);
    return checked.ok ? undefined : jsonRpcError(403, -32000, 'Forbidden: Host not allowed');
  };
  if (legacy !== 'sessions' && legacy !== 'reject') throw new TypeError('createHttpHandler: legacy must be "sessions" or "reject"');
  const max = positiveInt('sessions.max', sessionOptions.max, 1000);
  const maxPerUser = positiveInt('sessions.maxPerUser', sessionOptions.maxPerUser, 16);
  const maxAnonymous = intOption('createHttpHandler: sessions.maxAnonymous', sessionOptions.maxAnonymous, 100, 0, Number.MAX_SAFE_INTEGER);
  const idleMs = positiveInt('sessions.idleMs', sessionOptions.idleMs, 1_800_000);
  const ownerOf = sessionOptions.owner ?? defaultOwner;
  const userOf = sessionOptions.user ?? (sessionOptions.owner === undefined ? subOf : () => undefined);
  const now = sessionOptions.now ?? Date.now;
  if (typeof ownerOf !== 'function') throw new TypeError('createHttpHandler: sessions.owner must be a function');
  if (typeof userOf !== 'function') throw new TypeError('createHttpHandler: sessions.user must be a function');
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
  if (legacy === 'reject') {
    return {
      fetch: async (request, requestOptions) => refusedHost(request) ?? modern.fetch(request, requestOptions),
      notify: modern.notify,
      bus: modern.bus,
      sessionCount: 0,
      close: () => modern.close(),
    };
  }

  /** Open sessions, least recently used first (a use moves a session to the end). */
  const open = new Map<string, Session>();
  /** Holders of at least one session (open or starting), by key. */
  const holders = new Map<string, Holder>();
  /** Holders by how many sessions they hold, and the largest count: who holds the most, in constant time. */
  const byCount = new Map<number, Set<Holder>>();
  let most = 0;
  /** Sessions being started, all holders together. */
  let starting = 0;
  let closing = false;

  /** Files `holder` under its count after one session more or less (`before`: its count until then). */
  const recount = (holder: Holder, before: number): void => {
    const after = holds(holder);
    const was = byCount.get(before);
    was?.delete(holder);
    if (was?.size === 0) byCount.delete(before);
    if (after === 0) {
      holders.delete(holder.key);
    } else {
      holders.set(holder.key, holder);
      let bucket = byCount.get(after);
      if (bucket === undefined) byCount.set(after, (bucket = new Set()));
      bucket.add(holder);
      most = Math.max(most, after);
    }
    // Counts move by one, so this steps down once at most.
    while (most > 0 && !byCount.has(most)) most--;
  };
  const touch = (session: Session): void => {
    session.lastUsed = now();
    open.delete(session.id);
    open.set(session.id, session);
    session.holder.sessions.delete(session.id);
    session.holder.sessions.set(session.id, session);
  };
  const forget = (session: Session): boolean => {
    if (open.get(session.id) !== session) return false;
    open.delete(session.id);
    const before = holds(session.holder);
    session.holder.sessions.delete(session.id);
    recount(session.holder, before);
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
  /** Closes `holder`'s least recently used open session (at once, for the count); false when none is open yet. */
  const evictFrom = (holder: Holder): boolean => {
    const oldest = holder.sessions.values().next().value;
    if (oldest === undefined) return false;
    void end(oldest);
    return true;
  };
  const refuse = (why: string): Response => {
    report(new Error(`createHttpHandler: ${why}: a new one was refused`));
    return jsonRpcError(503, -32000, 'Too many open sessions; try again later', { 'retry-after': '5' });
  };

  /**
   * Starts a session for `owner` (`undefined`: anonymous), counted against the holder `key`. Every bound is checked
   * and the slot reserved before the first await, so concurrent starts cannot all pass the same check.
   */
  async function startSession(
    request: Request,
    requestOptions: McpHandlerRequestOptions | undefined,
    owner: string | undefined,
    key: string,
  ): Promise<Response> {
    sweep();
    const holder: Holder = holders.get(key) ?? { key, sessions: new Map(), starting: 0 };
    if (owner === undefined) {
      // Anonymous sessions are each their own owner, bounded as a class: a new one never closes another's.
      if (holds(holder) >= maxAnonymous) return refuse(`${holds(holder)} anonymous legacy sessions open (sessions.maxAnonymous)`);
    } else if (holds(holder) >= maxPerUser && !evictFrom(holder)) {
      return refuse(`${holds(holder)} legacy sessions of one user starting (sessions.maxPerUser)`);
    }
    if (open.size + starting >= max) {
      // Room is made from whoever holds the most, when that is the newcomer or holds at least two more than it does
      // (so a hoarder cannot lock others out, and equal holders do not evict each other); anonymous newcomers never.
      const top: Holder | undefined = owner === undefined ? undefined : byCount.get(most)?.values().next().value;
      const fair = top !== undefined && (top === holder || most >= holds(holder) + 2);
      if (!fair || !evictFrom(top)) return refuse(`${open.size + starting} legacy sessions open (sessions.max)`);
    }
    // Reserved now, released below unless the session opened.
    let reserved = true;
    const before = holds(holder);
    holder.starting++;
    starting++;
    recount(holder, before);
    const release = (): void => {
      if (!reserved) return;
      reserved = false;
      const count = holds(holder);
      holder.starting--;
      starting--;
      recount(holder, count);
    };
    let server: McpServer | Server;
    try {
      server = await fresh({
        era: 'legacy',
        ...(requestOptions?.authInfo !== undefined && { authInfo: requestOptions.authInfo }),
        requestInfo: request,
      });
    } catch (error) {
      release();
      report(error as Error);
      return jsonRpcError(500, -32603, 'Internal error');
    }
    let session: Session | undefined;
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      ...(sdkOptions.maxRequestBodySize !== undefined && { maxRequestBodySize: sdkOptions.maxRequestBodySize }),
      ...(sdkOptions.keepAliveMs !== undefined && { keepAliveMs: sdkOptions.keepAliveMs }),
      onsessioninitialized: (id) => {
        if (!reserved || session !== undefined) return;
        // The reserved slot becomes the open session: the holder's count does not change.
        reserved = false;
        holder.starting--;
        starting--;
        session = { id, owner, holder, transport, server, lastUsed: now() };
        open.set(id, session);
        holder.sessions.set(id, session);
      },
      onsessionclosed: () => {
        if (session !== undefined) void end(session);
      },
    });
    transport.onerror = report;
    let response: Response;
    try {
      await server.connect(transport);
      response = await transport.handleRequest(request, requestOptions);
    } catch (error) {
      release();
      if (session !== undefined) await end(session);
      else {
        await transport.close().catch(report);
        await server.close().catch(report);
      }
      throw error;
    }
    release();
    if (session !== undefined && closing) {
      await end(session);
    } else if (session === undefined) {
      // Not an initialize (or a refused one): no session was opened, so nothing may stay behind.
      await transport.close().catch(report);
      await server.close().catch(report);
    }
    return response;
  }

  async function fetch(request: Request, requestOptions?: McpHandlerRequestOptions): Promise<Response> {
    const refused = refusedHost(request);
    if (refused !== undefined) return refused;
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
    const authInfo = requestOptions?.authInfo;
    const owner = ownerOf(authInfo);
    if (owner !== undefined && typeof owner !== 'string') {
      report(new TypeError('createHttpHandler: sessions.owner must return a string or undefined'));
      return jsonRpcError(500, -32603, 'Internal error');
    }
    const id = request.headers.get(SESSION_HEADER);
    if (id === null) {
      if (request.method !== 'POST') return jsonRpcError(400, -32000, 'Bad Request: Mcp-Session-Id header is required');
      if (owner === undefined) return startSession(request, requestOptions, undefined, 'a');
      const user = userOf(authInfo);
      if (user !== undefined && typeof user !== 'string') {
        report(new TypeError('createHttpHandler: sessions.user must return a string or undefined'));
        return jsonRpcError(500, -32603, 'Internal error');
      }
      // Holder keys by kind, so a user, an owner counted as its own user and the anonymous class never collide.
      return startSession(request, requestOptions, owner, user === undefined ? `o${owner}` : `u${user}`);
    }
    const session = open.get(id);
    // Unknown, idled out, or another owner's: the same 404, which tells a client to start a new session.
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

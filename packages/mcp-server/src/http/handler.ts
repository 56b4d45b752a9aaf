import {
  createMcpHandler,
  DEFAULT_MAX_REQUEST_BODY_SIZE,
  isLegacyRequest,
  type McpRequestContext,
  type McpServer,
  type McpServerFactory,
  type Server,
  validateHostHeader,
} from '@modelcontextprotocol/server';
import { recordClientAddress, resolveClientAddress } from '../client-address.js';
import { retryAfterNoted } from '../retry-after.js';
import { readPostBody } from './body.js';
import {
  type HttpHandler,
  type HttpHandlerOptions,
  type HttpHandlerRequestOptions,
  parseAllowedHosts,
  parseTrustProxy,
  resolveSessionOptions,
} from './options.js';
import { jsonRpcError, withRetryAfter } from './responses.js';
import { createLegacySessions } from './sessions.js';
import { optionsObject } from '@mrtr/core/options';

/** The `403` for a request to a host name not in `hostnames` (`undefined`: no check), before anything reads it. */
function hostCheck(hostnames: string[] | undefined): (request: Request) => Response | undefined {
  return (request) => {
    if (hostnames === undefined) return undefined;
    const checked = validateHostHeader(request.headers.get('host') ?? new URL(request.url).host, hostnames);
    return checked.ok ? undefined : jsonRpcError(403, -32000, 'Forbidden: Host not allowed');
  };
}

/** `onerror`, or `console.error` without it; a throwing hook never changes the answer. */
function reporter(onerror: ((error: Error) => void) | undefined): (error: Error) => void {
  return (error) => {
    if (onerror === undefined) {
      console.error(error);
      return;
    }
    try {
      onerror(error);
    } catch {
      // A reporting hook never changes the answer.
    }
  };
}

/**
 * The factory, checked on every call: a server instance serves one connection, so the factory must make a new one
 * each time (a shared server would make the SDK hang or fail without a word).
 */
function freshServers(factory: McpServerFactory): (ctx: McpRequestContext) => Promise<McpServer | Server> {
  const handedOut = new WeakSet<object>();
  return async (ctx) => {
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
}

/**
 * Serves MCP over HTTP from a server factory (a new `McpServer` per call, as with the SDK's `createMcpHandler`):
 * 2026-07-28 requests on the SDK's stateless path, and 2025-era clients on sessions, where the SDK's legacy shim
 * can ask them the questions of mrtr-protected tools, prompts and resources.
 *
 * Sessions are bound to the owner who opened them (each anonymous session its own) and bounded in number, per
 * user, for anonymous clients as a class and per client address (`remoteAddress` of `fetch`'s options, or with
 * `trustProxy` the `X-Forwarded-For` entry that many hops in), and in idle time (see {@link LegacySessionOptions}).
 * The address also bounds the tasks anonymous callers start (`tasks.maxLiveUnauthenticatedPerAddress`). A JSON
 * answer to a call the adapter answered with a JSON-RPC error carrying `data.retryAfterMs` (`round_in_progress`,
 * `store_unavailable`) also gets an HTTP `Retry-After` header in seconds (its status and body unchanged, never read:
 * see `withRetryAfter`). A POST body whose `content-length` fits the body limit is read once and parsed once, for
 * the era decision and the path that serves it alike. A factory
 * that returns the same server twice is refused with a clear error (a shared server cannot serve two
 * connections: the SDK would hang or fail without a word).
 *
 * ```ts
 * const handler = createHttpHandler(() => buildServer());
 * createServer(toNodeHandler(handler)).listen(3000); // toNodeHandler from @modelcontextprotocol/node
 * ```
 */
export function createHttpHandler(factory: McpServerFactory, options?: HttpHandlerOptions): HttpHandler {
  if (typeof factory !== 'function') throw new TypeError('createHttpHandler: factory must be a function that returns a new McpServer');
  options = optionsObject('createHttpHandler', options, {
    legacy: true,
    sessions: true,
    allowedHosts: true,
    onerror: true,
    responseMode: true,
    bus: true,
    maxSubscriptions: true,
    keepAliveMs: true,
    maxRequestBodySize: true,
    trustProxy: true,
  });
  const { legacy = 'sessions', sessions: sessionOptions = {}, allowedHosts, trustProxy: hops, ...sdkOptions } = options;
  const refusedHost = hostCheck(parseAllowedHosts(allowedHosts));
  const trustProxy = parseTrustProxy(hops);
  /** The request's client address, recorded for the tasks its calls start (see `clientAddressOf`). */
  const addressOf = (request: Request, requestOptions: HttpHandlerRequestOptions | undefined): string => {
    const address = resolveClientAddress(request, requestOptions?.remoteAddress, trustProxy);
    recordClientAddress(request, address);
    return address;
  };
  if (legacy !== 'sessions' && legacy !== 'reject') throw new TypeError('createHttpHandler: legacy must be "sessions" or "reject"');
  const settings = resolveSessionOptions(sessionOptions);
  const report = reporter(sdkOptions.onerror);
  const fresh = freshServers(factory);
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
  const limit = sdkOptions.maxRequestBodySize ?? DEFAULT_MAX_REQUEST_BODY_SIZE;
  /** `request`'s answer, with `Retry-After` when the adapter noted a delay on the request it served. */
  const noted = (served: Request, response: Response): Response => withRetryAfter(response, retryAfterNoted(served));
  if (legacy === 'reject') {
    return {
      fetch: async (request, requestOptions) => {
        const refused = refusedHost(request);
        if (refused !== undefined) return refused;
        const address = addressOf(request, requestOptions);
        const body = requestOptions?.parsedBody === undefined ? await readPostBody(request, limit) : undefined;
        if (body === undefined) return noted(request, await modern.fetch(request, requestOptions));
        if ('parsedBody' in body) return noted(request, await modern.fetch(request, { ...requestOptions, parsedBody: body.parsedBody }));
        recordClientAddress(body.request, address);
        return noted(body.request, await modern.fetch(body.request, requestOptions));
      },
      notify: modern.notify,
      bus: modern.bus,
      sessionCount: 0,
      close: () => modern.close(),
    };
  }
  const sessions = createLegacySessions(settings, {
    fresh,
    report,
    maxRequestBodySize: sdkOptions.maxRequestBodySize,
    keepAliveMs: sdkOptions.keepAliveMs,
  });

  async function fetch(request: Request, requestOptions?: HttpHandlerRequestOptions): Promise<Response> {
    const refused = refusedHost(request);
    if (refused !== undefined) return refused;
    const address = addressOf(request, requestOptions);
    // The body read once here when its length is known to fit (then handed on parsed, or as a rebuilt request when
    // it is not JSON); else as before: the SDK's predicate reads a clone, the path the request itself.
    const body = requestOptions?.parsedBody === undefined ? await readPostBody(request, limit) : undefined;
    if (body !== undefined && 'request' in body) {
      const served = body.request;
      recordClientAddress(served, address);
      return noted(served, await (body.legacy ? sessions.serve(served, requestOptions, address) : modern.fetch(served, requestOptions)));
    }
    const options = body === undefined ? requestOptions : { ...requestOptions, parsedBody: body.parsedBody };
    let isLegacy: boolean;
    try {
      isLegacy = await isLegacyRequest(request, options?.parsedBody, {
        ...(sdkOptions.maxRequestBodySize !== undefined && { maxRequestBodySize: sdkOptions.maxRequestBodySize }),
      });
    } catch {
      isLegacy = false; // the modern path owns every error answer (unreadable or oversized bodies included)
    }
    return noted(request, await (isLegacy ? sessions.serve(request, options, address) : modern.fetch(request, options)));
  }

  return {
    fetch,
    notify: modern.notify,
    bus: modern.bus,
    get sessionCount() {
      return sessions.count;
    },
    async close() {
      await sessions.close();
      await modern.close();
    },
  };
}

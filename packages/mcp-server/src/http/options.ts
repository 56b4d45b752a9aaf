import {
  type AuthInfo,
  type CreateMcpHandlerOptions,
  localhostAllowedHostnames,
  type McpHandlerRequestOptions,
  type McpHttpHandler,
} from '@modelcontextprotocol/server';
import { intOption, optionsObject } from '@mrtr/core/options';
import { subjectOf } from '../identity.js';

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
  /**
   * Most open anonymous sessions from one client address (see {@link HttpHandlerOptions.trustProxy}; an IPv6 address
   * counts by its /64), within `maxAnonymous`: a new one past it is refused with `503`, so one caller cannot take
   * the anonymous class from the others. Requests whose address is not known (no `remoteAddress`) are one address.
   * @default 16
   */
  maxAnonymousPerAddress?: number | undefined;
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
   * How many proxies in front of this server append the address they received a request from to
   * `X-Forwarded-For` (a load balancer, a CDN), as Express's `trust proxy` hop count: the client address that
   * anonymous callers are bounded by (`sessions.maxAnonymousPerAddress`, and `tasks.maxLiveUnauthenticatedPerAddress`
   * of `createMrtr`) is then the entry that many hops from the right of the header (the leftmost when there are fewer),
   * instead of the peer that opened the connection (`remoteAddress`). `0` never reads the header, so a client cannot
   * choose its address by sending one; set it to exactly the number of proxies that append (more lets a client pick
   * its address). A header over 2,048 characters is not read (the peer's address counts).
   * @default 0
   */
  trustProxy?: number | undefined;
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

/** What {@link HttpHandler.fetch} takes with a request: the SDK's request options, and the peer's address. */
export interface HttpHandlerRequestOptions extends McpHandlerRequestOptions {
  /**
   * The address of the peer that opened the connection, which anonymous callers are bounded by (see
   * {@link HttpHandlerOptions.trustProxy}): `req.socket.remoteAddress` on Node, `info.remoteAddr.hostname` on Deno,
   * `server.requestIP(request)?.address` on Bun, the `CF-Connecting-IP` header on Cloudflare. Without it every
   * anonymous request counts as one address (the SDK's `toNodeHandler` does not pass it: see the README).
   */
  remoteAddress?: string | undefined;
}

/** What {@link createHttpHandler} returns: the SDK's handler shape (`toNodeHandler` takes it), plus a session count. */
export interface HttpHandler extends McpHttpHandler {
  /** Answers one request; `options.remoteAddress` is the peer's address (see {@link HttpHandlerRequestOptions}). */
  fetch(request: Request, options?: HttpHandlerRequestOptions): Promise<Response>;
  /** Open 2025-era sessions (for metrics and tests). */
  readonly sessionCount: number;
}

const defaultOwner = (authInfo: AuthInfo | undefined): string | undefined =>
  authInfo === undefined ? undefined : JSON.stringify([authInfo.clientId, subjectOf(authInfo) ?? null]);

/** A positive integer option (no upper bound but the safe integers). */
const positiveInt = (name: string, value: unknown, fallback: number): number =>
  intOption(`createHttpHandler: ${name}`, value, fallback, 1, Number.MAX_SAFE_INTEGER);

/** The host names of {@link HttpHandlerOptions.allowedHosts}, or `undefined` for no check. */
export function parseAllowedHosts(value: unknown): string[] | undefined {
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

/** {@link LegacySessionOptions} validated, every default applied: what the sessions run on. */
export interface SessionSettings {
  max: number;
  maxPerUser: number;
  maxAnonymous: number;
  maxAnonymousPerAddress: number;
  idleMs: number;
  ownerOf: (authInfo: AuthInfo | undefined) => string | undefined;
  userOf: (authInfo: AuthInfo | undefined) => string | undefined;
  now: () => number;
}

/** Validates {@link LegacySessionOptions} (labelled `TypeError`/`RangeError`, as `createHttpHandler: sessions.…`). */
export function resolveSessionOptions(sessionOptions: LegacySessionOptions): SessionSettings {
  sessionOptions = optionsObject('createHttpHandler: sessions', sessionOptions, {
    max: true,
    maxPerUser: true,
    maxAnonymous: true,
    maxAnonymousPerAddress: true,
    idleMs: true,
    owner: true,
    user: true,
    now: true,
  });
  const max = positiveInt('sessions.max', sessionOptions.max, 1000);
  const maxPerUser = positiveInt('sessions.maxPerUser', sessionOptions.maxPerUser, 16);
  const maxAnonymous = intOption('createHttpHandler: sessions.maxAnonymous', sessionOptions.maxAnonymous, 100, 0, Number.MAX_SAFE_INTEGER);
  const maxAnonymousPerAddress = positiveInt('sessions.maxAnonymousPerAddress', sessionOptions.maxAnonymousPerAddress, 16);
  const idleMs = positiveInt('sessions.idleMs', sessionOptions.idleMs, 1_800_000);
  const ownerOf = sessionOptions.owner ?? defaultOwner;
  const userOf = sessionOptions.user ?? (sessionOptions.owner === undefined ? subjectOf : () => undefined);
  const now = sessionOptions.now ?? Date.now;
  if (typeof ownerOf !== 'function') throw new TypeError('createHttpHandler: sessions.owner must be a function');
  if (typeof userOf !== 'function') throw new TypeError('createHttpHandler: sessions.user must be a function');
  if (typeof now !== 'function') throw new TypeError('createHttpHandler: sessions.now must be a function');
  return { max, maxPerUser, maxAnonymous, maxAnonymousPerAddress, idleMs, ownerOf, userOf, now };
}

/** Validates {@link HttpHandlerOptions.trustProxy}: a hop count, 0 to 16. */
export const parseTrustProxy = (value: unknown): number => intOption('createHttpHandler: trustProxy', value, 0, 0, 16);

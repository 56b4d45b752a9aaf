/**
 * The sessions that serve 2025-era clients: each bound to the owner who opened it (each anonymous session its own),
 * bounded in number, per user, for anonymous clients as a class and per client address, and in idle time (see
 * `LegacySessionOptions`).
 */
import {
  type McpHandlerRequestOptions,
  type McpRequestContext,
  type McpServer,
  type Server,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import { UNKNOWN_ADDRESS } from '../client-address.js';
import type { SessionSettings } from './options.js';
import { jsonRpcError } from './responses.js';

interface Session {
  id: string;
  /** The owner every request must match; `undefined` for an anonymous session (its id is its only credential). */
  owner: string | undefined;
  /** The client address an anonymous session counts under (`undefined` for a session with an owner). */
  address: string | undefined;
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

/** Who holds which sessions, open and starting: the counts every bound is checked against. */
interface Ledger {
  /** Open sessions, least recently used first (a use moves a session to the end). */
  readonly open: Map<string, Session>;
  /** Sessions being started, all holders together. */
  readonly starting: number;
  /** The largest number of sessions one holder holds. */
  readonly most: number;
  /** The holder `key`, as it stands (a new one holds nothing). */
  holderOf(key: string): Holder;
  /** A holder holding {@link most} sessions. */
  top(): Holder | undefined;
  /** Anonymous sessions open and starting from the client address `address`. */
  anonymousAt(address: string): number;
  /** Counts a session being started for `holder` (an anonymous one also under its client `address`). */
  reserve(holder: Holder, address: string | undefined): void;
  /** Gives back a reservation that did not become a session. */
  unreserve(holder: Holder, address: string | undefined): void;
  /** The reserved slot becomes the open session: the holder's count does not change. */
  opened(session: Session): void;
  /** Moves a session to the end (most recently used). */
  touch(session: Session, t: number): void;
  /** Removes an open session; false when it was not (or no longer) open. */
  forget(session: Session): boolean;
}

function createLedger(): Ledger {
  const open = new Map<string, Session>();
  /** Holders of at least one session (open or starting), by key. */
  const holders = new Map<string, Holder>();
  /** Holders by how many sessions they hold, and the largest count: who holds the most, in constant time. */
  const byCount = new Map<number, Set<Holder>>();
  /** Anonymous sessions (open and starting) by client address; an address holding none is not kept. */
  const byAddress = new Map<string, number>();
  let most = 0;
  let starting = 0;
  const tally = (address: string | undefined, by: 1 | -1): void => {
    if (address === undefined) return;
    const n = (byAddress.get(address) ?? 0) + by;
    if (n > 0) byAddress.set(address, n);
    else byAddress.delete(address);
  };

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

  return {
    open,
    get starting() {
      return starting;
    },
    get most() {
      return most;
    },
    holderOf: (key) => holders.get(key) ?? { key, sessions: new Map(), starting: 0 },
    top: () => byCount.get(most)?.values().next().value,
    anonymousAt: (address) => byAddress.get(address) ?? 0,
    reserve(holder, address) {
      const before = holds(holder);
      holder.starting++;
      starting++;
      tally(address, 1);
      recount(holder, before);
    },
    unreserve(holder, address) {
      const count = holds(holder);
      holder.starting--;
      starting--;
      tally(address, -1);
      recount(holder, count);
    },
    opened(session) {
      session.holder.starting--;
      starting--;
      open.set(session.id, session);
      session.holder.sessions.set(session.id, session);
    },
    touch(session, t) {
      session.lastUsed = t;
      open.delete(session.id);
      open.set(session.id, session);
      session.holder.sessions.delete(session.id);
      session.holder.sessions.set(session.id, session);
    },
    forget(session) {
      if (open.get(session.id) !== session) return false;
      open.delete(session.id);
      const before = holds(session.holder);
      session.holder.sessions.delete(session.id);
      tally(session.address, -1);
      recount(session.holder, before);
      return true;
    },
  };
}

/** What the sessions take from the handler: a fresh server per session, the error hook, the transport options. */
export interface HandlerParts {
  fresh: (ctx: McpRequestContext) => Promise<McpServer | Server>;
  report: (error: Error) => void;
  maxRequestBodySize: number | undefined;
  keepAliveMs: number | undefined;
}

/** The 2025-era sessions of one handler. */
export interface LegacySessions {
  /**
   * Answers a 2025-era request: starts a session (an `initialize`), or serves it on its owner's session. `address` is
   * the request's client address (see `resolveClientAddress`), which an anonymous session counts under.
   */
  serve(request: Request, requestOptions: McpHandlerRequestOptions | undefined, address: string): Promise<Response>;
  /** Open sessions. */
  readonly count: number;
  /** Refuses new requests and closes every open session. */
  close(): Promise<void>;
}

/** What the steps of a session's life share: the bounds, the handler's parts, the ledger, and how a session ends. */
interface SessionEnv {
  settings: SessionSettings;
  deps: HandlerParts;
  ledger: Ledger;
  /** Whether the handler is closing (a session opened meanwhile is closed at once). */
  closing(): boolean;
  /** Closes a session and forgets it. */
  end(session: Session): Promise<void>;
  /** Closes sessions idle for `idleMs`. */
  sweep(): void;
  /** Closes `holder`'s least recently used open session (at once, for the count); false when none is open yet. */
  evictFrom(holder: Holder): boolean;
  /** The `503` for a session refused, reported with `why`. */
  refuse(why: string): Response;
}

/**
 * Room for one more session of `owner` (`undefined`: anonymous, from the client `address`) in `holder`: `undefined`
 * when there is (room made by closing a least recently used session where the bounds say so), else the `503` refusal.
 */
function room(env: SessionEnv, owner: string | undefined, address: string | undefined, holder: Holder): Response | undefined {
  const { settings, ledger, evictFrom, refuse } = env;
  const { open } = ledger;
  if (owner === undefined) {
    // Anonymous sessions are each their own owner, bounded as a class and per client address (so one caller
    // cannot take the class): a new one never closes another's.
    if (holds(holder) >= settings.maxAnonymous) return refuse(`${holds(holder)} anonymous legacy sessions open (sessions.maxAnonymous)`);
    const atAddress = ledger.anonymousAt(address ?? UNKNOWN_ADDRESS);
    if (atAddress >= settings.maxAnonymousPerAddress) {
      return refuse(`${atAddress} anonymous legacy sessions open from one address (sessions.maxAnonymousPerAddress)`);
    }
  } else if (holds(holder) >= settings.maxPerUser && !evictFrom(holder)) {
    return refuse(`${holds(holder)} legacy sessions of one user starting (sessions.maxPerUser)`);
  }
  if (open.size + ledger.starting >= settings.max) {
    // Room is made from whoever holds the most, when that is the newcomer or holds at least two more than it does
    // (so a hoarder cannot lock others out, and equal holders do not evict each other); anonymous newcomers never.
    const top: Holder | undefined = owner === undefined ? undefined : ledger.top();
    const fair = top !== undefined && (top === holder || ledger.most >= holds(holder) + 2);
    if (!fair || !evictFrom(top)) return refuse(`${open.size + ledger.starting} legacy sessions open (sessions.max)`);
  }
  return undefined;
}

/**
 * Starts a session for `owner` (`undefined`: anonymous, counted under its client `address` too), counted against the
 * holder `key`. Every bound is checked and the slot reserved before the first await, so concurrent starts cannot all
 * pass the same check.
 */
async function startSession(
  env: SessionEnv,
  request: Request,
  requestOptions: McpHandlerRequestOptions | undefined,
  owner: string | undefined,
  key: string,
  address: string | undefined,
): Promise<Response> {
  const { deps, ledger, end } = env;
  const { fresh, report } = deps;
  env.sweep();
  const holder = ledger.holderOf(key);
  const refused = room(env, owner, address, holder);
  if (refused !== undefined) return refused;
  // Reserved now, released below unless the session opened.
  let reserved = true;
  ledger.reserve(holder, address);
  const release = (): void => {
    if (!reserved) return;
    reserved = false;
    ledger.unreserve(holder, address);
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
    ...(deps.maxRequestBodySize !== undefined && { maxRequestBodySize: deps.maxRequestBodySize }),
    ...(deps.keepAliveMs !== undefined && { keepAliveMs: deps.keepAliveMs }),
    onsessioninitialized: (id) => {
      if (!reserved || session !== undefined) return;
      reserved = false;
      session = { id, owner, address, holder, transport, server, lastUsed: env.settings.now() };
      ledger.opened(session);
    },
    onsessionclosed: () => {
      if (session !== undefined) void end(session);
    },
  });
  transport.onerror = report;
  return await handleStart(env, request, requestOptions, server, transport, () => session, release);
}

/** The first request of a would-be session (an `initialize`); nothing stays behind when no session opened. */
async function handleStart(
  env: SessionEnv,
  request: Request,
  requestOptions: McpHandlerRequestOptions | undefined,
  server: McpServer | Server,
  transport: WebStandardStreamableHTTPServerTransport,
  opened: () => Session | undefined,
  release: () => void,
): Promise<Response> {
  const { report } = env.deps;
  let response: Response;
  try {
    await server.connect(transport);
    response = await transport.handleRequest(request, requestOptions);
  } catch (error) {
    release();
    const session = opened();
    if (session !== undefined) await env.end(session);
    else {
      await transport.close().catch(report);
      await server.close().catch(report);
    }
    throw error;
  }
  release();
  const session = opened();
  if (session !== undefined && env.closing()) {
    await env.end(session);
  } else if (session === undefined) {
    // Not an initialize (or a refused one): no session was opened, so nothing may stay behind.
    await transport.close().catch(report);
    await server.close().catch(report);
  }
  return response;
}

export function createLegacySessions(settings: SessionSettings, deps: HandlerParts): LegacySessions {
  const { idleMs, ownerOf, userOf, now } = settings;
  const { report } = deps;
  const ledger = createLedger();
  const { open } = ledger;
  let closing = false;

  const end = async (session: Session): Promise<void> => {
    ledger.forget(session);
    await session.transport.close().catch(report);
    await session.server.close().catch(report);
  };
  const env: SessionEnv = {
    settings,
    deps,
    ledger,
    closing: () => closing,
    end,
    sweep() {
      const t = now();
      // Idle sessions are the first in `open`, so this stops at the first live one.
      for (const session of open.values()) {
        if (t - session.lastUsed < idleMs) break;
        void end(session);
      }
    },
    evictFrom(holder) {
      const oldest = holder.sessions.values().next().value;
      if (oldest === undefined) return false;
      void end(oldest);
      return true;
    },
    refuse(why) {
      report(new Error(`createHttpHandler: ${why}: a new one was refused`));
      return jsonRpcError(503, -32000, 'Too many open sessions; try again later', { 'retry-after': '5' });
    },
  };

  async function serve(request: Request, requestOptions: McpHandlerRequestOptions | undefined, address: string): Promise<Response> {
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
      if (owner === undefined) return startSession(env, request, requestOptions, undefined, 'a', address);
      const user = userOf(authInfo);
      if (user !== undefined && typeof user !== 'string') {
        report(new TypeError('createHttpHandler: sessions.user must return a string or undefined'));
        return jsonRpcError(500, -32603, 'Internal error');
      }
      // Holder keys by kind, so a user, an owner counted as its own user and the anonymous class never collide.
      return startSession(env, request, requestOptions, owner, user === undefined ? `o${owner}` : `u${user}`, undefined);
    }
    const session = open.get(id);
    // Unknown, idled out, or another owner's: the same 404, which tells a client to start a new session.
    if (session === undefined || session.owner !== owner || now() - session.lastUsed >= idleMs) {
      if (session !== undefined && session.owner === owner) void end(session);
      return jsonRpcError(404, -32001, 'Session not found');
    }
    ledger.touch(session, now());
    return session.transport.handleRequest(request, requestOptions);
  }

  return {
    serve,
    get count() {
      return open.size;
    },
    async close() {
      closing = true;
      await Promise.all([...open.values()].map(end));
    },
  };
}

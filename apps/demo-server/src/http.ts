import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AuthInfo } from '@modelcontextprotocol/server';
import type { HttpHandler } from '@mrtr/mcp-server/http';
import { type TokenTable, tokenDigest } from './config.js';
import { METRICS_PATH } from './observe.js';
import { type PageOptions, serveConnectPage } from './pages.js';
import { isPlaygroundPath, type PlaygroundAssets, servePlayground } from './playground.js';
import { type RejectionLog, requestPrincipal } from './rejections.js';

/**
 * Largest accepted MCP request body: 384 KiB. The largest legitimate request of the demo tools is a
 * later round of delete_files: 100 paths of up to 1,024 UTF-16 units each, sent as UTF-8 (at most 3 bytes
 * per unit: ~300 KiB), plus a requestState (at most 16 KiB) and the envelope and answers (a few KiB).
 * summarize's later round is smaller: 20,000 units of text (at most ~59 KiB) + 16 KiB state + the sample.
 */
export const MAX_BODY_BYTES = 384 * 1024;
/** Deepest JSON nesting (`[` / `{`) accepted; checked by a linear scan before anything parses the body. */
export const MAX_JSON_DEPTH = 64;
export const MCP_PATH = '/mcp';
/** The playground page's view of its own recent rejection codes (same auth as {@link MCP_PATH}). */
export const REJECTIONS_PATH = '/rejections';
/** Time a client has to send the request headers. */
export const HEADERS_TIMEOUT_MS = 10_000;
/** Time a client has to send the whole request. */
export const REQUEST_TIMEOUT_MS = 30_000;
/**
 * How often Node checks the two timeouts above. Node's default is 30 s, which made the 10 s header
 * timeout effectively ~30-40 s; 1 s keeps it within a second of the documented value.
 */
export const CONNECTIONS_CHECK_INTERVAL_MS = 1_000;

/**
 * Whether the nesting of `[`/`{` in `body`, outside strings (escapes handled), exceeds `limit`. One pass
 * over the bytes, stopping at the first level too deep; the bytes of multi-byte UTF-8 characters never
 * equal the ASCII ones tested. Malformed JSON is left to the parser.
 */
export function jsonDepthExceeds(body: Uint8Array, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (inString) {
      if (c === 0x5c /* \\ */)
        i++; // skip the escaped byte (\" or \\ included)
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > limit) return true;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      depth--;
    }
  }
  return false;
}

export interface HttpOptions {
  /** The SDK handler; `undefined` when MCP is served on stdio (then only the connect pages are served). */
  handler: HttpHandler | undefined;
  /** Bearer tokens; `undefined` = anonymous. */
  tokens: TokenTable | undefined;
  /** The address the server binds (for the Host allow-list). */
  bindHost: string;
  /** Extra allowed Host values (`host[:port]`, lower case). */
  extraHosts: readonly string[];
  pages: PageOptions;
  /** More MCP endpoints by path (`--codec all`: `/mcp/hmac`, `/mcp/jwe`, `/mcp/aead`), same checks as `/mcp`. */
  extraHandlers?: ReadonlyMap<string, HttpHandler> | undefined;
  /** The playground page (`GET /`); `undefined` = not served (stdio mode, or its files were not built). */
  playground?: PlaygroundAssets | undefined;
  /** Recent rejection codes per principal, for `GET /rejections`; `undefined` = not served. */
  rejections?: RejectionLog | undefined;
  /** The principal of every request without tokens (default `anonymous`). */
  anonymousPrincipal?: string | undefined;
  /** Out-of-band errors (never reach the client). */
  onError(error: unknown): void;
  /** Serves `GET /metrics` (Prometheus text), behind the same bearer tokens as /mcp. */
  metrics?: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  /** Open connections accepted at once; one more is closed on arrival (and reported to `onError`). */
  maxConnections?: number | undefined;
  /** Overrides of the timeouts (tests use short ones). */
  headersTimeoutMs?: number | undefined;
  requestTimeoutMs?: number | undefined;
  connectionsCheckingIntervalMs?: number | undefined;
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
const WILDCARDS = new Set(['0.0.0.0', '::', '[::]']);

export const isLoopbackHost = (host: string): boolean => {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || h === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(h);
};

/** `::1` → `[::1]` (URL / Host header form). */
export const bracketed = (host: string): string => (host.includes(':') && !host.startsWith('[') ? `[${host}]` : host);

/**
 * Host header values this server answers to: the loopback names and the bound address (unless it is a
 * wildcard) with the real port, plus MRTR_DEMO_ALLOWED_HOSTS. Anything else is a DNS-rebinding attempt
 * or a misrouted request.
 */
export function allowedHosts(bindHost: string, port: number, extra: readonly string[]): Set<string> {
  const names = new Set(LOOPBACK_NAMES);
  const bound = bracketed(bindHost.toLowerCase());
  if (!WILDCARDS.has(bound) && !WILDCARDS.has(bindHost)) names.add(bound);
  const hosts = new Set<string>();
  for (const name of names) {
    hosts.add(`${name}:${port}`);
    if (port === 80) hosts.add(name);
  }
  for (const host of extra) hosts.add(host.toLowerCase());
  return hosts;
}

/**
 * Origin check: absent (non-browser clients) is fine; otherwise the origin must be a loopback origin or
 * one of the allowed hosts (same origin). `null` and unparsable origins are refused.
 */
export function originAllowed(origin: string | undefined, hosts: ReadonlySet<string>): boolean {
  if (origin === undefined) return true;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return false;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return false;
  if (isLoopbackHost(url.hostname)) return true;
  return hosts.has(url.host.toLowerCase());
}

function jsonError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}, code = -32600): void {
  const body = JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** What a refused body may still send before its connection is closed (see {@link refuseBody}). */
const LINGER_BYTES = 2 * MAX_BODY_BYTES;

/**
 * Answers 413 and keeps reading (and discarding) what the client is still sending: closing a socket with
 * unread data makes the kernel reset it, and a reset can destroy the 413 before the client reads it. A client
 * that sends more than {@link LINGER_BYTES} after the refusal is cut off (the request timeout bounds the time).
 */
function refuseBody(req: IncomingMessage, res: ServerResponse): void {
  jsonError(res, 413, 'Request body too large', {});
  let drained = 0;
  req.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > LINGER_BYTES) req.socket.destroy();
  });
  req.resume();
}

/** Reads at most `limit` bytes; `undefined` when the body is larger (the caller answers 413). */
function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (value: Buffer | undefined, error?: unknown) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onFail);
      if (error !== undefined) reject(error);
      else resolve(value);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish(undefined);
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => finish(Buffer.concat(chunks));
    const onFail = (error: unknown) => finish(undefined, error);
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onFail);
  });
}

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'upgrade',
  'proxy-connection',
  'te',
  'trailer',
]);

function toWebRequest(req: IncomingMessage, url: URL, body: Buffer | undefined, signal: AbortSignal): Request {
  const headers = new Headers();
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (!HOP_BY_HOP.has(name)) headers.append(name, raw[i + 1]!);
  }
  const init: RequestInit = { method: req.method ?? 'GET', headers, signal };
  if (body !== undefined && body.length > 0) init.body = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  return new Request(url, init);
}

/**
 * The SDK answers some failures with the exception text in `error.data` (e.g. `"Parse error"` with
 * `data: String(error)`). A JSON-RPC error whose `data` is a string loses it here (reported instead);
 * structured `data` (the MRTR rejection reason, required capabilities) is part of the protocol and stays.
 */
function scrubErrorData(body: Buffer, onError: (error: unknown) => void): Buffer {
  let message: unknown;
  try {
    message = JSON.parse(body.toString('utf8'));
  } catch {
    return body;
  }
  const error = (message as { error?: { data?: unknown } } | null)?.error;
  if (error === null || typeof error !== 'object' || typeof error.data !== 'string') return body;
  onError(new Error(`error detail withheld from the client: ${error.data}`));
  delete error.data;
  return Buffer.from(JSON.stringify(message), 'utf8');
}

async function writeWebResponse(response: Response, res: ServerResponse, onError: (error: unknown) => void): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value;
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) headers['set-cookie'] = cookies;
  if (response.body === null) {
    res.writeHead(response.status, headers);
    res.end();
    return;
  }
  if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    // A plain JSON answer: one write with a length (no chunked encoding).
    let body: Buffer = Buffer.from(await response.arrayBuffer());
    if (response.status >= 400) body = scrubErrorData(body, onError);
    headers['content-length'] = String(body.length);
    res.writeHead(response.status, headers);
    res.end(body);
    return;
  }
  // SSE: stream each frame as it comes (progress notifications before the result).
  res.writeHead(response.status, headers);
  const reader = response.body.getReader();
  const stop = () => {
    reader.cancel().catch(() => {});
  };
  res.once('close', stop);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!res.write(value)) await new Promise<void>((resolve) => res.once('drain', resolve));
    }
    res.end();
  } finally {
    res.off('close', stop);
  }
}

/** The bearer token's principal as the SDK's `AuthInfo`; `undefined` without a known token. */
/** The HTTP front: hygiene checks, bearer auth, the MCP endpoint and the connect pages. */
export function createHttpServer(options: HttpOptions): Server {
  let hosts: Set<string> | undefined;
  // Bounded time to send headers and the whole request (slow senders on /mcp and the connect pages),
  // checked every second (Node's default check interval is 30 s).
  const server = createServer(
    {
      headersTimeout: options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS,
      requestTimeout: options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: options.connectionsCheckingIntervalMs ?? CONNECTIONS_CHECK_INTERVAL_MS,
    },
    (req, res) => {
      handle(req, res).catch((error: unknown) => {
        options.onError(error);
        if (!res.headersSent) jsonError(res, 500, 'Internal error', {}, -32603);
        else res.destroy();
      });
    },
  );
  if (options.maxConnections !== undefined) server.maxConnections = options.maxConnections;
  let dropped = 0;
  server.on('drop', () => {
    // One line per power of two, so a flood cannot flood the log either.
    dropped++;
    if ((dropped & (dropped - 1)) === 0) {
      options.onError(new Error(`connection limit (${server.maxConnections}) reached: ${dropped} connection(s) refused so far`));
    }
  });
  server.on('listening', () => {
    const port = (server.address() as AddressInfo).port;
    hosts = allowedHosts(options.bindHost, port, options.extraHosts);
  });

  /** The caller's principal (and the SDK's `authInfo` with tokens); `undefined` after answering 401. */
  function authenticate(req: IncomingMessage, res: ServerResponse): { principal: string; authInfo: AuthInfo | undefined } | undefined {
    if (options.tokens === undefined) return { principal: options.anonymousPrincipal ?? 'anonymous', authInfo: undefined };
    const header = req.headers.authorization ?? '';
    const match = /^Bearer ([\x21-\x7e]+)$/i.exec(header);
    const principal = match === null ? undefined : options.tokens.get(tokenDigest(match[1]!));
    if (principal === undefined) {
      jsonError(res, 401, 'Unauthorized', { 'www-authenticate': 'Bearer realm="mrtr-demo"' });
      return undefined;
    }
    const authInfo: AuthInfo = { token: tokenDigest(match![1]!), clientId: 'mrtr-demo-bearer', scopes: [], extra: { sub: principal } };
    return { principal, authInfo };
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('x-content-type-options', 'nosniff');
    // 1. Host allow-list (DNS rebinding): 421 Misdirected Request — this server is not the origin the
    //    request was meant for. Checked first, for every path.
    const host = (req.headers.host ?? '').toLowerCase();
    if (hosts === undefined || !hosts.has(host)) {
      jsonError(res, 421, 'Misdirected request: Host not allowed');
      return;
    }
    // 2. Origin: browsers send it; a foreign origin is refused.
    if (!originAllowed(req.headers.origin, hosts)) {
      jsonError(res, 403, 'Forbidden: Origin not allowed');
      return;
    }
    const target = req.url ?? '';
    if (!target.startsWith('/')) {
      jsonError(res, 400, 'Bad request target');
      return;
    }
    const url = new URL(`http://${host}${target}`);

    if (url.pathname.startsWith('/connect/')) {
      await serveConnectPage(req, res, url.pathname.slice('/connect/'.length), options.pages);
      return;
    }
    if (url.pathname === METRICS_PATH && options.metrics !== undefined) {
      if (req.method !== 'GET') {
        jsonError(res, 405, 'Method not allowed', { allow: 'GET' });
        return;
      }
      if (authenticate(req, res) === undefined) return;
      options.metrics(req, res);
      return;
    }
    if (url.pathname === REJECTIONS_PATH && options.rejections !== undefined && options.handler !== undefined) {
      if (req.method !== 'GET') {
        jsonError(res, 405, 'Method not allowed', { allow: 'GET' });
        return;
      }
      const who = authenticate(req, res);
      if (who === undefined) return;
      const body = JSON.stringify({ rejections: options.rejections.recent(who.principal) });
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    if (options.playground !== undefined && options.handler !== undefined && isPlaygroundPath(url.pathname)) {
      servePlayground(req, res, url.pathname, options.playground);
      return;
    }
    const handler = url.pathname === MCP_PATH ? options.handler : options.extraHandlers?.get(url.pathname);
    if (handler === undefined) {
      jsonError(res, 404, 'Not found');
      return;
    }
    // 3. POST for every request; GET (a session's stream) and DELETE (its end) only for 2025-era sessions, which
    //    carry an Mcp-Session-Id (2026-07-28 has neither: the handler answers any other GET/DELETE itself).
    if (req.method !== 'POST' && req.method !== 'GET' && req.method !== 'DELETE') {
      jsonError(res, 405, 'Method not allowed', { allow: 'POST, GET, DELETE' });
      return;
    }
    // 4. Bearer auth when tokens are configured.
    const who = authenticate(req, res);
    if (who === undefined) return;
    const { authInfo } = who;
    let body: Buffer | undefined;
    if (req.method === 'POST') {
      // 5. Body cap, before anything is parsed.
      const declared = Number(req.headers['content-length'] ?? '0');
      if (!Number.isFinite(declared) || declared > MAX_BODY_BYTES) {
        refuseBody(req, res);
        return;
      }
      body = await readBody(req, MAX_BODY_BYTES);
      if (body === undefined) {
        refuseBody(req, res);
        return;
      }
      // 6. Nesting cap, before anything is parsed: JSON.parse of deeply nested input is far costlier than its size.
      if (jsonDepthExceeds(body, MAX_JSON_DEPTH)) {
        jsonError(res, 400, `Parse error: JSON nested deeper than ${MAX_JSON_DEPTH} levels`, {}, -32700);
        return;
      }
    }
    const abort = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const request = toWebRequest(req, url, body, abort.signal);
    // The socket's peer: anonymous callers are bounded per client address (with --trust-proxy, read from X-Forwarded-For).
    const remoteAddress = req.socket.remoteAddress;
    const response = await requestPrincipal.run(who.principal, () =>
      handler.fetch(request, { ...(authInfo !== undefined && { authInfo }), ...(remoteAddress !== undefined && { remoteAddress }) }),
    );
    await writeWebResponse(response, res, options.onError);
  }

  return server;
}

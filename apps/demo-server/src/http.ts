import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AuthInfo, McpHttpHandler } from '@modelcontextprotocol/server';
import { type TokenTable, tokenDigest } from './config.js';
import { type PageOptions, serveConnectPage } from './pages.js';

/** Largest accepted MCP request body. */
export const MAX_BODY_BYTES = 1024 * 1024;
export const MCP_PATH = '/mcp';

export interface HttpOptions {
  /** The SDK handler; `undefined` when MCP is served on stdio (then only the connect pages are served). */
  handler: McpHttpHandler | undefined;
  /** Bearer tokens; `undefined` = anonymous. */
  tokens: TokenTable | undefined;
  /** The address the server binds (for the Host allow-list). */
  bindHost: string;
  /** Extra allowed Host values (`host[:port]`, lower case). */
  extraHosts: readonly string[];
  pages: PageOptions;
  /** Out-of-band errors (never reach the client). */
  onError(error: unknown): void;
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

function jsonError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  const body = JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32600, message } });
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
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

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade', 'proxy-connection', 'te', 'trailer']);

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

async function writeWebResponse(response: Response, res: ServerResponse): Promise<void> {
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
    const body = Buffer.from(await response.arrayBuffer());
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

/** The HTTP front: hygiene checks, bearer auth, the MCP endpoint and the connect pages. */
export function createHttpServer(options: HttpOptions): Server {
  let hosts: Set<string> | undefined;
  // Bounded time to send headers and the whole request (slow senders on /mcp and the connect pages).
  const server = createServer({ headersTimeout: 10_000, requestTimeout: 30_000 }, (req, res) => {
    handle(req, res).catch((error: unknown) => {
      options.onError(error);
      if (!res.headersSent) jsonError(res, 500, 'Internal error');
      else res.destroy();
    });
  });
  server.on('listening', () => {
    const port = (server.address() as AddressInfo).port;
    hosts = allowedHosts(options.bindHost, port, options.extraHosts);
  });

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
    if (url.pathname !== MCP_PATH || options.handler === undefined) {
      jsonError(res, 404, 'Not found');
      return;
    }
    // 3. Only POST: no standalone SSE stream (GET) and no sessions to delete (DELETE) in 2026-07-28.
    if (req.method !== 'POST') {
      jsonError(res, 405, 'Method not allowed', { allow: 'POST' });
      return;
    }
    // 4. Bearer auth when tokens are configured.
    let authInfo: AuthInfo | undefined;
    if (options.tokens !== undefined) {
      const header = req.headers.authorization ?? '';
      const match = /^Bearer ([\x21-\x7e]+)$/i.exec(header);
      const principal = match === null ? undefined : options.tokens.get(tokenDigest(match[1]!));
      if (principal === undefined) {
        jsonError(res, 401, 'Unauthorized', { 'www-authenticate': 'Bearer realm="mrtr-demo"' });
        return;
      }
      authInfo = { token: tokenDigest(match![1]!), clientId: 'mrtr-demo-bearer', scopes: [], extra: { sub: principal } };
    }
    // 5. Body cap, before anything is parsed.
    const declared = Number(req.headers['content-length'] ?? '0');
    if (!Number.isFinite(declared) || declared > MAX_BODY_BYTES) {
      jsonError(res, 413, 'Request body too large', { connection: 'close' });
      req.resume();
      return;
    }
    const body = await readBody(req, MAX_BODY_BYTES);
    if (body === undefined) {
      jsonError(res, 413, 'Request body too large', { connection: 'close' });
      req.resume();
      return;
    }
    const abort = new AbortController();
    res.once('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const request = toWebRequest(req, url, body, abort.signal);
    const response = await options.handler.fetch(request, authInfo === undefined ? {} : { authInfo });
    await writeWebResponse(response, res);
  }

  return server;
}

import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createMcpHandler, type McpHttpHandler, type ServerContext } from '@modelcontextprotocol/server';
import { createMrtr } from '@mrtr/mcp-server';
import { type Backend, BackendError, openBackend } from './backend.js';
import { createCodec } from './codecs.js';
import {
  DEFAULT_REDIS_URL,
  parseCli,
  readAllowedHosts,
  readConnectWaitMs,
  readKeys,
  readTokens,
  USAGE,
  UsageError,
} from './config.js';
import { bracketed, createHttpServer, isLoopbackHost, MAX_BODY_BYTES, MCP_PATH } from './http.js';
import { createServerFactory } from './server.js';

/** Audience bound into every state: every instance of one fleet uses the same one. */
export const AUDIENCE = 'mrtr-demo';

export interface Io {
  out(line: string): void;
  err(line: string): void;
}

const processIo: Io = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

/** Runs the demo until SIGINT/SIGTERM (or stdin closes in --stdio mode). Resolves with the exit code. */
export async function run(argv: readonly string[], env: NodeJS.ProcessEnv = process.env, io: Io = processIo): Promise<number> {
  let cli: ReturnType<typeof parseCli>;
  let keys: ReturnType<typeof readKeys>;
  let tokens: ReturnType<typeof readTokens>;
  let extraHosts: string[];
  let connectWaitMs: number;
  try {
    cli = parseCli(argv);
    if (cli.help) {
      io.out(USAGE);
      return 0;
    }
    keys = readKeys(env);
    tokens = readTokens(env);
    extraHosts = readAllowedHosts(env);
    connectWaitMs = readConnectWaitMs(env);
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`mrtr-demo: ${error.message}`);
      io.err('Run mrtr-demo --help for usage.');
      return 2;
    }
    throw error;
  }
  // In --stdio mode stdout carries JSON-RPC: every human-readable line goes to stderr.
  const say = cli.stdio ? io.err : io.out;
  const warn = (line: string) => io.err(`mrtr-demo: warning: ${line}`);

  if (keys.ephemeral) {
    warn('MRTR_KEYS is not set: using an ephemeral key. States from this process are refused by every other instance');
    warn('and after a restart; multi-instance deployments need the same MRTR_KEYS on every instance.');
  }
  if (cli.stdio && tokens !== undefined) warn('MRTR_DEMO_TOKENS is ignored with --stdio (the stdio client is the local user).');
  if (!cli.stdio && tokens === undefined) {
    warn('MRTR_DEMO_TOKENS is not set: running without authentication, every caller is the principal "anonymous".');
  }
  if (!isLoopbackHost(cli.host) && tokens === undefined && !cli.stdio) {
    warn(`binding to ${cli.host} without MRTR_DEMO_TOKENS exposes the demo to the network unauthenticated.`);
  }

  const codec = await createCodec(cli.codec, keys.keys);
  let backend: Backend;
  try {
    backend = await openBackend(cli.store, {
      sqliteFile: cli.sqliteFile,
      redisUrl: env.REDIS_URL || DEFAULT_REDIS_URL,
      databaseUrl: env.DATABASE_URL,
      namespace: AUDIENCE,
    });
  } catch (error) {
    if (error instanceof BackendError) {
      io.err(`mrtr-demo: ${error.message}`);
      return 1;
    }
    throw error;
  }

  const fixedPrincipal = cli.stdio ? 'local' : 'anonymous';
  const flowTtlMs = Math.max(1_800_000, cli.ttlMs);
  const mrtr = createMrtr({
    codec,
    keys: keys.keys,
    store: backend.store,
    audience: AUDIENCE,
    ttlMs: cli.ttlMs,
    flowTtlMs,
    unauthenticated: cli.stdio || tokens === undefined ? { principal: fixedPrincipal } : 'reject',
    onReject: ({ code, method, target }) => io.err(`mrtr-demo: rejected ${method} ${target ?? '-'}: ${code}`),
  });

  let handler: McpHttpHandler | undefined;
  let pageOrigin: string | undefined;
  const factory = createServerFactory({
    mrtr,
    fixtures: cli.fixtures === 'conformance',
    notifier: () => handler?.notify,
    ledger: backend.ledger,
    connectWaitMs,
    linkTtlMs: flowTtlMs,
    principalOf(ctx: ServerContext): string {
      const sub = (ctx.http?.authInfo?.extra as Record<string, unknown> | undefined)?.sub;
      return typeof sub === 'string' && sub.length > 0 ? sub : fixedPrincipal;
    },
    pageOrigin(ctx: ServerContext): string | undefined {
      // Over HTTP: the origin this request reached (its Host passed the allow-list). Over stdio: the page listener.
      const url = ctx.http?.req?.url;
      return url === undefined ? pageOrigin : new URL(url).origin;
    },
  });

  const onError = (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    io.err(`mrtr-demo: error: ${message}`);
  };
  if (!cli.stdio) {
    handler = createMcpHandler(factory, { maxRequestBodySize: MAX_BODY_BYTES, onerror: onError });
  }
  const server = createHttpServer({
    handler,
    tokens: cli.stdio ? undefined : tokens,
    bindHost: cli.host,
    extraHosts,
    pages: { ledger: backend.ledger, tokens: cli.stdio ? undefined : tokens },
    onError,
  });
  try {
    await listen(server, cli.host, cli.port);
  } catch (error) {
    io.err(`mrtr-demo: cannot listen on ${cli.host}:${cli.port}: ${error instanceof Error ? error.message : String(error)}`);
    await backend.close().catch(() => {});
    return 1;
  }
  const { port } = server.address() as AddressInfo;
  const origin = `http://${bracketed(cli.host)}:${port}`;
  pageOrigin = origin;
  const summary = `codec: ${cli.codec}, store: ${cli.store} (${backend.detail}), auth: ${
    cli.stdio ? 'local' : tokens === undefined ? 'anonymous' : `bearer tokens (${new Set(tokens.values()).size} principals)`
  }${cli.fixtures === 'conformance' ? ', fixtures: conformance' : ''}`;

  let stdioHandle: { close(): Promise<void> } | undefined;
  if (cli.stdio) {
    const { serveStdio } = await import('@modelcontextprotocol/server/stdio');
    stdioHandle = serveStdio(factory, { onerror: onError });
    say(`mrtr-demo serving MCP on stdio; connect pages on ${origin}/connect/ (${summary})`);
  } else {
    say(`mrtr-demo listening on ${origin}${MCP_PATH} (${summary})`);
  }

  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = async (reason: string) => {
      if (stopping) return;
      stopping = true;
      io.err(`mrtr-demo: ${reason}, shutting down`);
      const force = setTimeout(() => server.closeAllConnections(), 2000);
      force.unref();
      const closed = new Promise<void>((done) => server.close(() => done()));
      server.closeIdleConnections();
      try {
        await stdioHandle?.close();
        await handler?.close();
        await closed;
        await backend.close();
        clearTimeout(force);
        resolve(0);
      } catch (error) {
        onError(error);
        resolve(1);
      }
    };
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        io.err(`mrtr-demo: ${signal} again, exiting now`);
        process.exit(1);
      }
      void stop(`received ${signal}`);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    if (cli.stdio) process.stdin.once('end', () => void stop('stdin closed'));
  });
}

function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (error: Error) => reject(error);
    server.once('error', onError);
    server.listen({ host: host.replace(/^\[|\]$/g, ''), port }, () => {
      server.off('error', onError);
      resolve();
    });
  });
}

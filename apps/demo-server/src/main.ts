import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { ServerContext } from '@modelcontextprotocol/server';
import { MrtrError, type StateGuard } from '@mrtr/core';
import { DEFAULT_OUTCOME_BUDGET_BYTES, storeCapabilities } from '@mrtr/core/store';
import { createMrtr } from '@mrtr/mcp-server';
import { createHttpHandler, type HttpHandler } from '@mrtr/mcp-server/http';
import { type Backend, BackendError, openBackend } from './backend.js';
import { loadCodec } from './codecs.js';
import {
  CLOCK_SKEW_MS,
  CODECS,
  type CodecName,
  DEFAULT_REDIS_URL,
  mintQuotaFor,
  parseCli,
  readAllowedHosts,
  readClockOffsetMs,
  readFaultAids,
  type FaultAids,
  readConnectWaitMs,
  readKeys,
  readLedgerLimits,
  PRINCIPAL_STORE_SHARE,
  readNamespace,
  readTokens,
  usageFor,
  UsageError,
} from './config.js';
import { bracketed, createHttpServer, isLoopbackHost, MAX_BODY_BYTES, MCP_PATH } from './http.js';
import { createObservability } from './observe.js';
import { loadPlayground } from './playground.js';
import { RejectionLog, requestPrincipal } from './rejections.js';
import { createServerFactory } from './server.js';
import { demoTargets } from './tools/index.js';

/** Audience bound into every state: every instance of one fleet uses the same one. */
export const AUDIENCE = 'mrtr-demo';

export interface Io {
  out(line: string): void;
  err(line: string): void;
  /** Whether `err` writes to a terminal (the default --log is then pretty). */
  errIsTTY?: boolean;
}

const processIo: Io = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  errIsTTY: process.stderr.isTTY === true,
};

/**
 * The effect hook, or (test aid MRTR_DEMO_CRASH_AFTER_EFFECT) one that kills this process right after the named tool's
 * effect, before its outcome is recorded: what an instance dying mid-round looks like to the fleet.
 */
function crashAfter<T extends string>(
  tool: string | undefined,
  effect: (tool: T, count: number) => void,
  say: (line: string) => void,
): (tool: T, count: number) => void {
  if (tool === undefined) return effect;
  return (name, count) => {
    effect(name, count);
    if (name !== tool) return;
    say(`mrtr-demo: ${name} effect done; crashing before its outcome is recorded (MRTR_DEMO_CRASH_AFTER_EFFECT)`);
    process.kill(process.pid, 'SIGKILL');
  };
}

/**
 * This instance's offset from the store's clock, measured at start (a store that declares `clock`), as one line; past
 * the tolerance the instance still starts, and refuses every spend and mint with ERR_CLOCK_SKEW until its clock is
 * fixed (the `mrtr_clock_skew` gauge shows it). `undefined` with a store without a clock.
 */
export async function clockReport(guard: Pick<StateGuard, 'checkClock' | 'store'>): Promise<string | undefined> {
  if (guard.store === undefined || !storeCapabilities(guard.store).clock) return undefined;
  try {
    const { offsetMs, skewed } = await guard.checkClock();
    const offset = `${offsetMs >= 0 ? '+' : ''}${Math.round(offsetMs)} ms`;
    return skewed
      ? `this instance's clock is ${offset} off the store's, past the ${CLOCK_SKEW_MS} ms tolerated: every request state is refused (ERR_CLOCK_SKEW) until its time is fixed (NTP)`
      : `clock offset from the store: ${offset} (within ${CLOCK_SKEW_MS} ms)`;
  } catch (error) {
    return `could not read the store's clock at start (${error instanceof Error ? error.message : String(error)}): it is measured again on the first request`;
  }
}

/**
 * What the fleet check (`guard.checkKeys()`) found wrong, as one line naming the kid, the namespace that holds the
 * fleet's record and until when, and the fix; `undefined` when fine.
 */
export async function fleetKeyProblem(guard: Pick<StateGuard, 'checkKeys'>, namespace: string): Promise<string | undefined> {
  try {
    await guard.checkKeys();
    return undefined;
  } catch (error) {
    if (MrtrError.is(error) && error.code === 'ERR_KEY_MISMATCH') {
      const { kid, reason, expiresAtMs } = error;
      const what =
        reason === 'missing'
          ? `the fleet on this store seals with kid "${kid}" and MRTR_KEYS lacks it (this instance's keys are behind)`
          : `MRTR_KEYS holds another secret under kid "${kid}" than the fleet on this store`;
      const date = new Date(expiresAtMs ?? Number.NaN);
      const until = Number.isNaN(date.getTime()) ? 'until it expires' : `until ${date.toISOString()}`;
      return (
        `${what}: give every instance the same MRTR_KEYS, or run a separate fleet under its own MRTR_DEMO_NAMESPACE (now "${namespace}"); ` +
        `namespace "${namespace}" holds the fleet's record of kid "${kid}" ${until}: if no instance runs under those keys any more (a restart with new keys), wait ${until} or use another MRTR_DEMO_NAMESPACE`
      );
    }
    const code = MrtrError.is(error) ? error.code : 'an error';
    return `the fleet key check failed (${code}): the store did not answer; nothing was served`;
  }
}

/** Everything read from the command line and the environment before anything starts. */
interface Settings {
  cli: ReturnType<typeof parseCli>;
  keys: Awaited<ReturnType<typeof readKeys>>;
  tokens: ReturnType<typeof readTokens>;
  extraHosts: string[];
  connectWaitMs: number;
  ledgerLimits: ReturnType<typeof readLedgerLimits>;
  namespace: string;
  clockOffsetMs: number;
  faultAids: FaultAids;
}

/** The settings, or the exit code when there is nothing to run (help printed: 0; a usage error: 2). */
async function readSettings(argv: readonly string[], env: NodeJS.ProcessEnv, io: Io): Promise<Settings | number> {
  try {
    const cli = parseCli(argv);
    if (cli.help) {
      io.out(usageFor(env).usage);
      return 0;
    }
    const settings = {
      cli,
      tokens: readTokens(env),
      extraHosts: readAllowedHosts(env),
      connectWaitMs: readConnectWaitMs(env),
      ledgerLimits: readLedgerLimits(env),
      namespace: readNamespace(env, AUDIENCE),
      clockOffsetMs: readClockOffsetMs(env),
      faultAids: readFaultAids(env),
    };
    // Last: a key file or schedule is followed from here on (stopped on every way out of `run`).
    const keys = await readKeys(env, cli.keysFile, (line) => io.err(`mrtr-demo: warning: ${line}`));
    return { ...settings, keys };
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`mrtr-demo: ${error.message}`);
      io.err(`Run ${usageFor(env).command} --help for usage.`);
      return 2;
    }
    throw error;
  }
}

/** The chosen backend, or the exit code when it cannot serve this configuration (the keys are closed then). */
async function openServingBackend(settings: Settings, env: NodeJS.ProcessEnv, io: Io): Promise<Backend | number> {
  const { cli, keys } = settings;
  let backend: Backend;
  try {
    backend = await openBackend(cli.store, {
      sqliteFile: cli.sqliteFile,
      redisUrl: env.REDIS_URL || DEFAULT_REDIS_URL,
      databaseUrl: env.DATABASE_URL,
      namespace: settings.namespace,
      ledgerLimits: settings.ledgerLimits,
      // The conformance suite starts many tasks as one principal.
      taskLimits: cli.fixtures === 'conformance' ? { maxLivePerPrincipal: 64 } : undefined,
      // The client only ever sees a generic message; the reason is logged here.
      report: (line) => io.err(`mrtr-demo: ${line}`),
    });
  } catch (error) {
    keys.close();
    if (error instanceof BackendError) {
      io.err(`mrtr-demo: ${error.message}`);
      return 1;
    }
    throw error;
  }
  // A key of this process only, with a store other processes share: no other instance could open its states.
  if (keys.ephemeral && storeCapabilities(backend.store).shared) {
    io.err(
      `mrtr-demo: MRTR_KEYS is not set and --store ${cli.store} is shared across processes: set the same MRTR_KEYS on every instance (npx @mrtr/cli keygen), or use --store memory for one instance.`,
    );
    keys.close();
    await backend.close().catch(() => {});
    return 2;
  }
  return backend;
}

/** Warnings print once, after every argument and the backend are known good (a fatal error prints alone). */
function warnAboutSettings({ cli, keys, tokens }: Settings, io: Io): void {
  const warn = (line: string) => io.err(`mrtr-demo: warning: ${line}`);
  if (keys.ephemeral) warn('MRTR_KEYS is not set: an ephemeral key, so states do not survive a restart or reach another instance.');
  if (cli.stdio && tokens !== undefined) warn('MRTR_DEMO_TOKENS is ignored with --stdio (the stdio client is the local user).');
  if (!cli.stdio && tokens === undefined) {
    warn(
      isLoopbackHost(cli.host)
        ? 'MRTR_DEMO_TOKENS is not set: no authentication, every caller is the principal "anonymous".'
        : `MRTR_DEMO_TOKENS is not set and ${cli.host} is not loopback: the demo is open to the network unauthenticated.`,
    );
  }
}

/** What every codec's endpoint shares: the settings, the backend, the log and metrics, the playground's view. */
interface Shared {
  settings: Settings;
  io: Io;
  backend: Backend;
  observability: ReturnType<typeof createObservability>;
  rejections: RejectionLog;
  fixedPrincipal: string;
  flowTtlMs: number;
  codecCount: number;
  onError(error: unknown): void;
  /** The page listener's origin once it listens (over stdio the pages' links point there). */
  pageOrigin(): string | undefined;
}

/** One codec's adapter, MCP server factory and SDK handler, at `path`. */
function createEndpoint(shared: Shared, codec: Awaited<ReturnType<typeof loadCodec>>, name: CodecName) {
  const { settings, backend, observability, fixedPrincipal, flowTtlMs } = shared;
  const { cli, keys, tokens, faultAids, clockOffsetMs } = settings;
  // With --codec all one principal's mint quota (states held at once) is shared out between the three so that its
  // share of the replay store stays what it is with one codec.
  const quota = mintQuotaFor(cli.mintQuota, shared.codecCount);
  const mrtr = createMrtr({
    codec: codec.factory,
    keys: keys.keys,
    store: backend.store,
    audience: AUDIENCE,
    ttlMs: cli.ttlMs,
    flowTtlMs,
    ...(clockOffsetMs !== 0 && { now: () => Date.now() + clockOffsetMs }),
    ...(faultAids.leaseMs !== undefined && { leaseMs: faultAids.leaseMs }),
    // Without tokens every caller is one anonymous principal. Recorded outcomes are returned to it only where its
    // callers are one party: over stdio, or bound to loopback (the person running the demo); open to the network,
    // a copy of someone's spent state must not fetch their result, so an identical retry there is a replay.
    unauthenticated:
      cli.stdio || tokens === undefined ? { principal: fixedPrincipal, recordOutcomes: cli.stdio || isLoopbackHost(cli.host) } : 'reject',
    // No single principal can fill the replay store that every other user depends on.
    // At most `max` minted in any state lifetime (the guard's window), so at most `max` alive at once.
    mintQuota: quota ?? false,
    // The same share of the store's outcome budget (64 MiB) for each principal's kept outcomes as of its entries:
    // safe retry stays on for a busy user (the load check's one principal), and no user can take the budget.
    outcomeQuota: { maxBytes: Math.floor((DEFAULT_OUTCOME_BUDGET_BYTES * PRINCIPAL_STORE_SHARE) / shared.codecCount) },
    // Rejections reach the log through onEvent; onReject feeds the playground's own view.
    onReject: ({ code, method, target }) => shared.rejections.record(requestPrincipal.getStore(), { code, method, target }),
    onEvent: observability.onEvent,
    // The tasks extension (rollout, and the conformance fixtures): tasks live on the chosen backend. Anonymous callers
    // hold at most 4 unfinished tasks here, 2 from one client address (so one caller cannot take them all). The
    // conformance suite runs unauthenticated from one address and starts many tasks at once: both are raised with
    // the store's bound.
    tasks: {
      store: backend.tasks,
      pollIntervalMs: cli.fixtures === 'conformance' ? 200 : 500,
      ...(cli.fixtures === 'conformance' && { maxLiveUnauthenticated: 64, maxLiveUnauthenticatedPerAddress: 64 }),
    },
  });
  let handler: HttpHandler | undefined;
  const factory = createServerFactory({
    mrtr,
    fixtures: cli.fixtures === 'conformance',
    notifier: () => handler?.notify,
    ledger: backend.ledger,
    connectWaitMs: settings.connectWaitMs,
    linkTtlMs: flowTtlMs,
    effect: crashAfter(faultAids.crashAfterEffect, observability.effect, shared.io.err),
    principalOf(ctx: ServerContext): string {
      const sub = (ctx.http?.authInfo?.extra as Record<string, unknown> | undefined)?.sub;
      return typeof sub === 'string' && sub.length > 0 ? sub : fixedPrincipal;
    },
    pageOrigin(ctx: ServerContext): string | undefined {
      // Over HTTP: the origin this request reached (its Host passed the allow-list). Over stdio: the page listener.
      const url = ctx.http?.req?.url;
      return url === undefined ? shared.pageOrigin() : new URL(url).origin;
    },
  });
  // 2026-07-28 clients statelessly; 2025-era clients (SDK 1.x, the v2 client's defaults) on sessions, where the
  // SDK's legacy shim can ask them the tools' questions (the SDK's own stateless fallback cannot ask anything).
  // Anonymous 2025-era sessions: 100 in all, 16 from one client address (the socket's peer, or --trust-proxy hops in).
  if (!cli.stdio)
    handler = createHttpHandler(factory, { maxRequestBodySize: MAX_BODY_BYTES, onerror: shared.onError, trustProxy: cli.trustProxy });
  return { codec: name, path: cli.codec === 'all' ? `${MCP_PATH}/${name}` : MCP_PATH, factory, handler, mrtr };
}

/** Runs the demo until SIGINT/SIGTERM (or stdin closes in --stdio mode). Resolves with the exit code. */
export async function run(argv: readonly string[], env: NodeJS.ProcessEnv = process.env, io: Io = processIo): Promise<number> {
  const settings = await readSettings(argv, env, io);
  if (typeof settings === 'number') return settings;
  const { cli, keys, tokens } = settings;
  // In --stdio mode stdout carries JSON-RPC: every human-readable line goes to stderr.
  const say = cli.stdio ? io.err : io.out;

  // --codec all: the three codecs at once, each on its own path (for the playground's comparison).
  const codecNames: CodecName[] = cli.codec === 'all' ? [...CODECS] : [cli.codec];
  const codecs = await Promise.all(codecNames.map((name) => loadCodec(name, keys.keys)));
  const backend = await openServingBackend(settings, env, io);
  if (typeof backend === 'number') return backend;
  warnAboutSettings(settings, io);
  const giveUp = async (line: string): Promise<number> => {
    io.err(`mrtr-demo: ${line}`);
    keys.close();
    await backend.close().catch(() => {});
    return 1;
  };

  // One log line per request-state event on stderr, and the metrics behind GET /metrics. Their counters start
  // at 0 for each codec served and each of the demo's protected tools, prompts and resources (not the conformance
  // fixtures': too many series; theirs appear with their first event), so the first scrape already has them.
  const observability = createObservability({
    log: cli.log ?? (io.errIsTTY ? 'pretty' : 'json'),
    write: io.err,
    known: { codecs: codecs.map((codec) => codec.id), ...demoTargets() },
  });
  const fixedPrincipal = cli.stdio ? 'local' : 'anonymous';
  let pageOrigin: string | undefined;
  const shared: Shared = {
    settings,
    io,
    backend,
    observability,
    // The playground page's view of its own rejections: codes per principal, bounded (GET /rejections).
    rejections: new RejectionLog(),
    fixedPrincipal,
    flowTtlMs: Math.max(1_800_000, cli.ttlMs),
    codecCount: codecs.length,
    // SDK rejections quote client text (params.name, params.uri): logged as a field, escaped and cut short.
    onError: (error: unknown) => observability.error(error),
    pageOrigin: () => pageOrigin,
  };
  const endpoints = codecs.map((codec, i) => createEndpoint(shared, codec, codecNames[i]!));
  // A fleet: before serving, check that this instance holds the keys the fleet on this store seals with.
  if (storeCapabilities(backend.store).shared) {
    const problem = await fleetKeyProblem(endpoints[0]!.mrtr.guard, settings.namespace);
    if (problem !== undefined) return giveUp(problem);
  }
  const clockLine = await clockReport(endpoints[0]!.mrtr.guard);
  if (clockLine !== undefined) io.err(`mrtr-demo: ${clockLine}`);
  const primary = endpoints[0]!;
  const extraHandlers = new Map<string, HttpHandler>();
  if (cli.codec === 'all') for (const e of endpoints) if (e.handler !== undefined) extraHandlers.set(e.path, e.handler);

  // The page's files are built next to this script (dist/public/); without them the server runs without the page.
  const playground = cli.stdio
    ? undefined
    : loadPlayground(fileURLToPath(new URL('./public/', import.meta.url)), {
        codec: cli.codec,
        ttlMs: cli.ttlMs,
        skewMs: CLOCK_SKEW_MS,
        auth: tokens === undefined ? 'anonymous' : 'bearer',
        mcpPath: primary.path,
        endpoints: endpoints.map(({ codec, path }) => ({ codec, path })),
      });
  const server = createHttpServer({
    handler: primary.handler,
    extraHandlers,
    tokens: cli.stdio ? undefined : tokens,
    bindHost: cli.host,
    extraHosts: settings.extraHosts,
    pages: { ledger: backend.ledger, tokens: cli.stdio ? undefined : tokens },
    onError: shared.onError,
    maxConnections: cli.maxConnections,
    rejections: shared.rejections,
    anonymousPrincipal: fixedPrincipal,
    playground,
    metrics: observability.serveMetrics,
  });
  try {
    await listen(server, cli.host, cli.port);
  } catch (error) {
    return giveUp(`cannot listen on ${cli.host}:${cli.port}: ${error instanceof Error ? error.message : String(error)}`);
  }
  const { port } = server.address() as AddressInfo;
  const origin = `http://${bracketed(cli.host)}:${port}`;
  pageOrigin = origin;
  const codecText =
    cli.codec === 'all' ? `all (${endpoints.map((e) => `${e.codec} on ${e.path}`).join(', ')}; hmac on ${MCP_PATH} too)` : cli.codec;
  const summary = `codec: ${codecText}, store: ${cli.store} (${backend.detail}), auth: ${
    cli.stdio ? 'local' : tokens === undefined ? 'anonymous' : `bearer tokens (${new Set(tokens.values()).size} principals)`
  }${cli.fixtures === 'conformance' ? ', fixtures: conformance' : ''}`;

  let stdioHandle: { close(): Promise<void> } | undefined;
  if (cli.stdio) {
    const { serveStdio } = await import('@modelcontextprotocol/server/stdio');
    stdioHandle = serveStdio(primary.factory, { onerror: shared.onError });
  }
  const close = async () => {
    await stdioHandle?.close();
    for (const e of endpoints) await e.handler?.close();
  };
  const ready = cli.stdio
    ? [`mrtr-demo serving MCP on stdio; connect pages on ${origin}/connect/ (${summary})`]
    : [
        `mrtr-demo listening on ${origin}${MCP_PATH} (${summary})`,
        ...(playground === undefined ? [] : [`playground: ${origin}/ (an MCP client in the browser: run a flow, then break it)`]),
      ];
  return untilStopped(
    {
      server,
      io,
      stdio: cli.stdio,
      close,
      release: [() => keys.close(), () => backend.close(), () => observability.close()],
      onError: shared.onError,
    },
    () => ready.forEach(say),
  );
}

interface Running {
  server: Server;
  io: Io;
  stdio: boolean;
  /** Stops the MCP handlers (before the HTTP server has closed). */
  close(): Promise<void>;
  /** Run in order once the server closed (keys, backend, observability). */
  release: (() => unknown)[];
  onError(error: unknown): void;
}

/**
 * Resolves with the exit code once SIGINT/SIGTERM (or, with --stdio, the end of stdin) stopped everything; a second
 * signal exits at once. `ready` runs after the signal handlers are in place, so a supervisor that stops the demo as
 * soon as it reads the ready line finds them.
 */
function untilStopped({ server, io, stdio, close, release, onError }: Running, ready: () => void): Promise<number> {
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
        await close();
        await closed;
        for (const step of release) await step();
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
    if (stdio) process.stdin.once('end', () => void stop('stdin closed'));
    ready();
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

// Shared by the examples' `dev` and `smoke` scripts (examples/*/scripts/dev.mjs, smoke.mjs): free ports on 127.0.0.1,
// child processes in process groups of their own that are all killed when this process ends (normally, on a signal
// or on an error), and the MRTR smoke rounds driven with the official MCP client. Plain Node, no dependencies: the
// client module is passed in by the example (it resolves `@modelcontextprotocol/client` from its own node_modules).
// `scripts/eject-example.mjs` copies this file next to an ejected example's scripts.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** A TCP port free on 127.0.0.1 right now (the OS picks it). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** `--name value` from argv, else `fallback`. */
export function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const children = new Set();

/** Signals every child's process group (the child and whatever it started). */
function signalAll(signal) {
  for (const child of children) {
    try {
      process.kill(-child.pid, signal);
    } catch {
      // already gone
    }
  }
}

/**
 * Starts `command` in a process group of its own, its output prefixed with `label` (or kept quiet until it fails, with
 * `quiet`). Every child started here is killed when this process exits, whatever the reason (see `stopOnExit`).
 */
export function start(label, command, args, { env, cwd, quiet = false, lifeline = false } = {}) {
  // lifeline: the child's stdin is a pipe that this process never writes to and that closes when it dies, even by
  // SIGKILL; a script under stopOnExit with MRTR_DEV_LIFELINE=1 stops (and stops its own children) when it closes.
  const child = spawn(command, args, {
    cwd,
    env: { ...process.env, ...env, ...(lifeline && { MRTR_DEV_LIFELINE: '1' }) },
    detached: true,
    stdio: [lifeline ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const lines = [];
  const listeners = new Set();
  const onLine = (line) => {
    lines.push(line);
    if (lines.length > 200) lines.shift();
    if (!quiet) console.log(`[${label}] ${line}`);
    for (const listener of listeners) listener(line);
  };
  for (const stream of [child.stdout, child.stderr]) {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk) => {
      const parts = (rest + chunk).split(/\r?\n/);
      rest = parts.pop() ?? '';
      for (const part of parts) onLine(part);
    });
  }
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
    child.on('error', (error) => {
      children.delete(child);
      resolve({ code: null, signal: null, error });
    });
  });
  return {
    child,
    exited,
    /** The last lines it printed (for an error message). */
    tail: () => lines.slice(-40).join('\n'),
    /** Resolves the first line matching `pattern` (its match); rejects when the child exits first or after `timeoutMs`. */
    waitFor(pattern, timeoutMs) {
      for (const line of lines) {
        const match = pattern.exec(line);
        if (match) return Promise.resolve(match);
      }
      return new Promise((resolve, reject) => {
        const done = (fn, value) => {
          clearTimeout(timer);
          listeners.delete(listener);
          fn(value);
        };
        const listener = (line) => {
          const match = pattern.exec(line);
          if (match) done(resolve, match);
        };
        const timer = setTimeout(
          () =>
            done(
              reject,
              new Error(`${label}: no line matching ${pattern} within ${timeoutMs} ms; last output:\n${lines.slice(-40).join('\n')}`),
            ),
          timeoutMs,
        );
        listeners.add(listener);
        void exited.then(({ code, signal, error }) =>
          done(
            reject,
            new Error(
              `${label} exited (${error?.message ?? code ?? signal}) before ${pattern}; last output:\n${lines.slice(-40).join('\n')}`,
            ),
          ),
        );
      });
    },
  };
}

/** Stops every child: SIGTERM to each process group, SIGKILL to those still there after `graceMs`. */
export async function stopAll(graceMs = 5_000) {
  if (children.size === 0) return;
  const waiting = [...children].map(
    (child) => new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve))),
  );
  signalAll('SIGTERM');
  let timer;
  await Promise.race([Promise.all(waiting), new Promise((resolve) => (timer = setTimeout(resolve, graceMs)))]);
  clearTimeout(timer);
  signalAll('SIGKILL');
}

/** This process's environment (settings of these scripts, not of a turbo task). */
const env = process.env;

let installed = false;
/**
 * Kills every child when this process ends: on exit (SIGKILL, synchronously), on SIGINT/SIGTERM/SIGHUP, on an uncaught
 * error, and after `deadlineMs` (the whole run is bounded). `cleanup` runs first (in-process servers).
 */
export function stopOnExit({ deadlineMs, cleanup } = {}) {
  if (installed) return;
  installed = true;
  let stopping = false;
  const stop = async (code, why) => {
    if (stopping) return;
    stopping = true;
    if (why) console.error(why);
    try {
      await cleanup?.();
    } catch {
      // best effort
    }
    await stopAll();
    process.exit(code);
  };
  process.on('exit', () => signalAll('SIGKILL'));
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => void stop(signal === 'SIGINT' ? 130 : 143));
  process.on('uncaughtException', (error) => void stop(1, error));
  process.on('unhandledRejection', (error) => void stop(1, error));
  if (env.MRTR_DEV_LIFELINE === '1') {
    delete env.MRTR_DEV_LIFELINE; // for this process only, not its children
    process.stdin.on('data', () => {});
    process.stdin.on('close', () => void stop(1, 'stopped: the process that started this one is gone'));
  }
  if (deadlineMs !== undefined) {
    setTimeout(() => void stop(1, `stopped: still running after ${deadlineMs / 1000} s`), deadlineMs).unref();
  }
  return stop;
}

const textOf = (result) => (result?.content ?? []).map((c) => c.text ?? '').join('');

/**
 * The smoke rounds, on a running server: (1) a protected tool answers `input_required` with a sealed requestState,
 * (2) the answer completes it, (3) an identical retry (same state, same answers) gets the same result marked
 * `_meta["dev.mrtr/replayed"]`, (4) a replay of the spent state with another answer is refused (-32602).
 * `mcp` is the `@modelcontextprotocol/client` module. Returns the number of checks passed; throws on the first failure.
 */
export async function runMrtrSmoke({ mcp, url, headers, tool, args = {}, key = 'confirm', yes, no, log = console.log }) {
  const client = new mcp.Client(
    { name: 'mrtr-example-smoke', version: '1.0.0' },
    {
      versionNegotiation: { mode: 'auto' },
      capabilities: { elicitation: { form: {} } },
      inputRequired: { autoFulfill: false, maxRounds: 10 },
    },
  );
  const check = (ok, what, detail) => {
    if (!ok) throw new Error(`smoke: ${what} failed: ${JSON.stringify(detail)}`);
    log(`  ✓ ${what}`);
  };
  await client.connect(new mcp.StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  try {
    const call = (extra = {}) =>
      client.request({ method: 'tools/call', params: { name: tool, arguments: args, ...extra } }, { allowInputRequired: true });
    const first = await call();
    check(
      first.resultType === 'input_required' && typeof first.requestState === 'string' && first.inputRequests?.[key] !== undefined,
      `${tool}: input_required with a sealed requestState and the "${key}" question`,
      first,
    );
    const answer = { requestState: first.requestState, inputResponses: { [key]: { action: 'accept', content: yes } } };
    const done = await call(answer);
    check(
      done.resultType !== 'input_required' && done.isError !== true && textOf(done) !== '' && done._meta?.['dev.mrtr/replayed'] !== true,
      `the answer completes it: "${textOf(done)}"`,
      done,
    );
    const retried = await call(answer);
    const { _meta: retriedMeta, ...retriedRest } = retried;
    const { _meta: _doneMeta, ...doneRest } = done;
    check(
      retriedMeta?.['dev.mrtr/replayed'] === true && JSON.stringify(retriedRest) === JSON.stringify(doneRest),
      'an identical retry gets the same answer, marked _meta["dev.mrtr/replayed"]',
      retried,
    );
    let refused;
    try {
      refused = await call({ requestState: first.requestState, inputResponses: { [key]: { action: 'accept', content: no } } });
    } catch (error) {
      refused = error;
    }
    check(
      refused instanceof mcp.ProtocolError && refused.code === -32602,
      `a replay of the spent requestState is refused (-32602 "${refused?.message}")`,
      {
        code: refused?.code,
        message: refused?.message ?? refused,
      },
    );
    return 4;
  } finally {
    await client.close();
  }
}

/** Runs `examples/<x>/scripts/dev.mjs` as a child (exactly as `pnpm dev` does) and waits for its endpoint and token lines. */
export async function startDev(devScript, { args = [], env, timeoutMs = 120_000 } = {}) {
  const dev = start('dev', process.execPath, [devScript, ...args], { env, lifeline: true });
  const [, url] = await dev.waitFor(/^MCP endpoint: (http:\/\/127\.0\.0\.1:\d+\S*)$/, timeoutMs);
  const [, token] = await dev.waitFor(/^Bearer token: (\S+)$/, timeoutMs);
  await dev.waitFor(/^Ready\.$/, timeoutMs);
  return { dev, url, token };
}

/** The body of every example's smoke.mjs: start `dev.mjs` on a free port, run the rounds, stop everything, exit 0/1. */
export async function smoke({ name, mcp, devScript, devArgs = [], env, tool, args, key, yes, no, deadlineMs = 150_000 }) {
  const stop = stopOnExit({ deadlineMs });
  const started = Date.now();
  try {
    const port = await freePort();
    const { url, token } = await startDev(devScript, { args: ['--port', String(port), ...devArgs], env });
    console.log(`smoke ${name}: ${url} up after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const passed = await runMrtrSmoke({ mcp, url, headers: { authorization: `Bearer ${token}` }, tool, args, key, yes, no });
    await stopAll();
    console.log(`smoke ${name}: done in ${((Date.now() - started) / 1000).toFixed(1)} s, every process stopped`);
    console.log(`smoke: ${passed} passed, 0 failed`);
    process.exit(0);
  } catch (error) {
    console.error(`smoke ${name}: FAILED after ${((Date.now() - started) / 1000).toFixed(1)} s (every process it started is stopped)`);
    await stop(1, error);
  }
}

// Shared helpers of the demo-server scripts: spawn the built mrtr-demo, wait for its URL, stop it cleanly.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

export const APP_DIR = fileURLToPath(new URL('..', import.meta.url));
export const CLI = fileURLToPath(new URL('../dist/cli.js', import.meta.url));

/** A fresh MRTR_KEYS value: two keys, the first seals. */
export function freshKeys() {
  return `k2:${randomBytes(32).toString('base64url')},k1:${randomBytes(32).toString('base64url')}`;
}

/**
 * Starts `node dist/cli.js <args>` and resolves once it printed its URL line.
 * Returns { url, origin, port, child, stderr(), stop() }; stop() sends SIGTERM and resolves the exit code.
 * `nodeArgs` go to node before the script (e.g. `--expose-gc`).
 */
export function startDemo(args, { env = {}, timeoutMs = 15_000, nodeArgs = [] } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeArgs, CLI, '--port', '0', ...args], {
      cwd: APP_DIR,
      // A namespace of its own unless the test gives one (a fleet shares one): each test run's fresh keys are a fleet
      // of their own, which the fleet key check refuses to mix with another run's on the same store.
      env: { ...process.env, MRTR_DEMO_NAMESPACE: `t${process.pid}-${randomBytes(6).toString('hex')}`, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    let settled = false;
    const timer = setTimeout(() => fail(new Error(`mrtr-demo did not start within ${timeoutMs} ms`)), timeoutMs);
    const fail = (error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`${error.message}\nstdout: ${out}\nstderr: ${err}`));
    };
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      err += chunk;
    });
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const match = /listening on (http:\/\/\S+\/mcp)/.exec(out);
      if (match && !settled) {
        settled = true;
        clearTimeout(timer);
        const url = match[1];
        const exited = new Promise((done) => child.once('exit', (code, signal) => done(code ?? signal)));
        resolve({
          url,
          origin: new URL(url).origin,
          port: Number(new URL(url).port),
          child,
          line: out.split('\n').find((l) => l.includes('listening on')),
          stdout: () => out,
          stderr: () => err,
          exited,
          async stop(signal = 'SIGTERM') {
            if (child.exitCode === null && child.signalCode === null) child.kill(signal);
            const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
            const code = await exited;
            clearTimeout(killer);
            return code;
          },
        });
      }
    });
    child.once('exit', (code) => fail(new Error(`mrtr-demo exited with ${code} before listening`)));
    child.once('error', fail);
  });
}

/** Services: a reason to skip when unset, or a failure under MRTR_REQUIRE_SERVICES=1. */
export function serviceUrl(name) {
  const value = process.env[name];
  if (value !== undefined && value !== '') return { url: value };
  if (process.env.MRTR_REQUIRE_SERVICES === '1') return { error: `${name} is not set but MRTR_REQUIRE_SERVICES=1` };
  return { skip: `${name} is not set` };
}

export const stripAnsi = (text) => text.replace(/\x1b\[[0-9;]*m/g, '');

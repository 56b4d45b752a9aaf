#!/usr/bin/env node
// Bounded load test of the built mrtr-demo on 127.0.0.1: concurrent MRTR round trips for a fixed time.
// Each worker loops over flows: delete_files (2 rounds) and, every 4th flow, a staging deploy (3 rounds).
// Deliberate rejections are mixed in and must be rejected: every 10th flow replays its final state with other
// answers, every 10th (offset 5) first sends a tampered state. Every 10th (offset 3) retries its final round
// identically, as after a lost response, and must get the same result. Anything else that is not the expected answer is an error.
// The server's memory after full collections (scripts/gc-probe.cjs), at the end of the warm-up and at the end,
// must not grow by more than --max-growth, in RSS and in heap used; RSS is also sampled and its peaks reported.
// The completion, rejection and store-error counts printed are the server's own, scraped from GET /metrics
// (the demo runs with --log off), and must match what the clients saw.
// Prints the figures (and writes them to conformance-results/load.txt); exits 1 on any failure.
//
// Usage: node scripts/load.mjs [--duration 30] [--warmup 10] [--concurrency 32] [--codec hmac] [--store memory]
//                              [--ttl-ms 5000] [--max-growth 0.2]
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { APP_DIR, CLI, freshKeys, startDemo } from './lib.mjs';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '30' },
    warmup: { type: 'string', default: '10' },
    concurrency: { type: 'string', default: '32' },
    codec: { type: 'string', default: 'hmac' },
    store: { type: 'string', default: 'memory' },
    'ttl-ms': { type: 'string', default: '5000' },
    'max-growth': { type: 'string', default: '0.2' },
  },
  strict: true,
});
const durationMs = Number(values.duration) * 1000;
const warmupMs = Number(values.warmup) * 1000;
const concurrency = Number(values.concurrency);
const maxGrowth = Number(values['max-growth']);
if (!(durationMs > 0 && warmupMs >= 0 && durationMs - warmupMs >= 8000 && concurrency >= 1 && concurrency <= 512 && maxGrowth > 0)) {
  console.error('load: bad arguments');
  process.exit(2);
}
if (!existsSync(CLI)) {
  console.error(`missing ${CLI}: build first (cd apps/demo-server && npx tsup)`);
  process.exit(1);
}

const PROTOCOL_VERSION = '2026-07-28';
const META = {
  'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
  'io.modelcontextprotocol/clientCapabilities': { elicitation: { form: {} } },
  'io.modelcontextprotocol/clientInfo': { name: 'mrtr-load', version: '1.0.0' },
};

const demo = await startDemo(['--codec', values.codec, '--store', values.store, '--ttl-ms', values['ttl-ms'], '--log', 'off'], {
  env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '' },
  // The probe (test instrumentation, see gc-probe.cjs) reports the memory the server holds after a full collection.
  nodeArgs: ['--expose-gc', '--require', join(APP_DIR, 'scripts', 'gc-probe.cjs')],
});

/** Asks the server for its memory after two full collections; resolves { rss, heapUsed, … } in bytes. */
let probes = 0;
function probeMemory() {
  const seq = ++probes;
  return new Promise((resolve, reject) => {
    let seen = '';
    const onData = (chunk) => {
      seen += chunk;
      const match = new RegExp(`^mrtr-gc-probe ${seq} (\\{.*\\})$`, 'm').exec(seen);
      if (match === null) return;
      cleanup();
      const m = JSON.parse(match[1]);
      if (m.gc !== true) reject(new Error('the memory probe ran without --expose-gc'));
      else resolve(m);
    };
    // A liveness bound, not a measurement window: the server answers as soon as its collections are done.
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`the server did not answer memory probe ${seq} within 60 s`));
    }, 60_000);
    const cleanup = () => {
      clearTimeout(timer);
      demo.child.stderr.off('data', onData);
    };
    demo.child.stderr.on('data', onData);
    demo.child.kill('SIGUSR2');
  });
}

let nextId = 1;
const latencies = [];
const stats = { requests: 0, flows: 0, completed: 0, deliberate: 0, retried: 0, errors: 0 };
const errorSamples = [];

function error(message) {
  stats.errors += 1;
  if (errorSamples.length < 10) errorSamples.push(message);
}

async function rpc(name, args, extra = {}) {
  const started = performance.now();
  const response = await fetch(demo.url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL_VERSION,
      'mcp-method': 'tools/call',
      'mcp-name': name,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name, arguments: args, ...extra, _meta: META } }),
  });
  const text = await response.text();
  latencies.push(performance.now() - started);
  stats.requests += 1;
  if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${text.slice(0, 200)}`);
  return JSON.parse(text);
}

/** Runs the rounds of one flow; `answers[i]` answers round i+1's question. */
async function flow(name, args, answers, n) {
  let state;
  let message;
  for (let round = 0; round <= answers.length; round++) {
    const extra = round === 0 ? {} : { inputResponses: answers[round - 1], requestState: state };
    if (round === answers.length && n % 10 === 5) {
      // Deliberate: a tampered final state is rejected (and does not burn the real one).
      const tampered = await rpc(name, args, { ...extra, requestState: `${state.slice(0, -2)}${state.endsWith('AA') ? 'BB' : 'AA'}` });
      if (tampered.error?.code === -32602) stats.deliberate += 1;
      else return error(`tampered state not rejected: ${JSON.stringify(tampered).slice(0, 200)}`);
    }
    message = await rpc(name, args, extra);
    const result = message.result;
    if (result === undefined) return error(`round ${round + 1} of ${name}: ${JSON.stringify(message.error ?? message).slice(0, 200)}`);
    if (round < answers.length) {
      if (result.resultType !== 'input_required' || typeof result.requestState !== 'string') {
        return error(`round ${round + 1} of ${name} should ask: ${JSON.stringify(result).slice(0, 200)}`);
      }
      state = result.requestState;
    } else if (result.resultType !== 'complete' || result.isError === true) {
      return error(`final round of ${name} should complete: ${JSON.stringify(result).slice(0, 200)}`);
    }
  }
  stats.completed += 1;
  const last = answers[answers.length - 1];
  if (n % 10 === 0) {
    // Deliberate: replaying the final round's state with other answers after the flow completed is rejected
    // (single use; only an identical retry gets the recorded answer).
    const replay = await rpc(name, args, { inputResponses: { ...last, extra: { action: 'decline' } }, requestState: state });
    if (replay.error?.code === -32602) stats.deliberate += 1;
    else error(`replay not rejected: ${JSON.stringify(replay).slice(0, 200)}`);
  } else if (n % 10 === 3) {
    // An identical retry (as after a lost response) gets the very same result, marked as a replay
    // (`_meta["dev.mrtr/replayed"]`), and nothing runs again.
    const retry = await rpc(name, args, { inputResponses: last, requestState: state });
    const expected = { ...message.result, _meta: { ...message.result?._meta, 'dev.mrtr/replayed': true } };
    if (canonical(retry.result) === canonical(expected)) stats.retried += 1;
    else error(`identical retry got another answer: ${JSON.stringify(retry).slice(0, 200)}`);
  }
}

/** JSON with object keys sorted: two answers compared whatever order their members came in. */
const canonical = (value) =>
  JSON.stringify(value, (_key, v) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );

const accept = (content) => ({ action: 'accept', content });
const deadline = Date.now() + durationMs;

async function worker(w) {
  for (let n = 0; Date.now() < deadline; n++) {
    stats.flows += 1;
    try {
      if (n % 4 === 3) {
        await flow(
          'deploy',
          { service: `svc-${w}` },
          [{ environment: accept({ environment: 'staging' }) }, { confirm: accept({ confirm: true }) }],
          n,
        );
      } else {
        await flow('delete_files', { paths: [`load/${w}/${n}.txt`] }, [{ confirm: accept({ confirm: true }) }], n);
      }
    } catch (e) {
      error(e instanceof Error ? e.message : String(e));
    }
  }
}

// ---------------------------------------------------------------- resident memory of the server process
function rssKiB(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = /^VmRSS:\s+(\d+) kB/m.exec(status);
    if (match) return Number(match[1]);
  } catch {
    // not Linux: fall back to ps
  }
  return Number(execFileSync('ps', ['-o', 'rss=', '-p', String(pid)], { encoding: 'utf8' }).trim());
}
const samples = [];
const started = Date.now();
const sampler = setInterval(() => samples.push({ t: Date.now() - started, rss: rssKiB(demo.child.pid) }), 250);
// Memory held after full collections, under load both times: four probes a second apart from the end of the
// warm-up, and four ending one second before the clients stop (the same number of flows in flight). Each side is
// the least of its four: what the process cannot give back. A leak raises it; a heap V8 has not collected yet, or
// pages the allocator has not returned yet, do not (one probe's RSS moved by -3 % and +19 % in two runs of one build).
const at = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms - (Date.now() - started))));
async function probeWindow(fromMs) {
  const out = [];
  for (let i = 0; i < 4; i++) {
    await at(fromMs + i * 1000);
    out.push(await probeMemory());
  }
  return {
    rss: Math.min(...out.map((m) => m.rss)),
    heapUsed: Math.min(...out.map((m) => m.heapUsed)),
    external: Math.min(...out.map((m) => m.external)),
  };
}
// In sequence: one probe at a time (the end window starts well after the first one ends).
const probed = probeWindow(warmupMs).then(async (first) => [first, await probeWindow(durationMs - 4000)]);

await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
clearInterval(sampler);
const [heldAfterWarmup, heldAtEnd] = await probed;
const elapsed = (Date.now() - started) / 1000;

/** The server's counters from GET /metrics (Prometheus text): totals by metric name, rejections by code. */
async function serverCounts() {
  const text = await (await fetch(new URL('/metrics', demo.origin))).text();
  const counts = { completed: 0, rejected: 0, retried: 0, storeErrors: 0, byCode: {} };
  for (const line of text.split('\n')) {
    const match =
      /^(mrtr_flows_completed_total|mrtr_states_rejected_total|mrtr_states_retried_total|mrtr_store_errors_total)(?:\{([^}]*)\})? (\S+)$/.exec(
        line,
      );
    if (match === null) continue;
    const value = Number(match[3]);
    if (match[1] === 'mrtr_flows_completed_total') counts.completed += value;
    else if (match[1] === 'mrtr_states_retried_total') counts.retried += value;
    else if (match[1] === 'mrtr_store_errors_total') counts.storeErrors += value;
    else {
      counts.rejected += value;
      const code = /error_type="([^"]+)"/.exec(match[2] ?? '')?.[1] ?? 'unknown';
      counts.byCode[code] = (counts.byCode[code] ?? 0) + value;
    }
  }
  return counts;
}
const server = await serverCounts();
const exitCode = await demo.stop();

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s[Math.floor(s.length / 2)];
};
const pct = (p) => {
  const s = [...latencies].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
};
// Sampled RSS (reported): median over the 3 s after the warm-up and over the last 3 s, and the peaks. It moves
// with when V8 last collected, so the bound is on what the probe saw after full collections.
const baseline = median(samples.filter((s) => s.t >= warmupMs && s.t < warmupMs + 3000).map((s) => s.rss));
const final = median(samples.filter((s) => s.t >= durationMs - 3000).map((s) => s.rss));
const peak = Math.max(...samples.map((s) => s.rss));
const afterWarmupPeak = Math.max(...samples.filter((s) => s.t >= warmupMs).map((s) => s.rss));
const sampledGrowth = final / baseline - 1;
const rssGrowth = heldAtEnd.rss / heldAfterWarmup.rss - 1;
const heapGrowth = heldAtEnd.heapUsed / heldAfterWarmup.heapUsed - 1;

const mib = (kib) => `${(kib / 1024).toFixed(1)} MiB`;
const percent = (x) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)}%`;
const lines = [
  `load: mrtr-demo codec=${values.codec} store=${values.store} ttl-ms=${values['ttl-ms']} on ${demo.origin}, ${concurrency} concurrent clients, ${elapsed.toFixed(1)} s (warm-up ${warmupMs / 1000} s)`,
  `load: ${stats.requests} requests (${(stats.requests / elapsed).toFixed(0)} req/s), ${stats.completed} flows completed (${(stats.completed / elapsed).toFixed(0)} flows/s), latency p50 ${pct(50).toFixed(2)} ms, p99 ${pct(99).toFixed(2)} ms, max ${pct(100).toFixed(1)} ms`,
  `load: ${stats.deliberate} deliberate rejections (replays and tampered states, all refused), ${stats.retried} identical retries (each got the first answer), ${stats.errors} errors`,
  `load: server /metrics: ${server.completed} flows completed, ${server.rejected} states rejected (${
    // Every code has a series from the start (at 0): only those that counted something are printed.
    Object.entries(server.byCode)
      .filter(([, n]) => n > 0)
      .map(([code, n]) => `${code} ${n}`)
      .join(', ') || 'none'
  }), ${server.retried} identical retries answered from the record, ${server.storeErrors} store errors`,
  `load: server memory after full collections (least of 4 probes each side): RSS ${mib(heldAfterWarmup.rss / 1024)} after warm-up, ${mib(heldAtEnd.rss / 1024)} at the end (growth ${percent(rssGrowth)}), heap used ${mib(heldAfterWarmup.heapUsed / 1024)} → ${mib(heldAtEnd.heapUsed / 1024)} (growth ${percent(heapGrowth)}), external ${mib(heldAfterWarmup.external / 1024)} → ${mib(heldAtEnd.external / 1024)}; limit ${(maxGrowth * 100).toFixed(0)}% each`,
  `load: server RSS sampled every 250 ms: ${mib(baseline)} after warm-up, ${mib(final)} at the end (${percent(sampledGrowth)}), peak after warm-up ${mib(afterWarmupPeak)}, overall peak ${mib(peak)}`,
  `load: server exit code on SIGTERM ${exitCode}`,
];
const problems = [];
if (stats.errors > 0) problems.push(`${stats.errors} errors, e.g.\n  ${errorSamples.join('\n  ')}`);
if (server.storeErrors > 0) problems.push(`${server.storeErrors} store errors on the server's /metrics`);
if (stats.errors === 0 && server.completed !== stats.completed) {
  problems.push(`the server counted ${server.completed} completed flows, the clients ${stats.completed}`);
}
if (stats.errors === 0 && server.rejected !== stats.deliberate) {
  problems.push(`the server counted ${server.rejected} rejections, the clients ${stats.deliberate} deliberate ones`);
}
if (stats.errors === 0 && server.retried !== stats.retried) {
  problems.push(`the server counted ${server.retried} identical retries, the clients ${stats.retried}`);
}
if (stats.retried === 0) problems.push('no identical retry was exercised');
if (stats.completed === 0) problems.push('no flow completed');
if (stats.deliberate === 0) problems.push('no deliberate rejection was exercised');
if (!(rssGrowth <= maxGrowth))
  problems.push(`RSS after full collections grew ${percent(rssGrowth)} after the warm-up (limit ${(maxGrowth * 100).toFixed(0)}%)`);
if (!(heapGrowth <= maxGrowth))
  problems.push(`heap used after full collections grew ${percent(heapGrowth)} after the warm-up (limit ${(maxGrowth * 100).toFixed(0)}%)`);
if (exitCode !== 0) problems.push(`server exited with ${exitCode} on SIGTERM`);
lines.push(`load: ${problems.length === 0 ? 'PASS' : 'FAIL'}`);
for (const line of lines) console.log(line);
mkdirSync(join(APP_DIR, 'conformance-results'), { recursive: true });
writeFileSync(join(APP_DIR, 'conformance-results', `load-${values.codec}-${values.store}.txt`), `${lines.join('\n')}\n`);
if (problems.length > 0) {
  for (const p of problems) console.error(`load: ${p}`);
  process.exit(1);
}

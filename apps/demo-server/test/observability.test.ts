import { MRTR_REJECTION_CODES } from '@mrtr/core/errors';
import { MINT_ERROR_TYPES } from '@mrtr/otel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prettyLine, roundLine } from '../src/observe.js';
import {
  accept,
  type Connected,
  callTool,
  connectClient,
  expectStateRejected,
  freshKeys,
  type RunningDemo,
  startDemo,
  tamper,
  replayed,
} from './helpers.js';

const ALICE = 'alice-token-obs-0123456789abcdef';
const KEYS = freshKeys();
const SECRET_PATH = 'notes/obs-secret-7a1c.txt';

let demo: RunningDemo;
let alice: Connected;

beforeAll(async () => {
  demo = await startDemo(['--log', 'json'], { env: { MRTR_KEYS: KEYS, MRTR_DEMO_TOKENS: `alice:${ALICE}` } });
  alice = await connectClient(demo.url, { token: ALICE });
});
afterAll(async () => {
  await alice?.close();
  expect(await demo?.stop()).toBe(0);
});

const metricsUrl = () => new URL('/metrics', demo.url).href;

/** `name{labels} value` lines of a scrape → value by `name{labels}` (labels as printed). */
function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}
/** Sum of the samples of `name` whose labels include every `label="value"` in `want`. */
function sum(samples: Map<string, number>, name: string, want: Record<string, string> = {}): number {
  let total = 0;
  for (const [key, value] of samples) {
    const brace = key.indexOf('{');
    if ((brace === -1 ? key : key.slice(0, brace)) !== name) continue;
    if (Object.entries(want).every(([k, v]) => key.includes(`${k}="${v}"`))) total += value;
  }
  return total;
}

async function scrape(): Promise<{ text: string; samples: Map<string, number> }> {
  const response = await fetch(metricsUrl(), { headers: { authorization: `Bearer ${ALICE}` } });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toContain('text/plain');
  const text = await response.text();
  return { text, samples: parse(text) };
}

describe('GET /metrics and the round log', () => {
  it('is protected by the bearer tokens, like /mcp', async () => {
    expect((await fetch(metricsUrl())).status).toBe(401);
    expect((await fetch(metricsUrl(), { headers: { authorization: 'Bearer not-a-token-0000000000' } })).status).toBe(401);
    expect((await fetch(metricsUrl(), { method: 'POST', headers: { authorization: `Bearer ${ALICE}` } })).status).toBe(405);
  });

  it('counts a completed flow, a tampered state and a replay; logs one line per state event, nothing secret', async () => {
    const args = { paths: [SECRET_PATH] };
    const answer = { confirm: accept({ confirm: true }) };
    const r1 = await callTool(alice.client, 'delete_files', args);
    const state = r1.requestState as string;
    await expectStateRejected(callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: tamper(state) }));
    const done = await callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: state });
    // An identical retry gets the same result (counted as retried); the same state with other answers is a replay.
    expect(await callTool(alice.client, 'delete_files', args, { inputResponses: answer, requestState: state })).toEqual(replayed(done));
    const other = { confirm: accept({ confirm: false }) };
    await expectStateRejected(callTool(alice.client, 'delete_files', args, { inputResponses: other, requestState: state }));

    const { text, samples } = await scrape();
    const tool = { mcp_method_name: 'tools/call', gen_ai_tool_name: 'delete_files', mrtr_codec: 'hmac' };
    const counts = {
      started: sum(samples, 'mrtr_flows_started_total', tool),
      completed: sum(samples, 'mrtr_flows_completed_total', tool),
      minted: sum(samples, 'mrtr_states_minted_total', tool),
      opened: sum(samples, 'mrtr_states_opened_total', tool),
      retried: sum(samples, 'mrtr_states_retried_total', tool),
      effects: sum(samples, 'mrtr_demo_effects_total', { tool: 'delete_files' }),
      integrity: sum(samples, 'mrtr_states_rejected_total', { ...tool, error_type: 'ERR_STATE_INTEGRITY' }),
      replayed: sum(samples, 'mrtr_states_rejected_total', { ...tool, error_type: 'ERR_STATE_REPLAYED' }),
      storeErrors: sum(samples, 'mrtr_store_errors_total'),
      rounds: sum(samples, 'mrtr_flow_rounds_sum', tool),
      sizes: sum(samples, 'mrtr_state_size_count', { ...tool, mrtr_operation: 'mint' }),
    };
    expect(counts, text).toEqual({
      started: 1,
      completed: 1,
      minted: 1,
      opened: 1,
      retried: 1,
      effects: 1,
      integrity: 1,
      replayed: 1,
      storeErrors: 0,
      rounds: 2,
      sizes: 1,
    });
    expect(text).toContain('# TYPE mrtr_states_rejected_total counter');
    expect(text).toContain('# TYPE mrtr_state_duration histogram');

    const lines = demo
      .stderr()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.msg === 'mrtr round');
    expect(lines.map((l) => [l.outcome, l.round ?? null, l.code ?? null])).toEqual([
      ['minted', 1, null],
      ['rejected', null, 'ERR_STATE_INTEGRITY'],
      ['opened', 2, null],
      ['completed', 2, null],
      ['retried', 2, null],
      ['rejected', 2, 'ERR_STATE_REPLAYED'],
    ]);
    const flow = lines[0]!.flow as string;
    expect(flow).toMatch(/^[0-9a-f]{16}$/);
    expect(lines[0]).toMatchObject({
      level: 'info',
      method: 'tools/call',
      target: 'delete_files',
      codec: 'hmac',
      kid: KEYS.split(':')[0],
      bytes: state.length,
    });
    expect(lines[4]).toMatchObject({ level: 'info', flow, bytes: state.length });
    expect(lines[5]).toMatchObject({ level: 'warn', flow, bytes: state.length });
    expect(Object.keys(lines[0]!).sort()).toEqual([
      'bytes',
      'codec',
      'flow',
      'kid',
      'level',
      'method',
      'ms',
      'msg',
      'outcome',
      'round',
      'target',
      'time',
    ]);

    const everything = `${demo.stderr()}\n${text}`;
    const secrets = KEYS.split(',').map((entry) => entry.split(':')[1]!);
    for (const s of [state, tamper(state), ...state.split('.').filter((p) => p.length > 8), SECRET_PATH, ALICE, ...secrets, 'alice"']) {
      expect(everything).not.toContain(s);
    }
  });

  it('pretty lines carry the same fields', () => {
    const line = roundLine({
      type: 'state.rejected',
      method: 'tools/call',
      target: 'deploy',
      codec: 'aead',
      flow: '0123456789abcdef',
      round: 3,
      kid: 'k2',
      code: 'ERR_STATE_REPLAYED',
      operation: 'open',
      tokenBytes: 321,
      durationMs: 0.12345,
    })!;
    expect(prettyLine(line)).toBe(
      'mrtr-demo: flow 0123456789abcdef r3 rejected ERR_STATE_REPLAYED tools/call deploy (aead, kid k2, 321 B, 0.123 ms)',
    );
    expect(roundLine({ type: 'flow.started', method: 'm', target: 't', codec: 'c', flow: 'f', round: 1, kid: 'k' })).toBeUndefined();
  });
});

// Issue 19: a fresh demo answered `# no registered metrics` until its first flow, so rate() and absence alerts
// had nothing to work with from the first scrape (and rate() lost each series' first increment).
describe('the first scrape, before any request', () => {
  it('has every mrtr counter series at 0: each codec served × each protected tool, prompt and resource', async () => {
    const fresh = await startDemo(['--codec', 'all', '--log', 'off'], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: undefined } });
    try {
      const text = await (await fetch(new URL('/metrics', fresh.url))).text();
      expect(text).not.toContain('# no registered metrics');
      const samples = parse(text);
      const codecs = ['hmac', 'jwe', 'aead'];
      const targets = [
        ...['delete_files', 'deploy', 'send_email', 'rollout', 'summarize', 'list_workspace', 'connect_account'].map((name) => ({
          mcp_method_name: 'tools/call',
          gen_ai_tool_name: name,
        })),
        { mcp_method_name: 'prompts/get', gen_ai_prompt_name: 'incident_report' },
        { mcp_method_name: 'resources/read' },
      ];
      /** The samples of `name` with exactly these labels (besides otel_scope_name). */
      const exactly = (name: string, labels: Record<string, string>) =>
        [...samples].filter(([key]) => {
          const brace = key.indexOf('{');
          if ((brace === -1 ? key : key.slice(0, brace)) !== name) return false;
          const found = [...key.slice(brace).matchAll(/(\w+)="([^"]*)"/g)].filter(([, k]) => k !== 'otel_scope_name');
          return found.length === Object.keys(labels).length && found.every(([, k, v]) => labels[k!] === v);
        });
      const counters = ['mrtr_flows_started_total', 'mrtr_flows_completed_total', 'mrtr_states_minted_total', 'mrtr_states_opened_total'];
      for (const target of targets) {
        for (const codec of codecs) {
          const labels = { ...target, mrtr_codec: codec };
          for (const name of counters)
            expect(exactly(name, labels), `${name} ${JSON.stringify(labels)}`).toEqual([[expect.any(String), 0]]);
          // Every code for `open`; for `mint` the codes a mint can be refused with.
          for (const [operation, codes] of [
            ['open', MRTR_REJECTION_CODES],
            ['mint', MRTR_REJECTION_CODES.filter((code) => MINT_ERROR_TYPES.includes(code))],
          ] as const) {
            for (const code of codes) {
              const rejected = { ...labels, mrtr_operation: operation, error_type: code };
              expect(exactly('mrtr_states_rejected_total', rejected), JSON.stringify(rejected)).toEqual([[expect.any(String), 0]]);
            }
          }
          for (const code of ['ERR_STORE_UNAVAILABLE', 'ERR_STORE_FULL']) {
            expect(exactly('mrtr_store_errors_total', { ...labels, error_type: code })).toEqual([[expect.any(String), 0]]);
          }
        }
      }
      // Those and nothing else: every sample is 0, one per label set.
      const count = (name: string) => [...samples.keys()].filter((key) => key.startsWith(`${name}{`)).length;
      for (const name of counters) expect(count(name)).toBe(targets.length * codecs.length);
      const mintCodes = MRTR_REJECTION_CODES.filter((code) => MINT_ERROR_TYPES.includes(code)).length;
      expect(count('mrtr_states_rejected_total')).toBe(targets.length * codecs.length * (MRTR_REJECTION_CODES.length + mintCodes));
      expect(count('mrtr_store_errors_total')).toBe(targets.length * codecs.length * 2);
      expect([...samples.values()].every((value) => value === 0)).toBe(true);
      expect(text).toContain('# TYPE mrtr_flows_started_total counter');
    } finally {
      expect(await fresh.stop()).toBe(0);
    }
  });
});

describe('--log off', () => {
  it('prints no round line, and /metrics still counts', async () => {
    const quiet = await startDemo(['--log', 'off'], { env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: undefined } });
    try {
      const client = await connectClient(quiet.url);
      const r1 = await callTool(client.client, 'delete_files', { paths: ['a'] });
      await expectStateRejected(
        callTool(client.client, 'delete_files', { paths: ['a'] }, { requestState: tamper(r1.requestState as string) }),
      );
      await client.close();
      const text = await (await fetch(new URL('/metrics', quiet.url))).text();
      expect(sum(parse(text), 'mrtr_states_rejected_total', { error_type: 'ERR_STATE_INTEGRITY' })).toBe(1);
      expect(quiet.stderr()).not.toContain('mrtr round');
      expect(quiet.stderr()).not.toContain('ERR_STATE_INTEGRITY');
    } finally {
      expect(await quiet.stop()).toBe(0);
    }
  });
});

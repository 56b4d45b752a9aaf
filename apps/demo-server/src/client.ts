// `pnpm demo:client [--url …] [--tool …] [--token …]`: drives every tool, the prompt and the resource of a running
// mrtr-demo through its whole flow with the official SDK client pinned to 2026-07-28, and `rollout` (a task) over
// the wire (src/task-client.ts: the SDK client cannot follow a task), and prints a timeline per flow.
import { parseArgs } from 'node:util';
import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  CLIENT_CAPABILITIES,
  describeQuestion,
  describeToken,
  findTarget,
  type Json,
  PROTOCOL_VERSION,
  ROLLOUT_TARGET,
  resultText,
  scriptedAnswer,
  sendRound,
  TARGETS,
  type Target,
} from './flows.js';
import { rpcClient, runTaskFlow } from './task-client.js';

/** Every flow the client runs: the MRTR ones through the SDK client, then `rollout`, which becomes a task. */
const ALL_TARGETS: readonly Target[] = [...TARGETS, ROLLOUT_TARGET];

export const CLIENT_USAGE = `Usage: pnpm demo:client [--url http://127.0.0.1:3000/mcp] [--tool NAME] [--token TOKEN]

Runs every tool, the prompt and the resource of a running mrtr-demo through its whole flow with the official
MCP client (pinned to ${PROTOCOL_VERSION}), answering each question, and prints one timeline per flow. rollout
becomes a task: its rounds, tasks/get polls and tasks/update answer go over the wire (the SDK client cannot follow
a task), declaring the io.modelcontextprotocol/tasks extension.

Options:
  --url URL      the demo's MCP endpoint (default http://127.0.0.1:3000/mcp)
  --tool NAME    only this one: ${ALL_TARGETS.map((t) => t.name).join(', ')}
  --token TOKEN  bearer token when the demo runs with MRTR_DEMO_TOKENS (or MRTR_DEMO_TOKEN in the environment)
  -h, --help     show this help

Exit code: 0 when every flow completed, 1 when one failed, 2 on a usage error.`;

/** Most rounds one flow may take here (deploy to production takes 4; connect_account 2 once its page is done). */
const MAX_ROUNDS = 8;

interface Options {
  url: URL;
  targets: Target[];
  token: string | undefined;
}

class UsageError extends Error {}

function parse(argv: readonly string[], env: NodeJS.ProcessEnv): Options | 'help' {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: { url: { type: 'string' }, tool: { type: 'string' }, token: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  if (values.help === true) return 'help';
  let url: URL;
  try {
    url = new URL((values.url as string | undefined) ?? 'http://127.0.0.1:3000/mcp');
  } catch {
    throw new UsageError('--url is not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError('--url must be http(s)');
  const name = values.tool as string | undefined;
  const one = name === undefined ? undefined : findTarget(name);
  if (name !== undefined && one === undefined) throw new UsageError(`--tool must be one of ${ALL_TARGETS.map((t) => t.name).join(', ')}`);
  const token = (values.token as string | undefined) ?? (env.MRTR_DEMO_TOKEN || undefined);
  return { url, targets: one === undefined ? [...ALL_TARGETS] : [one], token };
}

/** Completes a connect page of the demo like a person would: POST its form (only on the demo's own origin). */
async function completeConnectPage(link: string, server: URL, token: string | undefined): Promise<string> {
  const url = new URL(link);
  if (url.origin !== server.origin) throw new Error(`the connect link ${url.origin} is not on the server's origin ${server.origin}`);
  const form = new URLSearchParams({ decision: 'connect', ...(token !== undefined && { token }) });
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: url.origin },
    body: form.toString(),
    redirect: 'manual',
  });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`the connect page answered HTTP ${response.status}`);
  return `page ${url.pathname.slice(0, 12)}… completed (HTTP 200)`;
}

const pad = (text: string, width: number): string => (text.length >= width ? text : text + ' '.repeat(width - text.length));

const oneLine = (text: string, max = 100): string => {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
};

interface FlowOutcome {
  ok: boolean;
  rounds: number;
  tokenBytes: number;
}

/** One flow to its end; prints its timeline. */
async function runFlow(client: Client, target: Target, options: Options, out: (line: string) => void): Promise<FlowOutcome> {
  const args = target.args;
  out(`${target.kind} ${target.name} ${JSON.stringify(args)}`);
  const started = performance.now();
  let tokenBytes = 0;
  let extra: { inputResponses?: Json; requestState?: string } = {};
  for (let round = 1; round <= MAX_ROUNDS; round++) {
    const t0 = performance.now();
    let result: Json;
    try {
      result = await sendRound(client, target, args, extra);
    } catch (error) {
      const detail =
        error instanceof ProtocolError ? `${error.code} ${error.message}` : error instanceof Error ? error.message : String(error);
      out(`  ${round}  ✗ error: ${oneLine(detail)}`);
      return { ok: false, rounds: round, tokenBytes };
    }
    const ms = Math.round(performance.now() - t0);
    if (result.resultType !== 'input_required') {
      const failed = result.isError === true;
      out(`  ${round}  ${failed ? '✗ complete (isError)' : '✓ complete'}: ${oneLine(resultText(result))}  ${ms} ms`);
      out(`  = ${round} round(s), ${tokenBytes} state bytes in all, ${Math.round(performance.now() - started)} ms\n`);
      return { ok: !failed, rounds: round, tokenBytes };
    }
    const requests = (result.inputRequests ?? {}) as Record<string, Json>;
    const state = typeof result.requestState === 'string' ? result.requestState : undefined;
    const view = state === undefined ? undefined : describeToken(state);
    tokenBytes += view?.bytes ?? 0;
    const asks = Object.entries(requests).map(([key, request]) => describeQuestion(key, request));
    const stateText = view === undefined ? 'no state' : `state ${view.bytes} B (${view.codec}, kid ${view.kid ?? '?'})`;
    out(`  ${round}  → input_required  ${pad(`asks ${asks.join(', ') || 'nothing'}`, 44)} ${stateText}  ${ms} ms`);
    const responses: Json = {};
    for (const [key, request] of Object.entries(requests)) {
      const params = (request.params ?? {}) as Json;
      if (params.mode === 'url') {
        try {
          out(`     ↳ ${await completeConnectPage(String(params.url), options.url, options.token)}`);
        } catch (error) {
          out(`  ✗ ${error instanceof Error ? error.message : String(error)}`);
          return { ok: false, rounds: round, tokenBytes };
        }
      }
      responses[key] = scriptedAnswer(request, args);
    }
    extra = { inputResponses: responses, ...(state !== undefined && { requestState: state }) };
  }
  out(`  ✗ still asking after ${MAX_ROUNDS} rounds\n`);
  return { ok: false, rounds: MAX_ROUNDS, tokenBytes };
}

export interface ClientIo {
  out(line: string): void;
  err(line: string): void;
}

/** Runs the bundled client; resolves with the exit code. */
export async function runClient(argv: readonly string[], env: NodeJS.ProcessEnv = process.env, io?: ClientIo): Promise<number> {
  const say = io ?? { out: (line: string) => process.stdout.write(`${line}\n`), err: (line: string) => process.stderr.write(`${line}\n`) };
  let options: Options | 'help';
  try {
    options = parse(argv[0] === '--' ? argv.slice(1) : argv, env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    say.err(`mrtr-demo-client: ${error.message}`);
    say.err('Run pnpm demo:client --help for usage.');
    return 2;
  }
  if (options === 'help') {
    say.out(CLIENT_USAGE);
    return 0;
  }
  const { token, url } = options;
  const transport = new StreamableHTTPClientTransport(url, {
    ...(token !== undefined && { requestInit: { headers: { authorization: `Bearer ${token}` } } }),
  });
  const client = new Client(
    { name: 'mrtr-demo-client', version: '0.1.0' },
    {
      // Without the pin the SDK starts in its 2025 'legacy' mode, where no tool can ask for input over HTTP.
      versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
      capabilities: CLIENT_CAPABILITIES,
      inputRequired: { autoFulfill: false },
    },
  );
  try {
    await client.connect(transport);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    say.err(`mrtr-demo-client: cannot reach ${url.href}: ${message}`);
    say.err(
      /\b401\b|unauthori[sz]ed/i.test(message)
        ? 'The demo runs with MRTR_DEMO_TOKENS: pass --token <token> (or set MRTR_DEMO_TOKEN).'
        : 'Is the demo running? Start it with `pnpm demo` (see apps/demo-server/README.md).',
    );
    return 1;
  }
  say.out(`mrtr-demo-client → ${url.href} (MCP ${PROTOCOL_VERSION}, official @modelcontextprotocol/client)\n`);
  let failed = 0;
  let rounds = 0;
  try {
    const rpc = rpcClient(url, token);
    for (const target of options.targets) {
      const outcome = target === ROLLOUT_TARGET ? await runTaskFlow(rpc, target, say.out) : await runFlow(client, target, options, say.out);
      rounds += outcome.rounds;
      if (!outcome.ok) failed++;
    }
  } finally {
    await client.close().catch(() => {});
  }
  const total = options.targets.length;
  say.out(`${total - failed}/${total} flow(s) completed in ${rounds} round(s)${failed > 0 ? `; ${failed} failed` : ''}`);
  return failed === 0 ? 0 : 1;
}

// `pnpm demo:client [--url …] [--tool …] [--token …]`: drives every tool, the prompt and the resource of a running
// mrtr-demo, and `rollout` (a task), through its whole flow with the official SDK client pinned to 2026-07-28 under
// @mrtr/client (rounds, lost responses re-sent safely, idempotency keys, tasks), and prints a timeline per flow read
// off the wire.
import { parseArgs } from 'node:util';
import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type InputRequestInfo, MrtrClientError, TASKS_EXTENSION, withMrtr } from '@mrtr/client';
import {
  CLIENT_CAPABILITIES,
  describeQuestion,
  describeToken,
  findTarget,
  type Json,
  PROTOCOL_VERSION,
  parseMessages,
  ROLLOUT_TARGET,
  requestOf,
  resultText,
  scriptedAnswer,
  TARGETS,
  type Target,
} from './flows.js';

/** Every flow the client runs: the MRTR ones through the SDK client, then `rollout`, which becomes a task. */
const ALL_TARGETS: readonly Target[] = [...TARGETS, ROLLOUT_TARGET];

export const CLIENT_USAGE = `Usage: pnpm demo:client [--url http://127.0.0.1:3000/mcp] [--tool NAME] [--token TOKEN]

Runs every tool, the prompt and the resource of a running mrtr-demo through its whole flow with the official
MCP client (pinned to ${PROTOCOL_VERSION}) and @mrtr/client, answering each question, and prints one timeline per
flow. A lost response is re-sent only when that cannot run the work twice (a later round, a keyed call). rollout
becomes a task, followed with tasks/get and answered with tasks/update (declaring ${TASKS_EXTENSION}).

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

const ROUND_METHODS = new Set(['tools/call', 'prompts/get', 'resources/read']);
const FINAL = new Set(['completed', 'failed', 'cancelled']);

/** One request the client sent and the answer it got, read off the wire. */
interface Exchange {
  method: string;
  params: Json;
  reply: Json;
  ms: number;
}

/**
 * A `fetch` for the transport that hands each request with its answer to `see` before the SDK reads the answer (a
 * lost response is never seen). The demo answers a POST with one JSON body or a short SSE stream that ends.
 */
function watchingFetch(see: (exchange: Exchange) => void): typeof fetch {
  return async (input, init) => {
    const body = typeof init?.body === 'string' ? init.body : '';
    const started = performance.now();
    const response = await fetch(input, init);
    const request = body.startsWith('{') ? (JSON.parse(body) as Json) : undefined;
    if (request === undefined || request.id === undefined || typeof request.method !== 'string') return response;
    const reply = parseMessages(await response.clone().text()).find((m) => m.id === request.id);
    if (reply !== undefined)
      see({ method: request.method, params: (request.params ?? {}) as Json, reply, ms: Math.round(performance.now() - started) });
    return response;
  };
}

interface FlowOutcome {
  ok: boolean;
  rounds: number;
  tokenBytes: number;
}

/** The timeline of one flow, printed as its exchanges are seen: rounds, then a task's statuses and answers. */
class Timeline {
  rounds = 0;
  tokenBytes = 0;
  task = false;
  private status = '';
  private taskQuestions: Record<string, Json> = {};
  private readonly out: (line: string) => void;

  constructor(out: (line: string) => void) {
    this.out = out;
  }

  see({ method, params, reply, ms }: Exchange): void {
    const result = reply.result as Json | undefined;
    if (result === undefined) return; // an error: the call throws it (or @mrtr/client retries it)
    if (ROUND_METHODS.has(method)) this.round(result, ms);
    else if (method === 'tasks/get') this.poll(result);
    else if (method === 'tasks/update') {
      const keys = Object.keys((params.inputResponses ?? {}) as Json);
      this.out(`     ↳ answers ${keys.map((key) => describeQuestion(key, this.taskQuestions[key] ?? {})).join(', ')} with tasks/update`);
    }
  }

  private round(result: Json, ms: number): void {
    const round = ++this.rounds;
    if (result.resultType === 'task') {
      this.task = true;
      this.out(
        `  ${round}  → task ${String(result.taskId).slice(0, 8)}… (${String(result.status)}; tasks/get every ${String(result.pollIntervalMs)} ms)  ${ms} ms`,
      );
      return;
    }
    if (result.resultType !== 'input_required') {
      const replayed = (result._meta as Json | undefined)?.['dev.mrtr/replayed'] === true ? ' (replayed from the record)' : '';
      this.out(
        `  ${round}  ${result.isError === true ? '✗ complete (isError)' : '✓ complete'}: ${oneLine(resultText(result))}  ${ms} ms${replayed}`,
      );
      return;
    }
    const requests = (result.inputRequests ?? {}) as Record<string, Json>;
    const state = typeof result.requestState === 'string' ? result.requestState : undefined;
    const view = state === undefined ? undefined : describeToken(state);
    this.tokenBytes += view?.bytes ?? 0;
    const asks = Object.entries(requests).map(([key, request]) => describeQuestion(key, request));
    const stateText = view === undefined ? 'no state' : `state ${view.bytes} B (${view.codec}, kid ${view.kid ?? '?'})`;
    this.out(`  ${round}  → input_required  ${pad(`asks ${asks.join(', ') || 'nothing'}`, 44)} ${stateText}  ${ms} ms`);
  }

  private poll(view: Json): void {
    const status = String(view.status);
    const line = `${status}${typeof view.statusMessage === 'string' ? `: ${view.statusMessage}` : ''}`;
    if (line !== this.status) this.out(`     ↳ ${oneLine(line)}`);
    this.status = line;
    if (status === 'input_required') this.taskQuestions = (view.inputRequests ?? {}) as Record<string, Json>;
    if (FINAL.has(status)) {
      const failed = status !== 'completed' || (view.result as Json | undefined)?.isError === true;
      const text = status === 'completed' ? resultText((view.result ?? {}) as Json) : JSON.stringify(view.error ?? status);
      this.out(`  ${failed ? '✗' : '✓'} ${status}: ${oneLine(text)}`);
    }
  }
}

/** Answers one question like a person would: a URL one after completing its page, the others as scripted. */
async function answer(request: InputRequestInfo, args: Json, options: Options, out: (line: string) => void): Promise<Json> {
  const question = { method: request.method, params: request.params ?? {} };
  if (request.params?.mode === 'url') out(`     ↳ ${await completeConnectPage(String(request.params.url), options.url, options.token)}`);
  return scriptedAnswer(question, args);
}

/** One flow to its end through @mrtr/client; `watch.flow` prints its timeline as the exchanges are seen. */
async function runFlow(
  client: Client,
  watch: { flow: Timeline | undefined },
  target: Target,
  options: Options,
  out: (line: string) => void,
): Promise<FlowOutcome> {
  const { args } = target;
  out(`${target.kind} ${target.name} ${JSON.stringify(args)}${target === ROLLOUT_TARGET ? `  (declares ${TASKS_EXTENSION})` : ''}`);
  const started = performance.now();
  const timeline = new Timeline(out);
  watch.flow = timeline;
  const mrtr = withMrtr(client, { maxRounds: MAX_ROUNDS, onInput: (request) => answer(request, args, options, out) });
  const { method, params } = requestOf(target, args);
  let result: Json;
  try {
    if (method === 'tools/call') result = await mrtr.callTool(params as never);
    else if (method === 'prompts/get') result = await mrtr.getPrompt(params as never);
    else result = await mrtr.readResource(params as never);
  } catch (error) {
    const detail =
      error instanceof ProtocolError || error instanceof MrtrClientError
        ? `${error.code} ${error.message}`
        : error instanceof Error
          ? error.message
          : String(error);
    out(`  ${timeline.rounds + 1}  ✗ error: ${oneLine(detail)}`);
    return { ok: false, rounds: timeline.rounds + 1, tokenBytes: timeline.tokenBytes };
  } finally {
    watch.flow = undefined;
  }
  const what = timeline.task ? 'round(s) and a task' : 'round(s)';
  out(`  = ${timeline.rounds} ${what}, ${timeline.tokenBytes} state bytes in all, ${Math.round(performance.now() - started)} ms\n`);
  return { ok: result.isError !== true, rounds: timeline.rounds, tokenBytes: timeline.tokenBytes };
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
  const watch: { flow: Timeline | undefined } = { flow: undefined };
  const transport = new StreamableHTTPClientTransport(url, {
    fetch: watchingFetch((exchange) => watch.flow?.see(exchange)),
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
  say.out(`mrtr-demo-client → ${url.href} (MCP ${PROTOCOL_VERSION}, official @modelcontextprotocol/client with @mrtr/client)\n`);
  let failed = 0;
  let rounds = 0;
  try {
    for (const target of options.targets) {
      const outcome: FlowOutcome = await runFlow(client, watch, target, options, say.out);
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

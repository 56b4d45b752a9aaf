// The playground page: a real MCP client in the browser (the official SDK, pinned to 2026-07-28) driving this
// server's POST /mcp one round at a time, showing every round, and sending what a client must not get away with.
import { Client, ProtocolError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  CLIENT_CAPABILITIES,
  describeQuestion,
  describeToken,
  type Json,
  PROTOCOL_VERSION,
  requestOf,
  resultText,
  scriptedAnswer,
  ROLLOUT_TARGET,
  sendRound,
  TARGETS,
  parseMessages,
  wireRequest,
  type Target,
  optionsOf,
  type PlaygroundConfig,
} from '../flows.js';
import {
  createDropper,
  effectCount,
  freshKey,
  IDEMPOTENCY_KEY_META,
  IDEMPOTENCY_META,
  isReplayed,
  type LostAnswer,
  sendDroppingFirst,
} from './drop.js';

/** The tasks extension (SEP-2663): the page declares it so the server may answer a call with a task. */
const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
/** The demo's questions plus the tasks extension (the bundled CLI client keeps CLIENT_CAPABILITIES as they are). */
const PLAYGROUND_CAPABILITIES = { ...CLIENT_CAPABILITIES, extensions: { [TASKS_EXTENSION]: {} } } as const;
const CLIENT_INFO = { name: 'mrtr-playground', version: '0.1.0' } as const;

/** The page's targets: the shared ones, and `rollout`, which becomes a task (only this page declares the extension). */
const PLAYGROUND_TARGETS: readonly Target[] = [
  ...TARGETS,
  ROLLOUT_TARGET,
  {
    kind: 'tool',
    name: 'send_email',
    summary: 'nothing: a write at once, keyed by an idempotency key (try "drop the next response")',
    args: { to: 'bob@example.com', subject: 'Hello from the playground' },
  },
];

/** The tools whose (simulated) effects the demo counts on /metrics (`mrtr_demo_effects_total{tool}`). */
const EFFECT_TOOLS: ReadonlySet<string> = new Set(['delete_files', 'deploy', 'rollout', 'send_email']);

/** Task statuses after which nothing changes. */
const FINAL_STATUSES = new Set(['completed', 'failed', 'cancelled']);
/** Bounds of the polling: the interval the server suggests, clamped, and at most this many tasks/get per task. */
const MIN_POLL_MS = 100;
const MAX_POLL_MS = 5_000;
const MAX_POLLS = 2_000;

/** A task the current flow turned into (a `resultType: "task"` answer to a round). */
interface TaskState {
  id: string;
  pollMs: number;
  status: string;
  statusMessage: string | undefined;
  /** The keys of the questions on the page, so a poll does not wipe a half-filled form. */
  askedKeys: string;
  final: boolean;
  /** Aborted when the task is final, cancelled, or the user starts another flow: ends the polling at once. */
  stop: AbortController;
}

interface RecordedRejection {
  seq: number;
  code: string;
  method: string;
  target?: string;
}

/** One flow in progress. */
interface Flow {
  /** The MCP endpoint (one per codec with --codec all). */
  path: string;
  target: Target;
  args: Json;
  round: number;
  /** The state the server handed out last and that has not been presented yet. */
  state: string | undefined;
  /** The questions of the last `input_required` result. */
  asked: Record<string, Json>;
  /** The last state presented with answers (spent), for the replay button. */
  spent: { state: string; responses: Json } | undefined;
  done: boolean;
  /** Set once a round answered with a task (`rollout`): then tasks/get, tasks/update and tasks/cancel drive it. */
  task?: TaskState;
  /** The idempotency key of the first round, for a tool that declares `idempotency` (sent again by a retry). */
  key?: string;
}

/** The longest wait the expiry button accepts (ttl + skew): past it the page explains instead. */
const MAX_EXPIRY_WAIT_MS = 65_000;

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`playground: #${id} is missing`);
  return el as T;
};

function el<K extends keyof HTMLElementTagNameMap>(tag: K, props: Partial<Record<string, string>> = {}, ...children: (Node | string)[]) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) if (value !== undefined) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

const pretty = (value: unknown): HTMLPreElement => el('pre', {}, JSON.stringify(value, null, 2));

/** A folded block (native <details>: keyboard-usable, readable without script styling). */
const folded = (summary: string, value: unknown, open = false): HTMLDetailsElement => {
  const box = el('details', {}, el('summary', {}, summary), pretty(value));
  box.open = open;
  return box;
};

let config: PlaygroundConfig;
/** One client per endpoint, with the token it was made with. */
const clients = new Map<string, { client: Client; token: string | undefined; keyed: ReadonlySet<string> }>();
let flow: Flow | undefined;
let lastSeq = 0;
let busy = false;

const status = (text: string) => {
  $('status').textContent = text;
};

function authHeaders(): Record<string, string> {
  const token = config.auth === 'bearer' ? $<HTMLInputElement>('token').value.trim() : '';
  return token === '' ? {} : { authorization: `Bearer ${token}` };
}

/** The endpoint chosen on the page (with --codec all), else the one endpoint. */
const selectedPath = (): string => (config.endpoints.length > 1 ? $<HTMLSelectElement>('endpoint').value : config.mcpPath);

async function connected(path: string = flow?.path ?? selectedPath()): Promise<Client> {
  return (await connection(path)).client;
}

/** The client of `path`, and the tools it declares keyed (`_meta["dev.mrtr/idempotency"]` in tools/list). */
async function connection(path: string): Promise<{ client: Client; keyed: ReadonlySet<string> }> {
  const token = authHeaders().authorization;
  const known = clients.get(path);
  if (known !== undefined && known.token === token) return known;
  await known?.client.close().catch(() => {});
  const transport = new StreamableHTTPClientTransport(new URL(path, location.origin), {
    requestInit: { headers: authHeaders() },
    fetch: wireFetch,
  });
  const next = new Client(
    { ...CLIENT_INFO },
    {
      versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
      capabilities: PLAYGROUND_CAPABILITIES,
      inputRequired: { autoFulfill: false },
    },
  );
  await next.connect(transport);
  const { tools } = await next.listTools();
  const keyed = new Set(tools.filter((t) => (t._meta as Json | undefined)?.[IDEMPOTENCY_META] !== undefined).map((t) => t.name));
  const made = { client: next, token, keyed };
  clients.set(path, made);
  lastSeq = (await recordedRejections()).reduce((max, r) => Math.max(max, r.seq), lastSeq);
  return made;
}

/** Drops one round's answer on request ("drop the next response"): wraps the page's fetch, under the task peek. */
const dropper = createDropper((input, init) => fetch(input, init));

/** `mrtr_demo_effects_total{tool}` from this server's /metrics (same auth as /mcp); `undefined` when not there. */
async function effectsOf(tool: string | undefined): Promise<number | undefined> {
  if (tool === undefined) return undefined;
  const response = await fetch('/metrics', { headers: authHeaders(), cache: 'no-store' });
  return response.ok ? effectCount(await response.text(), tool) : undefined;
}

/**
 * The task handle of the last `tools/call`, read off the wire: the SDK 2.4.0 client does not know the tasks
 * extension and rejects a `resultType: "task"` answer ("Unsupported result type 'task'") without handing it over.
 */
let taskHandle: Json | undefined;

/** The client transport's fetch: the page's own, plus a look at `tools/call` answers for a task handle. */
async function wireFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  const response = await dropper.fetch(input, init);
  if (new Headers(init?.headers).get('mcp-method') !== 'tools/call' || !response.ok) return response;
  for (const message of parseMessages(await response.clone().text())) {
    const result = message.result as Json | undefined;
    if (result?.resultType === 'task' && typeof result.taskId === 'string') taskHandle = result;
  }
  return response;
}

/** A JSON-RPC error answered to one of the page's own tasks/* requests. */
class TaskRpcError extends Error {
  readonly code: number;
  readonly data: unknown;
  constructor(code: number, message: string, data?: unknown) {
    super(message);
    this.code = code;
    this.data = data;
  }
}

let taskRpcId = 0;

/**
 * tasks/get, tasks/update or tasks/cancel. The SDK 2.4.0 client refuses these methods in the 2026-07-28 era
 * ("not supported by the negotiated protocol version"), so the page sends them itself: the same endpoint and auth
 * headers as its client, the 2026-07-28 headers with `Mcp-Name: <taskId>`, and the `_meta` envelope.
 */
async function taskRequest(
  path: string,
  method: 'tasks/get' | 'tasks/update' | 'tasks/cancel',
  params: Json & { taskId: string },
): Promise<Json> {
  const id = `playground-task-${++taskRpcId}`;
  const { headers, body } = wireRequest(id, method, params, { capabilities: PLAYGROUND_CAPABILITIES, clientInfo: CLIENT_INFO });
  const response = await fetch(new URL(path, location.origin), {
    method: 'POST',
    cache: 'no-store',
    headers: { ...authHeaders(), ...headers },
    body,
  });
  const messages = parseMessages(await response.text());
  const reply = messages.find((m) => m.id === id);
  if (reply === undefined) throw new TaskRpcError(-32603, `${method}: no answer (HTTP ${response.status})`);
  const error = reply.error as Json | undefined;
  if (error !== undefined) throw new TaskRpcError(Number(error.code), String(error.message ?? ''), error.data);
  return (reply.result ?? {}) as Json;
}

/** This principal's rejection codes recorded by the server (GET /rejections). */
async function recordedRejections(): Promise<RecordedRejection[]> {
  const response = await fetch('/rejections', { headers: authHeaders(), cache: 'no-store' });
  if (!response.ok) return [];
  const body = (await response.json()) as { rejections?: RecordedRejection[] };
  return Array.isArray(body.rejections) ? body.rejections : [];
}

/** The codes recorded since the last look. */
async function newRejections(): Promise<RecordedRejection[]> {
  const fresh = (await recordedRejections()).filter((r) => r.seq > lastSeq);
  for (const r of fresh) lastSeq = Math.max(lastSeq, r.seq);
  return fresh;
}

// ------------------------------------------------------------------ timeline

function entry(kind: string, title: string, ...children: (Node | string)[]): HTMLLIElement {
  const li = el('li', { 'data-kind': kind }, el('h3', {}, title), ...children);
  $('timeline').append(li);
  // The newest entry on screen without scrolling: once this turn's other changes above the timeline (the form
  // re-rendered for the next question, the task panel's new status) are laid out, so they cannot push it away.
  requestAnimationFrame(() => li.scrollIntoView({ block: 'nearest' }));
  return li;
}

function stateDetails(state: string): HTMLElement {
  const view = describeToken(state);
  const box = el('div', { class: 'state' });
  box.append(
    el(
      'p',
      { class: 'state-info', 'data-codec': view.codec, 'data-bytes': String(view.bytes) },
      `requestState: ${view.bytes} bytes · codec ${view.codec} · kid ${view.kid ?? '?'}`,
    ),
  );
  if (view.claims !== undefined) {
    box.append(
      el(
        'p',
        { class: 'note' },
        'Readable: the HMAC codec protects integrity, not confidentiality. This client (and anyone who sees the token) can ' +
          'read these claims; it cannot change them. The answers of earlier rounds travel here too.',
      ),
      folded('Decoded claims', view.claims),
    );
  } else if (view.codec === 'jwe' || view.codec === 'aead') {
    box.append(
      el(
        'p',
        { class: 'note' },
        `Sealed: the ${view.codec} codec encrypts the state. This client cannot read what it carries` +
          `${view.header === undefined ? ' (only the format and the key id are visible)' : '; only the JWE header is visible'}.`,
      ),
    );
    if (view.header !== undefined) box.append(folded('JWE protected header', view.header));
  }
  return box;
}

function errorJson(error: unknown): Json {
  if (error instanceof ProtocolError || error instanceof TaskRpcError) {
    return { code: error.code, message: error.message, ...(error.data !== undefined && { data: error.data }) };
  }
  return { message: error instanceof Error ? error.message : String(error) };
}

/** Text shown for the server's recorded codes (or their absence). */
function recordedText(codes: RecordedRejection[]): string {
  if (codes.length === 0) return 'The server recorded no rejection code for this request.';
  return `The server recorded: ${codes.map((r) => r.code).join(', ')} (from its onReject hook; the client only saw -32602).`;
}

// ------------------------------------------------------------------ forms

function fieldFor(question: string, name: string, schema: Json, required: boolean): HTMLElement {
  const id = `q-${question}-${name}`;
  const title = `${typeof schema.title === 'string' ? schema.title : name}${required ? ' (required)' : ''}`;
  const wrap = el('div', { class: 'field' });
  const items = (schema.items ?? {}) as Json;
  const itemOptions = schema.type === 'array' ? (optionsOf(items) ?? (items.anyOf as Json[] | undefined)?.map((o) => o.const)) : undefined;
  if (itemOptions !== undefined) {
    const set = el('fieldset', { 'data-field': name, 'data-type': 'multi' }, el('legend', {}, title));
    itemOptions.forEach((option, i) => {
      const optionId = `${id}-${i}`;
      set.append(
        el(
          'div',
          {},
          el('input', { type: 'checkbox', id: optionId, value: String(option) }),
          ' ',
          el('label', { for: optionId }, String(option)),
        ),
      );
    });
    wrap.append(set);
    return wrap;
  }
  const options = optionsOf(schema);
  let input: HTMLElement;
  if (options !== undefined) {
    input = el(
      'select',
      { id, 'data-field': name, 'data-type': 'enum' },
      ...options.map((o) => el('option', { value: String(o) }, String(o))),
    );
  } else if (schema.type === 'boolean') {
    input = el('input', { id, type: 'checkbox', 'data-field': name, 'data-type': 'boolean' });
    if (schema.default === true) (input as HTMLInputElement).checked = true;
  } else if (schema.type === 'number' || schema.type === 'integer') {
    input = el('input', {
      id,
      type: 'number',
      'data-field': name,
      'data-type': schema.type,
      step: schema.type === 'integer' ? '1' : 'any',
    });
  } else {
    input = el('input', { id, type: 'text', 'data-field': name, 'data-type': 'string', size: '40' });
    if (typeof schema.maxLength === 'number') input.setAttribute('maxlength', String(schema.maxLength));
  }
  if (typeof schema.description === 'string') input.setAttribute('title', schema.description);
  wrap.append(el('label', { for: id }, title), ' ', input);
  return wrap;
}

function renderQuestions(asked: Record<string, Json>): void {
  const box = $('questions');
  box.replaceChildren();
  for (const [key, request] of Object.entries(asked)) {
    const params = (request.params ?? {}) as Json;
    const set = el('fieldset', { 'data-question': key }, el('legend', {}, `Question "${key}" (${String(request.method)})`));
    if (request.method === 'sampling/createMessage') {
      const messages = (params.messages ?? []) as { content?: { text?: string } }[];
      set.append(
        el('p', {}, "The server asks the client's model (sampling). You stand in for the model:"),
        pretty(messages.map((m) => m.content?.text ?? '')),
        el('label', { for: `q-${key}-text` }, 'Your reply'),
        el('br'),
        el('textarea', { id: `q-${key}-text`, rows: '3', cols: '70', 'data-kind': 'sampling' }, 'MRTR keeps mid-request questions safe.'),
      );
    } else if (request.method === 'roots/list') {
      set.append(
        el('p', {}, 'The server asks which roots (folders) this client shares. One root per line: a URI, then optionally a name.'),
        el('label', { for: `q-${key}-roots` }, 'Roots'),
        el('br'),
        el('textarea', { id: `q-${key}-roots`, rows: '3', cols: '70', 'data-kind': 'roots' }, 'file:///work/demo demo'),
      );
    } else if (params.mode === 'url') {
      const url = String(params.url);
      let safe = false;
      try {
        const parsed = new URL(url);
        safe = parsed.protocol === 'http:' || parsed.protocol === 'https:';
      } catch {
        safe = false;
      }
      set.append(el('p', {}, String(params.message ?? '')));
      if (safe) {
        set.append(
          el(
            'p',
            {},
            el('a', { id: `q-${key}-link`, href: url, target: '_blank', rel: 'noopener noreferrer' }, 'Open the connect page (new tab)'),
            ` ${url}`,
          ),
          el(
            'p',
            { class: 'note' },
            new URL(url).origin === location.origin
              ? 'Complete the page, then send "accept": accept is consent, the server learns completion from its own ledger.'
              : 'Careful: this link leads to another origin than this server.',
          ),
        );
      } else {
        set.append(el('p', {}, 'The server sent a URL this page will not open (not http or https).'));
      }
    } else {
      set.append(el('p', {}, String(params.message ?? '')));
      const schema = (params.requestedSchema ?? {}) as Json;
      const required = new Set((schema.required ?? []) as string[]);
      for (const [name, field] of Object.entries((schema.properties ?? {}) as Record<string, Json>)) {
        set.append(fieldFor(key, name, field, required.has(name)));
      }
    }
    box.append(set);
  }
  $('answer-buttons').hidden = Object.keys(asked).length === 0;
}

/** The answers as the forms are filled; `action` applies to the elicitations. */
function collectAnswers(action: 'accept' | 'decline' | 'cancel'): Json {
  const responses: Json = {};
  if (flow === undefined) return responses;
  for (const [key, request] of Object.entries(flow.asked)) {
    const set = document.querySelector<HTMLFieldSetElement>(`fieldset[data-question="${CSS.escape(key)}"]`);
    if (set === null) continue;
    if (request.method === 'sampling/createMessage') {
      const text = set.querySelector<HTMLTextAreaElement>('textarea')?.value ?? '';
      responses[key] = { role: 'assistant', content: { type: 'text', text }, model: 'a person in the playground' };
    } else if (request.method === 'roots/list') {
      const lines = (set.querySelector<HTMLTextAreaElement>('textarea')?.value ?? '').split('\n').map((l) => l.trim());
      const roots = lines
        .filter((l) => l.length > 0)
        .slice(0, 100)
        .map((l) => {
          const space = l.indexOf(' ');
          return space < 0 ? { uri: l } : { uri: l.slice(0, space), name: l.slice(space + 1).trim() };
        });
      responses[key] = { roots };
    } else if (action !== 'accept') {
      responses[key] = { action };
    } else if (((request.params ?? {}) as Json).mode === 'url') {
      responses[key] = { action: 'accept' };
    } else {
      const content: Json = {};
      for (const input of set.querySelectorAll<HTMLElement>('[data-field]')) {
        const name = input.dataset.field!;
        const type = input.dataset.type;
        if (type === 'multi') {
          content[name] = [...input.querySelectorAll<HTMLInputElement>('input:checked')].map((c) => c.value);
        } else if (type === 'boolean') {
          content[name] = (input as HTMLInputElement).checked;
        } else if (type === 'number' || type === 'integer') {
          const raw = (input as HTMLInputElement).value;
          if (raw !== '') content[name] = Number(raw);
        } else {
          const raw = (input as HTMLInputElement | HTMLSelectElement).value;
          if (raw !== '') content[name] = raw;
        }
      }
      responses[key] = { action: 'accept', content };
    }
  }
  return responses;
}

// ------------------------------------------------------------------ rounds

/** Sends one round of the current flow and shows it; `label` names an attack. */
async function round(extra: { inputResponses?: Json; requestState?: string }, args: Json, label?: string): Promise<Json | undefined> {
  const current = flow!;
  const c = await connected();
  // A first round of a keyed tool carries the flow's idempotency key (a retry sends the same one).
  const sent =
    extra.requestState === undefined && current.key !== undefined ? { ...extra, meta: { [IDEMPOTENCY_KEY_META]: current.key } } : extra;
  const request = requestOf(current.target, args, sent);
  const children: (Node | string)[] = [folded(`Request sent: ${request.method}`, request.params)];
  const dropBox = $<HTMLInputElement>('drop-next');
  // Only the page's own rounds (Call, Send answers): an attack leaves the box as it is, for the round after it.
  const dropping = dropBox.checked && label === undefined;
  if (dropping) dropBox.checked = false;
  const tool = current.target.kind === 'tool' && EFFECT_TOOLS.has(current.target.name) ? current.target.name : undefined;
  const counts: (number | undefined)[] = [];
  let result: Json;
  taskHandle = undefined;
  try {
    if (dropping) {
      counts.push(await effectsOf(tool));
      result = await sendDroppingFirst(
        dropper,
        () => sendRound(c, current.target, args, sent),
        async (lost) => {
          counts.push(await effectsOf(tool));
          lostEntry(current, lost, children);
          // The retry's own entry (its answer or its error) shows the request again: the nodes above now belong to the lost one.
          children.splice(0, children.length, folded(`The same request sent again: ${request.method}`, request.params));
        },
      );
      counts.push(await effectsOf(tool));
    } else {
      result = await sendRound(c, current.target, args, sent);
    }
  } catch (error) {
    const handle = taskHandle;
    taskHandle = undefined;
    if (handle !== undefined) return taskCreated(current, handle, children);
    const codes = await newRejections();
    const json = errorJson(error);
    const verdict = el(
      'p',
      { class: 'verdict', 'data-code': codes.map((r) => r.code).join(' '), 'data-error': String(json.code ?? '') },
      `✗ REJECTED: ${String(json.code ?? '')} ${String(json.message ?? '')}. ${recordedText(codes)}`,
    );
    const li = entry('rejected', label ?? `Round ${current.round + 1}: error`, ...children, folded('Error received', json, true), verdict);
    if (label !== undefined) li.dataset.attack = label;
    return undefined;
  }
  if (result.resultType === 'task' && typeof result.taskId === 'string') return taskCreated(current, result, children);
  children.push(...replayNotes(result, dropping, tool, counts));
  const again = dropping ? ' (sent again)' : '';
  const codes = await newRejections();
  current.round++;
  if (extra.requestState !== undefined) current.spent = { state: extra.requestState, responses: extra.inputResponses ?? {} };
  if (result.resultType === 'input_required') {
    const state = typeof result.requestState === 'string' ? result.requestState : undefined;
    current.state = state;
    current.asked = (result.inputRequests ?? {}) as Record<string, Json>;
    const verdict =
      label === undefined
        ? []
        : [el('p', { class: 'verdict', 'data-code': codes.map((r) => r.code).join(' ') }, `Not rejected. ${recordedText(codes)}`)];
    const li = entry(
      'input_required',
      `${label === undefined ? '' : `${label}: `}Round ${current.round}${again}: InputRequiredResult`,
      ...children,
      ...verdict,
      folded(
        `InputRequiredResult received: asks ${
          Object.entries(current.asked)
            .map(([k, r]) => describeQuestion(k, r))
            .join(', ') || 'nothing'
        }`,
        result,
      ),
      ...(state === undefined ? [] : [stateDetails(state)]),
    );
    if (label !== undefined) li.dataset.attack = label;
    renderQuestions(current.asked);
  } else {
    current.state = undefined;
    current.asked = {};
    current.done = true;
    const li = entry(
      'complete',
      `${label === undefined ? '' : `${label}: `}Round ${current.round}${again}: complete${result.isError === true ? ' (isError)' : ''}`,
      ...children,
      el('p', { class: 'verdict' }, `✓ COMPLETE after ${current.round} round(s).`),
      el('p', { class: 'result-text' }, resultText(result)),
      folded('Result received', result),
    );
    if (label !== undefined) li.dataset.attack = label;
    renderQuestions({});
  }
  return result;
}

/** The timeline entry of an answer the page dropped: what was sent, and what the server answered. */
function lostEntry(current: Flow, lost: LostAnswer, children: (Node | string)[]): void {
  const messages = parseMessages(lost.body);
  entry(
    'dropped',
    `Round ${current.round + 1}: response dropped`,
    ...children,
    el(
      'p',
      { class: 'verdict', 'data-status': String(lost.status), 'data-chars': String(lost.chars) },
      `↯ DROPPED: the server answered (HTTP ${lost.status}, ${lost.chars} characters); this page threw the answer away ` +
        'before its MCP client read it, as a broken connection would. It now sends the same request again.',
    ),
    folded('The lost answer (read here only to show it; the client never got it)', messages.length === 1 ? messages[0] : lost.body),
  );
}

/** Under a result: the replay badge (`_meta["dev.mrtr/replayed"]`), and after a dropped answer the effect counts. */
function replayNotes(result: Json, dropped: boolean, tool: string | undefined, counts: (number | undefined)[]): HTMLElement[] {
  const notes: HTMLElement[] = [];
  if (isReplayed(result)) {
    notes.push(el('p', { class: 'badge', 'data-replayed': 'true' }, 'replayed — answered from the record, no second effect'));
  } else if (dropped) {
    notes.push(
      el(
        'p',
        { class: 'badge', 'data-replayed': 'false' },
        'not replayed — the retry was served as a new request (no idempotency key and no state to answer it from)',
      ),
    );
  }
  if (dropped && tool !== undefined && counts.length === 3 && counts.every((n) => n !== undefined)) {
    const [before, lost, retried] = counts as number[];
    notes.push(
      el(
        'p',
        { class: 'effects', 'data-before': String(before), 'data-after-lost': String(lost), 'data-after-retry': String(retried) },
        `Effects of ${tool} counted by this server (mrtr_demo_effects_total, every user together): ${before} before the ` +
          `request, ${lost} after the lost answer, ${retried} after the retry.`,
      ),
    );
  }
  return notes;
}

// ------------------------------------------------------------------ tasks

const shortId = (id: string): string => (id.length > 10 ? `${id.slice(0, 8)}…` : id);

/** A round answered with a task: shows the handle, opens the task panel and starts polling tasks/get. */
function taskCreated(current: Flow, handle: Json, children: (Node | string)[]): Json {
  current.round++;
  current.state = undefined;
  current.asked = {};
  const id = String(handle.taskId);
  const suggested = typeof handle.pollIntervalMs === 'number' && Number.isFinite(handle.pollIntervalMs) ? handle.pollIntervalMs : 1_000;
  const task: TaskState = {
    id,
    pollMs: Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, suggested)),
    status: '',
    statusMessage: undefined,
    askedKeys: '',
    final: false,
    stop: new AbortController(),
  };
  current.task = task;
  entry(
    'task',
    `Round ${current.round}: task ${shortId(id)} created`,
    ...children,
    el(
      'p',
      { class: 'verdict' },
      `→ TASK: the server runs the call as task ${shortId(id)}; this page polls tasks/get every ${task.pollMs} ms.`,
    ),
    folded('Task handle received (resultType "task")', handle),
  );
  renderQuestions({});
  $('task-id').textContent = shortId(id);
  $('task-id').title = id;
  $('task-steps').replaceChildren();
  $('task-section').hidden = false;
  status('The call runs as a task: its status appears in the task panel as it changes.');
  showTask(current, handle);
  if (!task.final) void pollTask(current);
  return handle;
}

/** Ends the polling of the current flow's task, if any (another flow starts, or the page starts over). */
function stopTask(): void {
  flow?.task?.stop.abort();
  $('task-section').hidden = true;
  $('task-steps').replaceChildren();
}

/** A pause that ends early when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done);
  });
}

/** Polls tasks/get at the task's interval until a final status, a cancel, another flow, an error, or MAX_POLLS. */
async function pollTask(current: Flow): Promise<void> {
  const task = current.task!;
  for (let i = 0; i < MAX_POLLS; i++) {
    await pause(task.pollMs, task.stop.signal);
    if (task.stop.signal.aborted || flow !== current) return;
    let view: Json;
    try {
      view = await taskRequest(current.path, 'tasks/get', { taskId: task.id });
    } catch (error) {
      if (task.stop.signal.aborted || flow !== current) return;
      entry('rejected', `tasks/get ${shortId(task.id)}: error`, folded('Error received', errorJson(error), true));
      status('Polling stopped: tasks/get failed.');
      task.stop.abort();
      refresh();
      return;
    }
    if (task.stop.signal.aborted || flow !== current) return;
    showTask(current, view);
    if (task.final) return;
  }
  if (!task.final) {
    status(`Polling stopped after ${MAX_POLLS} tasks/get; the task may still be running.`);
    task.stop.abort();
    refresh();
  }
}

/** One view of the task (the handle, or a tasks/get answer): a new timeline step when status or message changed. */
function showTask(current: Flow, view: Json): void {
  const task = current.task!;
  const next = typeof view.status === 'string' ? view.status : 'unknown';
  const message = typeof view.statusMessage === 'string' ? view.statusMessage : undefined;
  const asked = next === 'input_required' ? ((view.inputRequests ?? {}) as Record<string, Json>) : {};
  const askedKeys = Object.keys(asked).sort().join(',');
  const newlyAsking = next === 'input_required' && task.status !== 'input_required';
  if (next !== task.status || message !== task.statusMessage || askedKeys !== task.askedKeys) {
    const step = el('li', { 'data-status': next }, el('strong', { class: 'task-status' }, next));
    if (message !== undefined) step.append(' — ', el('span', { class: 'task-message' }, message));
    for (const [key, request] of Object.entries(asked)) {
      const params = (request.params ?? {}) as Json;
      step.append(el('p', { class: 'task-question' }, `asks ${describeQuestion(key, request)}: ${String(params.message ?? '')}`));
    }
    step.append(' ', el('time', { datetime: new Date().toISOString() }, new Date().toLocaleTimeString()));
    $('task-steps').append(step);
    $('task-status').textContent = next;
    $('task-status').dataset.status = next;
    task.status = next;
    task.statusMessage = message;
  }
  if (askedKeys !== task.askedKeys || newlyAsking) {
    task.askedKeys = askedKeys;
    current.asked = asked;
    renderQuestions(asked);
    if (askedKeys !== '') status('The task asks a question: answer it above (sent with tasks/update).');
  }
  if (FINAL_STATUSES.has(next) && !task.final) {
    task.final = true;
    task.stop.abort();
    current.done = true;
    finishTask(current, view);
  }
  refresh();
}

/** The end of a task, in the main timeline like any other result. */
function finishTask(current: Flow, view: Json): void {
  const id = shortId(current.task!.id);
  if (view.status === 'completed') {
    const result = (view.result ?? {}) as Json;
    entry(
      'complete',
      `Task ${id}: completed${result.isError === true ? ' (isError)' : ''}`,
      el(
        'p',
        { class: 'verdict' },
        `✓ COMPLETE: task ${id} completed after ${current.round} round(s) and ${$('task-steps').childElementCount} task step(s).`,
      ),
      el('p', { class: 'result-text' }, resultText(result)),
      folded('Result received (tasks/get)', result),
    );
    status('The task is complete.');
  } else if (view.status === 'failed') {
    const error = (view.error ?? {}) as Json;
    entry(
      'rejected',
      `Task ${id}: failed`,
      el(
        'p',
        { class: 'verdict', 'data-error': String(error.code ?? '') },
        `✗ FAILED: ${String(error.code ?? '')} ${String(error.message ?? '')}`,
      ),
      folded('Error received (tasks/get)', error, true),
    );
    status('The task failed.');
  } else {
    entry(
      'cancelled',
      `Task ${id}: cancelled`,
      el('p', { class: 'verdict' }, `✗ CANCELLED: task ${id} was cancelled; it has no result.`),
      folded('Task (tasks/get)', view),
    );
    status('The task is cancelled.');
  }
}

/** Answers the task's outstanding questions with tasks/update, then polls on. */
async function answerTask(current: Flow, kind: 'accept' | 'decline' | 'cancel'): Promise<void> {
  const task = current.task!;
  const inputResponses = collectAnswers(kind);
  await taskRequest(current.path, 'tasks/update', { taskId: task.id, inputResponses });
  entry('task', `tasks/update ${shortId(task.id)}: answers sent`, folded('Answers sent (tasks/update)', inputResponses));
  // askedKeys stays: a tasks/get answered before the update landed must not put the answered form back.
  current.asked = {};
  renderQuestions({});
  status('Answers sent; the task runs on.');
}

/** tasks/cancel, then one tasks/get to show where it ended. */
async function cancelTask(current: Flow): Promise<void> {
  const task = current.task!;
  await taskRequest(current.path, 'tasks/cancel', { taskId: task.id });
  entry('task', `tasks/cancel ${shortId(task.id)}: sent`, el('p', {}, 'The server stops the work; tasks/get shows where it ended.'));
  const view = await taskRequest(current.path, 'tasks/get', { taskId: task.id });
  if (flow === current) showTask(current, view);
}

function parseArgs(): Json | undefined {
  try {
    const value: unknown = JSON.parse($<HTMLTextAreaElement>('args').value || '{}');
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) return value as Json;
  } catch {
    // reported below
  }
  status('The arguments must be a JSON object.');
  return undefined;
}

function selectedTarget(): Target {
  return PLAYGROUND_TARGETS[Number($<HTMLSelectElement>('target').value)] ?? PLAYGROUND_TARGETS[0]!;
}

/** Any of the page's actions, one at a time; errors end up on the page. */
function action(run: () => Promise<void>): () => void {
  return () => {
    if (busy) return;
    busy = true;
    refresh();
    run()
      .catch((error: unknown) => {
        entry('rejected', 'Error', pretty(errorJson(error)));
        status(`Error: ${error instanceof Error ? error.message : String(error)}`);
      })
      .finally(() => {
        busy = false;
        refresh();
      });
  };
}

const answersFor = (asked: Record<string, Json>, args: Json): Json =>
  Object.fromEntries(Object.entries(asked).map(([key, request]) => [key, scriptedAnswer(request, args)]));

/** One character changed in the middle of the token, staying in the base64url alphabet. */
function flipOne(token: string): string {
  let i = Math.floor(token.length / 2);
  while (i < token.length - 1 && token[i] === '.') i++;
  const c = token[i] === 'A' ? 'B' : 'A';
  return token.slice(0, i) + c + token.slice(i + 1);
}

/** Other arguments of the same shape: a string changed, a path added, or a new argument. */
function changedArgs(args: Json): Json {
  for (const [name, value] of Object.entries(args)) {
    if (typeof value === 'string') return { ...args, [name]: `${value}-other` };
    if (Array.isArray(value)) return { ...args, [name]: [...value, 'etc/passwd'] };
  }
  return { ...args, extra: 'added' };
}

function refresh(): void {
  const hasState = flow?.state !== undefined && !busy;
  for (const id of ['attack-flip', 'attack-other', 'attack-args', 'attack-unasked']) $<HTMLButtonElement>(id).disabled = !hasState;
  $<HTMLButtonElement>('attack-replay').disabled = busy || flow?.spent === undefined;
  $<HTMLButtonElement>('attack-expire').disabled = !hasState || config.ttlMs + config.skewMs > MAX_EXPIRY_WAIT_MS;
  for (const id of ['call', 'reset', 'send', 'decline', 'cancel', 'compare', 'drop-next']) $<HTMLButtonElement>(id).disabled = busy;
  const task = flow?.task;
  $<HTMLButtonElement>('task-cancel').disabled = busy || task === undefined || task.final || task.stop.signal.aborted;
}

async function wait(ms: number): Promise<void> {
  const end = Date.now() + ms;
  // Bounded: one tick per second until the deadline, at most ms/1000 + 1 ticks.
  for (let tick = 0; tick <= ms / 1000 + 1 && Date.now() < end; tick++) {
    status(
      `Waiting ${Math.ceil((end - Date.now()) / 1000)} s for the state to expire (TTL ${config.ttlMs} ms + ${config.skewMs} ms skew)…`,
    );
    await new Promise((resolve) => setTimeout(resolve, Math.min(1000, Math.max(0, end - Date.now()))));
  }
}

/** The first round of the selected call, five times per codec endpoint: state size and median round trip. */
async function compare(): Promise<void> {
  const target = selectedTarget();
  const args = parseArgs();
  if (args === undefined) return;
  const body = $('comparison').querySelector('tbody')!;
  body.replaceChildren();
  for (const endpoint of config.endpoints) {
    status(`Comparing: ${endpoint.codec}…`);
    const c = await connected(endpoint.path);
    const times: number[] = [];
    let bytes = 0;
    let readable = false;
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const result = await sendRound(c, target, args);
      times.push(performance.now() - t0);
      if (typeof result.requestState === 'string') {
        const view = describeToken(result.requestState);
        bytes = view.bytes;
        readable = view.readable;
      }
    }
    times.sort((a, b) => a - b);
    const median = times[2]!;
    body.append(
      el(
        'tr',
        { 'data-codec': endpoint.codec, 'data-bytes': String(bytes) },
        el('td', {}, endpoint.codec),
        el('td', {}, endpoint.path),
        el('td', {}, bytes === 0 ? 'no state (complete at once)' : `${bytes} B`),
        el('td', {}, `${median.toFixed(1)} ms`),
        el('td', {}, readable ? 'yes (integrity only)' : 'no (sealed)'),
      ),
    );
  }
  status(`Compared ${target.name} on ${config.endpoints.length} codecs.`);
}

// ------------------------------------------------------------------ start

/** The "break it" buttons: each presents the current flow's state in a way the server must refuse. */
function wireAttacks(): void {
  const current = () => flow as Flow & { state: string };
  $('attack-flip').addEventListener(
    'click',
    action(async () => {
      const f = current();
      await round({ inputResponses: answersFor(f.asked, f.args), requestState: flipOne(f.state) }, f.args, 'Attack: one character flipped');
    }),
  );
  $('attack-other').addEventListener(
    'click',
    action(async () => {
      const f = current();
      const other = TARGETS.find((t) => t.name === (f.target.name === 'delete_files' ? 'deploy' : 'delete_files'))!;
      const c = await connected();
      const first = await sendRound(c, other, other.args);
      const foreign = String(first.requestState);
      entry('input_required', `Another call: ${other.name} ${JSON.stringify(other.args)}, round 1`, stateDetails(foreign));
      await round(
        { inputResponses: answersFor(f.asked, f.args), requestState: foreign },
        f.args,
        `Attack: the state of ${other.name} presented to ${f.target.name}`,
      );
    }),
  );
  $('attack-replay').addEventListener(
    'click',
    action(async () => {
      const f = flow!;
      const spent = f.spent!;
      // With other answers: an identical retry of a spent state gets its first answer again (nothing runs twice),
      // any other use of it is a replay.
      const other = { ...spent.responses, replayed: { action: 'decline' } };
      await round({ inputResponses: other, requestState: spent.state }, f.args, 'Attack: the last spent state replayed with other answers');
    }),
  );
  $('attack-args').addEventListener(
    'click',
    action(async () => {
      const f = current();
      await round({ inputResponses: answersFor(f.asked, f.args), requestState: f.state }, changedArgs(f.args), 'Attack: other arguments');
    }),
  );
  $('attack-unasked').addEventListener(
    'click',
    action(async () => {
      const f = current();
      const result = await round(
        { inputResponses: { not_asked: { action: 'accept', content: { confirm: true } } }, requestState: f.state },
        f.args,
        'Attack: an answer to a question that was not asked',
      );
      if (result !== undefined) {
        entry(
          'note',
          'Why this one is not an error',
          el(
            'p',
            {},
            'The server ignores an answer to a question it did not ask (its state pins the questions it sent) and asks its own ' +
              'question again with a fresh state. Nothing was taken from the unasked answer; the presented state is spent.',
          ),
        );
      }
    }),
  );
  $('attack-expire').addEventListener(
    'click',
    action(async () => {
      const f = current();
      const state = f.state;
      await wait(config.ttlMs + config.skewMs + 1000);
      await round({ inputResponses: answersFor(f.asked, f.args), requestState: state }, f.args, 'Attack: an expired state');
      status('');
    }),
  );
}

async function start(): Promise<void> {
  const response = await fetch('/playground.json', { cache: 'no-store' });
  config = (await response.json()) as PlaygroundConfig;
  const ttl = config.ttlMs >= 60_000 ? `${config.ttlMs / 60_000} min` : `${config.ttlMs / 1000} s`;
  $('server-info').textContent =
    `This server: ${
      config.codec === 'all'
        ? `codecs ${config.endpoints.map((e) => e.codec).join(', ')} (one endpoint each)`
        : `codec ${config.codec} (${config.codec === 'hmac' ? 'readable by the client, integrity-protected' : 'confidential'})`
    }, ` + `state lifetime ${ttl} (+${config.skewMs / 1000} s clock skew), auth ${config.auth}.`;
  $('server-info').dataset.codec = config.codec;
  $('token-row').hidden = config.auth !== 'bearer';
  $('expire-note').textContent =
    config.ttlMs + config.skewMs > MAX_EXPIRY_WAIT_MS
      ? `— unavailable here: states live ${ttl} plus ${config.skewMs / 1000} s of tolerated clock skew. ` +
        'Start the demo with a short lifetime (pnpm demo -- --ttl-ms 2000) to try it.'
      : `— waits ${Math.ceil((config.ttlMs + config.skewMs) / 1000) + 1} s (TTL + skew), then presents the state.`;

  if (config.endpoints.length > 1) {
    const endpoint = $<HTMLSelectElement>('endpoint');
    for (const e of config.endpoints) endpoint.append(el('option', { value: e.path }, `${e.codec} (${e.path})`));
    $('endpoint-row').hidden = false;
    $('compare-section').hidden = false;
  }
  $('compare').addEventListener('click', action(compare));

  const select = $<HTMLSelectElement>('target');
  PLAYGROUND_TARGETS.forEach((t, i) => {
    select.append(el('option', { value: String(i) }, `${t.kind} ${t.name}`));
  });
  const showTarget = () => {
    const t = selectedTarget();
    $<HTMLTextAreaElement>('args').value = JSON.stringify(t.args);
    $('target-summary').textContent = `asks: ${t.summary}`;
  };
  select.addEventListener('change', showTarget);
  showTarget();

  $('call').addEventListener(
    'click',
    action(async () => {
      const args = parseArgs();
      if (args === undefined) return;
      stopTask();
      flow = { path: selectedPath(), target: selectedTarget(), args, round: 0, state: undefined, asked: {}, spent: undefined, done: false };
      // The old timeline goes at once (before any await): what appears next belongs to this call.
      $('timeline').replaceChildren();
      status(`Calling ${flow.target.name}…`);
      const { keyed } = await connection(flow.path);
      if (flow.target.kind === 'tool' && keyed.has(flow.target.name)) flow.key = freshKey();
      await round({}, args);
      if (flow.task === undefined) status(flow.done ? 'The flow is complete.' : 'Answer the question(s) above, or break the flow below.');
    }),
  );
  $('reset').addEventListener('click', () => {
    stopTask();
    flow = undefined;
    $('timeline').replaceChildren();
    renderQuestions({});
    $('questions').replaceChildren(el('p', {}, 'No question yet: call something first.'));
    status('');
    refresh();
  });
  const answer = (kind: 'accept' | 'decline' | 'cancel') =>
    action(async () => {
      if (flow?.state === undefined && Object.keys(flow?.asked ?? {}).length === 0) return;
      if (flow!.task !== undefined) return answerTask(flow!, kind);
      const responses = collectAnswers(kind);
      await round({ inputResponses: responses, ...(flow!.state !== undefined && { requestState: flow!.state }) }, flow!.args);
      if (flow!.task === undefined)
        status(flow!.done ? 'The flow is complete. Try "Replay the last state".' : 'Answer the next question(s).');
    });
  $('answer-form').addEventListener('submit', (event) => {
    event.preventDefault();
    answer('accept')();
  });
  $('decline').addEventListener('click', answer('decline'));
  $('task-cancel').addEventListener(
    'click',
    action(async () => {
      if (flow?.task === undefined || flow.task.final) return;
      await cancelTask(flow);
    }),
  );
  $('cancel').addEventListener('click', answer('cancel'));

  wireAttacks();
  refresh();
}

start().catch((error: unknown) => {
  document.getElementById('server-info')!.textContent =
    `The playground could not start: ${error instanceof Error ? error.message : String(error)}`;
});

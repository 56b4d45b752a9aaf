// The playground's "drop the next response" control: the page's fetch throws one answer away after the server sent
// it (as a lost connection would), and the page then sends the same request again. No DOM here: the Node tests
// drive it with the official client against a real demo server.

type Json = Record<string, unknown>;

/** `_meta` key of a first-round call's idempotency key (`IDEMPOTENCY_KEY_META` of @mrtr/mcp-server). */
export const IDEMPOTENCY_KEY_META = 'dev.mrtr/idempotency-key';
/** `_meta` key a tool declares its idempotency under in `tools/list` (`IDEMPOTENCY_META`). */
export const IDEMPOTENCY_META = 'dev.mrtr/idempotency';
/** `_meta` key of the replay marker on an answer served from the record (`REPLAYED_META`). */
export const REPLAYED_META = 'dev.mrtr/replayed';

/** The requests whose answers can be dropped: one round of a flow. */
const ROUND_METHODS: ReadonlySet<string> = new Set(['tools/call', 'prompts/get', 'resources/read']);

/** Longest body the page keeps of a dropped answer, to show it (the rest is still read, then let go). */
const MAX_KEPT_CHARS = 100_000;

export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** An answer the page threw away: the server sent it in full; the client never saw it. */
export interface LostAnswer {
  /** The JSON-RPC method of the request (its `Mcp-Method` header). */
  method: string;
  /** The HTTP status the server answered with. */
  status: number;
  /** The body's length in characters (read to its end: the server had finished). */
  chars: number;
  /** The body (up to 100,000 characters), to show what was lost. */
  body: string;
  /** The request body that was sent, to compare with the retry. */
  requestBody: string;
}

/** Thrown by the dropping fetch in place of the answer (what a client sees when a connection breaks). */
export class DroppedResponseError extends TypeError {
  constructor() {
    super('Failed to fetch: the playground dropped this response (as if lost on the network)');
    this.name = 'DroppedResponseError';
  }
}

export interface Dropper {
  /** The fetch to give the client's transport: the inner fetch, dropping one round's answer once armed. */
  readonly fetch: FetchLike;
  /** Drops the next answer to a round (`tools/call`, `prompts/get`, `resources/read`), once. */
  arm(): void;
  /** Undoes {@link arm} if nothing was dropped yet. */
  disarm(): void;
  readonly armed: boolean;
  /** The answer dropped since the last call, if any (and forgets it). */
  take(): LostAnswer | undefined;
}

/** The method of a request as the 2026-07-28 client sends it: its `Mcp-Method` header. */
function methodOf(input: string | URL | Request, init: RequestInit | undefined): string {
  const fromInit = new Headers(init?.headers).get('mcp-method');
  if (fromInit !== null) return fromInit;
  return input instanceof Request ? (input.headers.get('mcp-method') ?? '') : '';
}

async function bodyOf(input: string | URL | Request, init: RequestInit | undefined): Promise<string> {
  if (typeof init?.body === 'string') return init.body;
  if (input instanceof Request) return input.clone().text();
  return '';
}

/** A fetch over `inner` that, when armed, reads one round's answer to its end and throws it away. */
export function createDropper(inner: FetchLike): Dropper {
  let armed = false;
  let lost: LostAnswer | undefined;
  const fetch: FetchLike = async (input, init) => {
    const method = methodOf(input, init);
    if (!armed || !ROUND_METHODS.has(method)) return inner(input, init);
    armed = false;
    const requestBody = await bodyOf(input, init);
    const response = await inner(input, init);
    // Read to the end: the server has answered (and done whatever the call does) before the answer is lost.
    const text = await response.text();
    lost = { method, status: response.status, chars: text.length, body: text.slice(0, MAX_KEPT_CHARS), requestBody };
    throw new DroppedResponseError();
  };
  return {
    fetch,
    arm: () => {
      armed = true;
      lost = undefined;
    },
    disarm: () => {
      armed = false;
    },
    get armed() {
      return armed;
    },
    take: () => {
      const taken = lost;
      lost = undefined;
      return taken;
    },
  };
}

/**
 * Sends a request whose answer `dropper` drops, then the same request again: `send` is called twice with nothing
 * changed (the same arguments, idempotency key, state and answers), as a client does after a lost response.
 * `onLost` sees the lost answer before the second send. Rejects as `send` does when the first send failed for
 * another reason (nothing was dropped: no retry), or with the second send's error.
 */
export async function sendDroppingFirst<T>(
  dropper: Dropper,
  send: () => Promise<T>,
  onLost: (lost: LostAnswer) => void | Promise<void>,
): Promise<T> {
  dropper.arm();
  try {
    await send();
  } catch (error) {
    const lost = dropper.take();
    if (lost === undefined) throw error;
    await onLost(lost);
    return await send();
  } finally {
    dropper.disarm();
  }
  throw new Error('playground: the response was not dropped (the request was not a round)');
}

/** Whether an answer carries the replay marker (`_meta["dev.mrtr/replayed"]: true`). */
export const isReplayed = (result: Json): boolean => (result._meta as Json | undefined)?.[REPLAYED_META] === true;

/** `mrtr_demo_effects_total{tool="…"}` in a Prometheus scrape; `undefined` when the series is not there. */
export function effectCount(scrape: string, tool: string): number | undefined {
  const prefix = `mrtr_demo_effects_total{tool="${tool}",`;
  const line = scrape.split('\n').find((l) => l.startsWith(prefix));
  if (line === undefined) return undefined;
  const value = Number(line.slice(line.lastIndexOf(' ') + 1));
  return Number.isFinite(value) ? value : undefined;
}

/** A fresh idempotency key: 128 random bits, hex (crypto.getRandomValues works on plain http too). */
export function freshKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `pg-${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

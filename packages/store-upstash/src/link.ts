import { StoreUnavailableError } from '@mrtr/core/errors';
import { intOption, type OptionNames, optionsObject, stringOption } from '@mrtr/core/options';
import { type BatchEntry, createBatcher } from '@mrtr/core/store';
import { errors, Redis } from '@upstash/redis';

/** How a store reaches Upstash: `url` and `token` (an owned client), or an `@upstash/redis` `client`. */
export interface UpstashConnectionOptions {
  /**
   * The REST URL (`UPSTASH_REDIS_REST_URL`, or `KV_REST_API_URL` on a Vercel integration). With `token`, the store
   * makes its own client: no automatic retries (the store resolves an unanswered request itself), every request
   * bounded by `commandTimeoutMs`.
   * @default none: give `url` and `token`, or `client`
   */
  url?: string | undefined;
  /**
   * The REST token (`UPSTASH_REDIS_REST_TOKEN`, or `KV_REST_API_TOKEN`). Never logged.
   * @default none
   */
  token?: string | undefined;
  /**
   * An existing `@upstash/redis` `Redis` client. The store sends only `EVALSHA`/`EVAL` of its own scripts on it
   * and reads their replies strictly, so the client's own retries are harmless (every script is idempotent for the
   * call that sent it) and `automaticDeserialization` may be on or off. The store bounds each call by
   * `commandTimeoutMs` itself.
   * @default none (the store creates its own client from `url` and `token`)
   */
  client?: Redis | undefined;
  /**
   * Longest wait for one reply, in ms (1–600000); then the store asks once more, and past that the operation
   * rejects `ERR_STORE_UNAVAILABLE`.
   * @default 5000
   */
  commandTimeoutMs?: number | undefined;
  /**
   * Prefix of every key the store writes; stores with the same prefix and namespace share one ledger.
   * @default 'mrtr:'
   */
  prefix?: string | undefined;
  /**
   * Ledger name inside the prefix (`%` and `:` percent-encoded, so two namespaces never share a key).
   * @default ''
   */
  namespace?: string | undefined;
}

/** One script call waiting for its batch. */
interface Call extends BatchEntry<unknown> {
  readonly script: Script;
  readonly keys: string[];
  readonly args: (string | number)[];
}

/** Settles a call from its entry of a pipeline's reply (a Redis error: that call fails closed) and notes it answered. */
function settle(call: Call, answered: Set<Call>, error: string | undefined | null, result: unknown): void {
  answered.add(call);
  if (error === undefined || error === null) call.resolve(result);
  else call.reject(new StoreUnavailableError({ cause: new errors.UpstashError(String(error)) }));
}

/** Most calls one pipeline request carries. */
const MAX_BATCH = 64;
/** Most calls waiting for a request; one more rejects at once with `ERR_STORE_UNAVAILABLE`. */
const MAX_QUEUED = 16_384;
/** Requests one link keeps in flight at once. */
const MAX_IN_FLIGHT = 4;

/** One script call on Upstash: its reply, or a rejection that is always `StoreUnavailableError`. */
export interface Link {
  readonly client: Redis;
  readonly keyPrefix: string;
  readonly namespace: string;
  run(script: Script, keys: string[], args: (string | number)[]): Promise<unknown>;
  close(): void;
  readonly closed: boolean;
}

/** A Lua script with its SHA-1 (computed once, with Web Crypto, so the store runs on edge runtimes too). */
export interface Script {
  readonly source: string;
  sha(): Promise<string>;
}

export function script(source: string): Script {
  let sha: Promise<string> | undefined;
  return {
    source,
    sha: () => {
      sha ??= crypto.subtle.digest('SHA-1', new TextEncoder().encode(source)).then((digest) => {
        let hex = '';
        for (const byte of new Uint8Array(digest)) hex += byte.toString(16).padStart(2, '0');
        return hex;
      });
      return sha;
    },
  };
}

const encodeNamespace = (namespace: string): string => namespace.replace(/%/g, '%25').replace(/:/g, '%3A');

/** Redis answered with an error: the script did not run (or ran and failed before writing: scripts check first). */
const isReplyError = (error: unknown): error is Error => error instanceof errors.UpstashError;

/** The names of {@link UpstashConnectionOptions}, for a store's list of known options. */
export const CONNECTION_OPTIONS: OptionNames<UpstashConnectionOptions> = {
  url: true,
  token: true,
  client: true,
  commandTimeoutMs: true,
  prefix: true,
  namespace: true,
};

/** The parsed connection options and the client: the one given, or one made from url and token. */
function connect<O extends UpstashConnectionOptions>(label: string, options: O, known: OptionNames<O>) {
  options = optionsObject(label, options, known);
  const { url, token, client: injected } = options;
  const commandTimeoutMs = intOption(`${label}: commandTimeoutMs`, options.commandTimeoutMs, 5000, 1, 600_000);
  const prefix = stringOption(`${label}: prefix`, options.prefix, 'mrtr:');
  const namespace = stringOption(`${label}: namespace`, options.namespace, '');
  if (injected !== undefined) {
    if (url !== undefined || token !== undefined) throw new TypeError(`${label}: give either url and token, or client, not both`);
    if (injected === null || typeof (injected as Partial<Redis>).evalsha !== 'function') {
      throw new TypeError(`${label}: client must be an @upstash/redis Redis instance`);
    }
  } else {
    if (typeof url !== 'string' || url.length === 0) throw new TypeError(`${label}: url must be a non-empty string (or give client)`);
    if (!/^https?:\/\//.test(url)) throw new TypeError(`${label}: url must start with https:// (or http:// for a local server)`);
    if (typeof token !== 'string' || token.length === 0) throw new TypeError(`${label}: token must be a non-empty string`);
  }
  const client =
    injected ??
    new Redis({
      url,
      token,
      // No automatic retries: the store asks again itself, once, with scripts that are idempotent for their caller.
      retry: false,
      automaticDeserialization: false,
      enableTelemetry: false,
      enableAutoPipelining: false, // the store batches its own calls (see `sendBatch`), each batch resent as one
      // A function: @upstash/redis answers an aborted *shared* signal with a made-up `{ result: "Aborted" }`.
      signal: () => AbortSignal.timeout(commandTimeoutMs),
    });
  return { client, injected: injected !== undefined, commandTimeoutMs, prefix, namespace };
}

/** Parses the connection options and opens the link (no request is sent before the first operation). */
export function openLink<O extends UpstashConnectionOptions>(label: string, options: O, known: OptionNames<O>): Link {
  const { client, injected, commandTimeoutMs, prefix, namespace } = connect(label, options, known);
  let closed = false;
  const bounded = <T>(promise: Promise<T>): Promise<T> => {
    if (!injected) return promise;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no reply within ${commandTimeoutMs} ms`)), commandTimeoutMs);
    });
    return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
  };

  const once = async (s: Script, keys: string[], args: (string | number)[]): Promise<unknown> => {
    const sha = await s.sha();
    try {
      return await bounded(client.evalsha(sha, keys, args));
    } catch (error) {
      // Not cached on this server (first use, a flush): nothing ran; EVAL loads it.
      if (isReplyError(error) && error.message.includes('NOSCRIPT')) return bounded(client.eval(s.source, keys, args));
      throw error;
    }
  };

  /** One call alone: asked once more when no reply comes (see `sendBatch`). */
  const sendLone = async (call: Call): Promise<void> => {
    const { script: s, keys, args } = call;
    try {
      call.resolve(await once(s, keys, args));
      return;
    } catch (first) {
      if (isReplyError(first) || closed) throw new StoreUnavailableError({ cause: first });
      // No answer (a timeout, a connection cut, a reply lost on the way): the script may have run. Every script of
      // this package answers its own caller's second call as it answered the first, so asking again settles it.
      try {
        call.resolve(await once(s, keys, args));
      } catch {
        throw new StoreUnavailableError({ cause: first });
      }
    }
  };

  /**
   * One `POST /pipeline` of `EVALSHA`s (`EVAL` for those the server answered `NOSCRIPT`: nothing of theirs ran), each
   * call settled from its own entry of the reply (a Redis error fails that call only).
   */
  const pipelineOnce = async (calls: Call[], answered: Set<Call>): Promise<void> => {
    const pipeline = client.pipeline();
    const shas = await Promise.all(calls.map((call) => call.script.sha()));
    calls.forEach((call, i) => {
      pipeline.evalsha(shas[i] as string, call.keys, call.args);
    });
    const replies = await bounded(pipeline.exec({ keepErrors: true }));
    if (!Array.isArray(replies) || replies.length !== calls.length) throw new Error('unexpected reply to a pipeline');
    const unloaded: Call[] = [];
    calls.forEach((call, i) => {
      const { error, result } = replies[i] as { error?: string; result: unknown };
      if (String(error ?? '').includes('NOSCRIPT')) unloaded.push(call);
      else settle(call, answered, error, result);
    });
    if (unloaded.length === 0) return;
    const loading = client.pipeline();
    for (const call of unloaded) loading.eval(call.script.source, call.keys, call.args);
    const loaded = await bounded(loading.exec({ keepErrors: true }));
    if (!Array.isArray(loaded) || loaded.length !== unloaded.length) throw new Error('unexpected reply to a pipeline');
    unloaded.forEach((call, i) => {
      const { error, result } = loaded[i] as { error?: string; result: unknown };
      settle(call, answered, error, result);
    });
  };

  /**
   * One batch: a lone call is one `EVALSHA` request; two or more go as one pipeline. A batch that got no reply (a
   * timeout, a cut connection) may have run in part or in full: it is sent once more as it was (every script answers
   * its own caller's second call as it answered the first, by the owner value it carries; calls already answered are
   * settled and ignore a second answer). No reply either time → every call `ERR_STORE_UNAVAILABLE`.
   */
  const sendBatch = async (calls: Call[]): Promise<void> => {
    if (closed) throw new StoreUnavailableError({ cause: new Error('store is closed') });
    if (calls.length === 1) return sendLone(calls[0] as Call);
    const answered = new Set<Call>();
    try {
      await pipelineOnce(calls, answered);
    } catch (first) {
      if (isReplyError(first) || closed) throw new StoreUnavailableError({ cause: first });
      try {
        await pipelineOnce(
          calls.filter((call) => !answered.has(call)),
          answered,
        );
      } catch {
        throw new StoreUnavailableError({ cause: first });
      }
    }
  };

  const batcher = createBatcher<Call, unknown>({
    maxBatchSize: MAX_BATCH,
    maxQueued: MAX_QUEUED,
    maxInFlight: MAX_IN_FLIGHT,
    runLoneAtOnce: true,
    run: sendBatch,
    batchError: (error) => (error instanceof StoreUnavailableError ? error : new StoreUnavailableError({ cause: error })),
  });

  const run = (s: Script, keys: string[], args: (string | number)[]): Promise<unknown> => {
    if (closed) return Promise.reject(new StoreUnavailableError({ cause: new Error('store is closed') }));
    return batcher.add((resolve, reject) => ({ script: s, keys, args, resolve, reject }));
  };

  return {
    client,
    keyPrefix: `${prefix}${encodeNamespace(namespace)}:`,
    namespace,
    run,
    close: () => {
      closed = true;
      batcher.failAll(() => new StoreUnavailableError({ cause: new Error('store is closed') }));
    },
    get closed() {
      return closed;
    },
  };
}

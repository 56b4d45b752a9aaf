import * as net from 'node:net';
import type { LossyStore } from './store.js';

/** How {@link ReplyLosingProxy.loseNextReply} loses the reply to the next request. */
export type LostReplyMode =
  /** The reply is held back until the client sends anything else (on any connection) after it came, then delivered. */
  | 'late'
  /** The reply and every later byte from the server are discarded until `restore()`. */
  | 'lost';

/** A TCP proxy in front of a database server that can lose the reply to one request, deterministically. */
export interface ReplyLosingProxy {
  /** Port on 127.0.0.1 to point the store at. */
  readonly port: number;
  /**
   * The next chunk the client sends (the write) is forwarded to the server, which runs it; its reply is
   * lost as `mode` says. Warm the store up first (connection open, schema ready) so that the next
   * chunk is the consume itself.
   */
  loseNextReply(mode: LostReplyMode): void;
  /** Forwards normally again. After `'lost'` every open connection is cut (its byte stream is broken), so clients reconnect. */
  restore(): void;
  /**
   * The next chunk the client sends is forwarded and runs; its reply (and any later one on that connection, in order)
   * is held for `ms`, then delivered: a slow link or a paused server, long enough for a client timeout.
   */
  stall(ms: number): void;
  /** Every byte either way is dropped from now on, new connections too (nothing reaches the server), until `heal()`. */
  blackhole(): void;
  /** Ends a black hole, stalls and a lost reply: stalled replies are delivered, and after a black hole (or `'lost'`) every open connection is cut. */
  heal(): void;
  /** Chunks the black hole has swallowed so far (client requests and server replies): a test can wait for its request to be gone. */
  readonly swallowed: number;
  /** Stops listening and cuts every connection. */
  close(): Promise<void>;
}

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  /** Replies held by a stall, delivered when its timer fires. */
  stalled?: Buffer[] | undefined;
}

/**
 * Starts a {@link ReplyLosingProxy} to `target` on a free port of 127.0.0.1. Works for any protocol
 * with one request and one reply per round trip on a connection (Redis, PostgreSQL): the lost reply is
 * decided by the order of events, never by time.
 */
export async function startReplyLosingProxy(target: { host: string; port: number }): Promise<ReplyLosingProxy> {
  const pairs = new Set<Pair>();
  let state:
    | { kind: 'normal' }
    | { kind: 'armed'; mode: LostReplyMode }
    | { kind: 'holding'; pair: Pair; held: Buffer[] }
    | { kind: 'dropping' } = { kind: 'normal' };
  let stallNext: number | undefined;
  let blackholed = false;
  let swallowed = 0;
  const stallTimers = new Map<Pair, NodeJS.Timeout>();
  const endStall = (pair: Pair): void => {
    clearTimeout(stallTimers.get(pair));
    stallTimers.delete(pair);
    const held = pair.stalled ?? [];
    pair.stalled = undefined;
    if (!pair.client.destroyed) for (const chunk of held) pair.client.write(chunk);
  };

  const flush = (): void => {
    if (state.kind !== 'holding') return;
    const { pair, held } = state;
    state = { kind: 'normal' };
    if (!pair.client.destroyed) for (const chunk of held) pair.client.write(chunk);
  };

  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    const pair: Pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (chunk: Buffer) => {
      if (blackholed) {
        swallowed++;
        return;
      }
      if (stallNext !== undefined && pair.stalled === undefined) {
        pair.stalled = [];
        stallTimers.set(
          pair,
          setTimeout(() => endStall(pair), stallNext),
        );
        stallNext = undefined;
      }
      if (state.kind === 'armed') {
        state = state.mode === 'late' ? { kind: 'holding', pair, held: [] } : { kind: 'dropping' };
      } else if (state.kind === 'holding' && state.held.length > 0) {
        // The client asks something else after the reply came (and was held): deliver it first, in
        // order. Chunks before any reply are the rest of the same request (a driver may write one
        // request in several pieces).
        flush();
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (blackholed) {
        swallowed++;
        return;
      }
      if (pair.stalled !== undefined) {
        pair.stalled.push(chunk);
        return;
      }
      if (state.kind === 'dropping') return;
      if (state.kind === 'holding' && state.pair === pair) {
        state.held.push(chunk);
        return;
      }
      client.write(chunk);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as net.AddressInfo).port;
  const cutAll = () => {
    for (const timer of stallTimers.values()) clearTimeout(timer);
    stallTimers.clear();
    for (const pair of pairs) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    pairs.clear();
  };
  return {
    port,
    loseNextReply(mode) {
      if (mode !== 'late' && mode !== 'lost') throw new TypeError('loseNextReply: mode must be "late" or "lost"');
      if (state.kind !== 'normal') throw new Error('loseNextReply: the previous lost reply has not been resolved (call restore())');
      state = { kind: 'armed', mode };
    },
    restore() {
      if (state.kind === 'dropping') {
        state = { kind: 'normal' };
        cutAll();
      } else if (state.kind === 'holding') {
        flush();
      } else {
        state = { kind: 'normal' };
      }
    },
    stall(ms) {
      if (!Number.isSafeInteger(ms) || ms < 0) throw new RangeError('stall: ms must be a safe integer of at least 0');
      stallNext = ms;
    },
    blackhole() {
      blackholed = true;
    },
    heal() {
      const cut = blackholed || state.kind === 'dropping';
      blackholed = false;
      stallNext = undefined;
      for (const pair of [...stallTimers.keys()]) endStall(pair);
      if (state.kind === 'holding') flush();
      state = { kind: 'normal' };
      if (cut) cutAll();
    },
    get swallowed() {
      return swallowed;
    },
    async close() {
      state = { kind: 'normal' };
      blackholed = false;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      cutAll();
      await closed;
    },
  };
}

/**
 * The `lostReply` wiring of {@link storeCompliance} for a store that talks to its backend over one TCP URL
 * (Redis, PostgreSQL, …): starts a {@link ReplyLosingProxy} in front of `url`'s server (`defaultPort` when the URL
 * names none), calls `open` with the same URL pointed at the proxy, and answers the {@link LossyStore} that closes
 * the store and then the proxy.
 *
 * ```ts
 * lostReply: ({ namespace }) =>
 *   lossyStoreThroughProxy(url, 6379, (proxied) => {
 *     const store = createRedisStore({ url: proxied, namespace, commandTimeoutMs: 1500 });
 *     return { store, close: () => store.close() };
 *   }),
 * ```
 */
export async function lossyStoreThroughProxy(
  url: string,
  defaultPort: number,
  open: (proxiedUrl: string) => { store: LossyStore['store']; close(): Promise<void> },
): Promise<LossyStore> {
  const target = new URL(url);
  const proxy = await startReplyLosingProxy({ host: target.hostname || '127.0.0.1', port: Number(target.port || defaultPort) });
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  let opened: ReturnType<typeof open>;
  try {
    opened = open(proxied.toString());
  } catch (error) {
    await proxy.close();
    throw error;
  }
  return {
    store: opened.store,
    loseNextReply: (mode) => proxy.loseNextReply(mode),
    restore: () => proxy.restore(),
    async close() {
      try {
        await opened.close();
      } finally {
        await proxy.close();
      }
    },
  };
}

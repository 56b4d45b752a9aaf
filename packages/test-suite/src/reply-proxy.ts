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

/** What the proxy is doing with the next reply: forwarding, armed to lose it, holding it (`'late'`), dropping (`'lost'`). */
type LossState =
  | { kind: 'normal' }
  | { kind: 'armed'; mode: LostReplyMode }
  | { kind: 'holding'; pair: Pair; held: Buffer[] }
  | { kind: 'dropping' };

/** The proxy's connections and what its controls set, shared by its relays and its controls. */
interface Relay {
  readonly pairs: Set<Pair>;
  state: LossState;
  stallNext: number | undefined;
  blackholed: boolean;
  swallowed: number;
  readonly stallTimers: Map<Pair, NodeJS.Timeout>;
}

/**
 * Starts a {@link ReplyLosingProxy} to `target` on a free port of 127.0.0.1. Works for any protocol
 * with one request and one reply per round trip on a connection (Redis, PostgreSQL): the lost reply is
 * decided by the order of events, never by time.
 */
export async function startReplyLosingProxy(target: { host: string; port: number }): Promise<ReplyLosingProxy> {
  const relay: Relay = {
    pairs: new Set(),
    state: { kind: 'normal' },
    stallNext: undefined,
    blackholed: false,
    swallowed: 0,
    stallTimers: new Map(),
  };
  const server = net.createServer((client) => connect(relay, client, target));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return controls(relay, server);
}

/** Delivers the replies a stall held on `pair`. */
function endStall(relay: Relay, pair: Pair): void {
  clearTimeout(relay.stallTimers.get(pair));
  relay.stallTimers.delete(pair);
  const held = pair.stalled ?? [];
  pair.stalled = undefined;
  if (!pair.client.destroyed) for (const chunk of held) pair.client.write(chunk);
}

/** Delivers a held (`'late'`) reply, and forwards normally again. */
function flush(relay: Relay): void {
  if (relay.state.kind !== 'holding') return;
  const { pair, held } = relay.state;
  relay.state = { kind: 'normal' };
  if (!pair.client.destroyed) for (const chunk of held) pair.client.write(chunk);
}

/** Cuts every connection (and ends every stall without delivering it). */
function cutAll(relay: Relay): void {
  for (const timer of relay.stallTimers.values()) clearTimeout(timer);
  relay.stallTimers.clear();
  for (const pair of relay.pairs) {
    pair.client.destroy();
    pair.upstream.destroy();
  }
  relay.pairs.clear();
}

/** Relays a new client connection to `target`, losing, holding, stalling or swallowing as the relay's state says. */
function connect(relay: Relay, client: net.Socket, target: { host: string; port: number }): void {
  const upstream = net.connect(target.port, target.host);
  const pair: Pair = { client, upstream };
  relay.pairs.add(pair);
  const drop = () => {
    client.destroy();
    upstream.destroy();
    relay.pairs.delete(pair);
  };
  client.on('error', drop).on('close', drop);
  upstream.on('error', drop).on('close', drop);
  client.on('data', (chunk: Buffer) => {
    if (relay.blackholed) {
      relay.swallowed++;
      return;
    }
    const stallNext = relay.stallNext;
    if (stallNext !== undefined && pair.stalled === undefined) {
      pair.stalled = [];
      relay.stallTimers.set(
        pair,
        setTimeout(() => endStall(relay, pair), stallNext),
      );
      relay.stallNext = undefined;
    }
    const state = relay.state;
    if (state.kind === 'armed') {
      relay.state = state.mode === 'late' ? { kind: 'holding', pair, held: [] } : { kind: 'dropping' };
    } else if (state.kind === 'holding' && state.held.length > 0) {
      // The client asks something else after the reply came (and was held): deliver it first, in
      // order. Chunks before any reply are the rest of the same request (a driver may write one
      // request in several pieces).
      flush(relay);
    }
    upstream.write(chunk);
  });
  upstream.on('data', (chunk: Buffer) => {
    if (relay.blackholed) {
      relay.swallowed++;
      return;
    }
    if (pair.stalled !== undefined) {
      pair.stalled.push(chunk);
      return;
    }
    const state = relay.state;
    if (state.kind === 'dropping') return;
    if (state.kind === 'holding' && state.pair === pair) {
      state.held.push(chunk);
      return;
    }
    client.write(chunk);
  });
}

/** The {@link ReplyLosingProxy} of a listening `server` and its relay. */
function controls(relay: Relay, server: net.Server): ReplyLosingProxy {
  return {
    port: (server.address() as net.AddressInfo).port,
    loseNextReply(mode) {
      if (mode !== 'late' && mode !== 'lost') throw new TypeError('loseNextReply: mode must be "late" or "lost"');
      if (relay.state.kind !== 'normal') throw new Error('loseNextReply: the previous lost reply has not been resolved (call restore())');
      relay.state = { kind: 'armed', mode };
    },
    restore() {
      if (relay.state.kind === 'dropping') {
        relay.state = { kind: 'normal' };
        cutAll(relay);
      } else if (relay.state.kind === 'holding') {
        flush(relay);
      } else {
        relay.state = { kind: 'normal' };
      }
    },
    stall(ms) {
      if (!Number.isSafeInteger(ms) || ms < 0) throw new RangeError('stall: ms must be a safe integer of at least 0');
      relay.stallNext = ms;
    },
    blackhole() {
      relay.blackholed = true;
    },
    heal() {
      const cut = relay.blackholed || relay.state.kind === 'dropping';
      relay.blackholed = false;
      relay.stallNext = undefined;
      for (const pair of [...relay.stallTimers.keys()]) endStall(relay, pair);
      if (relay.state.kind === 'holding') flush(relay);
      relay.state = { kind: 'normal' };
      if (cut) cutAll(relay);
    },
    get swallowed() {
      return relay.swallowed;
    },
    async close() {
      relay.state = { kind: 'normal' };
      relay.blackholed = false;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      cutAll(relay);
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

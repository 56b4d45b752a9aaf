// The reply-losing proxy's stall, black hole and heal, against a tiny echo server: no database needed.
import * as net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type ReplyLosingProxy, startReplyLosingProxy } from '../src/index.js';

/** A server that answers every chunk `x` with `ok:x`, and logs what it received. */
async function echoServer() {
  const received: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', (chunk) => {
      received.push(chunk.toString());
      socket.write(`ok:${chunk.toString()}`);
    });
    socket.on('error', () => {}).on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    received,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A client on the proxy that sends one chunk at a time and waits for its answer. */
async function client(port: number) {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return {
    ask: (text: string) =>
      new Promise<string>((resolve) => {
        socket.once('data', (chunk) => resolve(chunk.toString()));
        socket.write(text);
      }),
    send: (text: string) => socket.write(text),
    closed,
    destroy: () => socket.destroy(),
  };
}

const until = async (condition: () => boolean, what: string) => {
  for (let i = 0; i < 1000 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
  if (!condition()) throw new Error(`never: ${what}`);
};

describe('startReplyLosingProxy: stall, black hole, heal', () => {
  let proxy: ReplyLosingProxy | undefined;
  let echo: Awaited<ReturnType<typeof echoServer>> | undefined;
  afterEach(async () => {
    await proxy?.close();
    await echo?.close();
  });

  it('stall(ms) holds the next reply for ms after the server answered it, then delivers it; the next is not held', async () => {
    echo = await echoServer();
    proxy = await startReplyLosingProxy({ host: '127.0.0.1', port: echo.port });
    const c = await client(proxy.port);
    expect(await c.ask('a')).toBe('ok:a');
    proxy.stall(200);
    const started = performance.now();
    const reply = c.ask('b');
    await until(() => echo!.received.includes('b'), 'the server received b');
    expect(await reply).toBe('ok:b');
    expect(performance.now() - started).toBeGreaterThanOrEqual(195);
    expect(await c.ask('c')).toBe('ok:c');
    c.destroy();
  });

  it('blackhole() drops every request before the server; heal() cuts the connections and forwards again', async () => {
    echo = await echoServer();
    proxy = await startReplyLosingProxy({ host: '127.0.0.1', port: echo.port });
    const c = await client(proxy.port);
    expect(await c.ask('a')).toBe('ok:a');
    proxy.blackhole();
    c.send('lost');
    await until(() => proxy!.swallowed === 1, 'the black hole swallowed the request');
    const late = await client(proxy.port);
    late.send('also lost');
    await until(() => proxy!.swallowed === 2, 'a new connection is swallowed too');
    proxy.heal();
    await c.closed;
    await late.closed;
    expect(echo.received).toEqual(['a']);
    const after = await client(proxy.port);
    expect(await after.ask('d')).toBe('ok:d');
    after.destroy();
  });

  it('heal() delivers a stalled reply at once', async () => {
    echo = await echoServer();
    proxy = await startReplyLosingProxy({ host: '127.0.0.1', port: echo.port });
    const c = await client(proxy.port);
    proxy.stall(600_000);
    const reply = c.ask('slow');
    await until(() => echo!.received.includes('slow'), 'the server received it');
    proxy.heal();
    expect(await reply).toBe('ok:slow');
    c.destroy();
  });
});

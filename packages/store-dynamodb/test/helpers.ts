import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import dynalite from 'dynalite';
import { createTable } from '../src/index.js';

/** dynalite (pure JS, in memory) on 127.0.0.1, a random port: no service to skip for. */
export async function startDynalite(): Promise<{ endpoint: string; close(): Promise<void> }> {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  keepIdleConnections(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { endpoint: `http://127.0.0.1:${port}`, close: () => closeServer(server) };
}

/**
 * No idle timeout on the test servers' kept-alive connections. Node closes an idle one after 5 s; a request sent on it
 * at that moment is reset (ECONNRESET). A burst of parallel requests leaves as many connections idle at the same time,
 * so the next burst 5 s later on a loaded machine met tens of resets at once, more than the SDK's retry quota lets it
 * send again (a CI run failed so: "64 parallel claims", attempts 1). The resets were of the test's servers, not of the
 * store; `closeServer` still ends every connection.
 */
function keepIdleConnections(server: Server): void {
  server.keepAliveTimeout = 0;
}

const closeServer = (server: Server): Promise<void> => {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
};

export function dynamoClient(endpoint: string, maxAttempts = 3): DynamoDBClient {
  return new DynamoDBClient({
    endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts,
  });
}

let tables = 0;
/** A fresh table (dynalite has no TTL: `timeToLive: false`). */
export async function freshTable(endpoint: string): Promise<string> {
  const name = `mrtr-${process.pid}-${tables++}`;
  const client = dynamoClient(endpoint);
  await createTable(client, name, { timeToLive: false });
  client.destroy();
  return name;
}

/**
 * An HTTP proxy in front of DynamoDB that can lose replies: the request is forwarded and runs, then the client's
 * connection is cut instead of answered (`'late'`: this one request; `'lost'`: every request until `restore()`).
 */
export async function startLossyProxy(
  target: string,
  options: {
    /** The service's clock: each reply's `Date` header is rewritten to it (a DynamoDB whose clock the test sets). */
    serviceClock?: () => number;
  } = {},
): Promise<{
  endpoint: string;
  /** With `only`: the reply of the next request it matches (by its `X-Amz-Target` and body), all others answered. */
  loseNextReply(mode: 'late' | 'lost', only?: (target: string, body: string) => boolean): void;
  restore(): void;
  close(): Promise<void>;
}> {
  const upstream = new URL(target);
  let mode: 'normal' | 'late' | 'lost' = 'normal';
  let only: ((target: string, body: string) => boolean) | undefined;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    // A client that gives up (an SDK timeout or retry on a loaded machine) resets its socket: that is the client's
    // business, not a failure of the test (an 'error' without a listener would be thrown out of the test process).
    req.on('error', () => {});
    res.on('error', () => {});
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const forward = request(
        { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
        (answer) => {
          answer.on('error', () => req.socket.destroy());
          const body: Buffer[] = [];
          answer.on('data', (chunk: Buffer) => body.push(chunk));
          answer.on('end', () => {
            const sent = Buffer.concat(chunks).toString('utf8');
            const lose = mode !== 'normal' && (only === undefined || only(String(req.headers['x-amz-target'] ?? ''), sent));
            if (lose && mode === 'late') mode = 'normal';
            if (lose) {
              req.socket.destroy();
              return;
            }
            const headers = { ...answer.headers };
            if (options.serviceClock !== undefined) headers.date = new Date(options.serviceClock()).toUTCString();
            res.writeHead(answer.statusCode ?? 500, headers).end(Buffer.concat(body));
          });
        },
      );
      forward.on('error', () => req.socket.destroy());
      forward.end(Buffer.concat(chunks));
    });
  });
  keepIdleConnections(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    loseNextReply(next, match) {
      if (mode !== 'normal') throw new Error('loseNextReply: the previous lost reply is not resolved (call restore())');
      mode = next;
      only = match;
    },
    restore() {
      mode = 'normal';
      only = undefined;
    },
    close: () => closeServer(server),
  };
}

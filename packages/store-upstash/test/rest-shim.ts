import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis, ReplyError } from 'ioredis';

/**
 * A small stand-in for Upstash's REST API in front of a real Redis (Debian's redis-server in CI), enough for
 * `@upstash/redis`: `POST /` with a JSON command array, `POST /pipeline` (an array of them, each answered on its
 * own), `POST /multi-exec` (one transaction), a bearer token, `Upstash-Encoding: base64` answers. On 127.0.0.1,
 * a random port. It can lose a reply: the command runs on Redis, then the HTTP connection is cut instead of
 * answered, deterministically (by the order of requests, never by time).
 */
export interface RestShim {
  readonly url: string;
  readonly token: string;
  /** Requests answered so far (for tests that count round trips). */
  readonly requests: number;
  /** `'late'`: the next request runs and its reply is lost, later ones are answered. `'lost'`: every reply is lost until `restore()`. */
  loseNextReply(mode: 'late' | 'lost'): void;
  restore(): void;
  close(): Promise<void>;
}

type Reply = { result: unknown } | { error: string };

const encode = (value: unknown): unknown => {
  if (typeof value === 'string') return Buffer.from(value, 'utf8').toString('base64');
  if (Array.isArray(value)) return value.map(encode);
  return value;
};

export async function startRestShim(redisUrl: string): Promise<RestShim> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  const token = randomBytes(16).toString('hex');
  let mode: 'normal' | 'late' | 'lost' = 'normal';
  let requests = 0;

  const run = async (command: unknown): Promise<Reply> => {
    if (!Array.isArray(command) || command.length === 0 || !command.every((p) => ['string', 'number'].includes(typeof p))) {
      return { error: 'ERR malformed command' };
    }
    const [name, ...args] = command.map(String) as [string, ...string[]];
    try {
      return { result: await redis.call(name, ...args) };
    } catch (error) {
      if (error instanceof ReplyError) return { error: (error as Error).message };
      throw error;
    }
  };

  const answer = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'Unauthorized' }));
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'ERR body is not JSON' }));
      return;
    }
    const path = new URL(req.url ?? '/', 'http://shim').pathname;
    let status = 200;
    let reply: Reply | Reply[];
    if (path === '/pipeline' && Array.isArray(body)) {
      reply = [];
      for (const command of body) reply.push(await run(command));
    } else if (path === '/multi-exec' && Array.isArray(body)) {
      const multi = redis.multi();
      for (const command of body) {
        const [name, ...args] = (command as unknown[]).map(String) as [string, ...string[]];
        multi.call(name, ...args);
      }
      const results = (await multi.exec()) ?? [];
      reply = results.map(([error, result]) => (error ? { error: (error as Error).message } : { result }));
    } else if (path === '/' || path === '') {
      reply = await run(body);
      if ('error' in reply) status = 400;
    } else {
      res.writeHead(404).end();
      return;
    }
    // The command ran: now its answer may be lost (the connection is cut, as by a proxy or a network failure).
    const lose = mode !== 'normal';
    if (mode === 'late') mode = 'normal';
    if (lose) {
      req.socket.destroy();
      return;
    }
    requests++;
    const base64 = req.headers['upstash-encoding'] === 'base64';
    const out = base64
      ? Array.isArray(reply)
        ? reply.map((r) => ('result' in r ? { result: encode(r.result) } : r))
        : 'result' in reply
          ? { result: encode(reply.result) }
          : reply
      : reply;
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(out));
  };

  const server = createServer((req, res) => {
    answer(req, res).catch(() => req.socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    get requests() {
      return requests;
    },
    loseNextReply(next) {
      if (mode !== 'normal') throw new Error('loseNextReply: the previous lost reply is not resolved (call restore())');
      mode = next;
    },
    restore() {
      mode = 'normal';
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      redis.disconnect();
    },
  };
}

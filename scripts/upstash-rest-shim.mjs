// A small stand-in for Upstash's REST API in front of a real Redis, for tests, the publish check's quick starts and
// throwaway benchmarks (never for production): enough for `@upstash/redis`. `POST /` with a JSON command array,
// `POST /pipeline` (an array of them, each answered on its own), `POST /multi-exec` (one transaction, on a connection
// of its own), a bearer token, `Upstash-Encoding: base64` answers, on 127.0.0.1 at a random port. Plain Node (RESP2
// over node:net), no dependencies.
//
// It can lose a reply: the command runs on Redis, then the HTTP connection is cut instead of answered, decided by
// the order of requests, never by time (`loseNextReply('late')`: this one; `'lost'`: every one until `restore()`;
// `loseNextReply('late', '/pipeline')`: the next one on that path only).
//
//   node scripts/upstash-rest-shim.mjs [redis://127.0.0.1:6379]   prints UPSTASH_REDIS_REST_URL=… and …_TOKEN=…
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { pathToFileURL } from 'node:url';

class ReplyError extends Error {}

/** One RESP2 connection: commands are pipelined, replies come back in order. */
function respConnection(redisUrl) {
  const target = new URL(redisUrl);
  const socket = connect(Number(target.port || 6379), target.hostname || '127.0.0.1');
  socket.setNoDelay(true);
  const waiting = [];
  let buffer = Buffer.alloc(0);
  let failure;
  const failAll = (error) => {
    failure ??= error;
    for (const { reject } of waiting.splice(0)) reject(error);
  };
  socket.on('error', failAll);
  socket.on('close', () => failAll(new Error('Redis connection closed')));

  /** Parses one reply at `at`: [value, next offset], or undefined when incomplete. */
  const parse = (at) => {
    const end = buffer.indexOf('\r\n', at);
    if (end < 0) return undefined;
    const type = String.fromCharCode(buffer[at]);
    const line = buffer.toString('utf8', at + 1, end);
    const next = end + 2;
    if (type === '+') return [line, next];
    if (type === '-') return [new ReplyError(line), next];
    if (type === ':') return [Number(line), next];
    if (type === '$') {
      const length = Number(line);
      if (length < 0) return [null, next];
      if (buffer.length < next + length + 2) return undefined;
      return [buffer.toString('utf8', next, next + length), next + length + 2];
    }
    if (type === '*') {
      const count = Number(line);
      if (count < 0) return [null, next];
      const items = [];
      let offset = next;
      for (let i = 0; i < count; i++) {
        const item = parse(offset);
        if (item === undefined) return undefined;
        items.push(item[0]);
        offset = item[1];
      }
      return [items, offset];
    }
    throw new Error(`unexpected RESP type ${type}`);
  };
  socket.on('data', (chunk) => {
    buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
    let offset = 0;
    for (;;) {
      const reply = offset < buffer.length ? parse(offset) : undefined;
      if (reply === undefined) break;
      offset = reply[1];
      const { resolve } = waiting.shift();
      resolve(reply[0]);
    }
    buffer = buffer.subarray(offset);
  });

  return {
    /** Resolves the reply (a ReplyError value for an error reply); rejects when the connection fails. */
    send(args) {
      if (failure) return Promise.reject(failure);
      const parts = [`*${args.length}\r\n`];
      for (const arg of args) {
        const text = String(arg);
        parts.push(`$${Buffer.byteLength(text)}\r\n${text}\r\n`);
      }
      return new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        socket.write(parts.join(''));
      });
    },
    close() {
      socket.destroy();
    },
  };
}

const encode = (value) => {
  if (typeof value === 'string') return Buffer.from(value, 'utf8').toString('base64');
  if (Array.isArray(value)) return value.map(encode);
  return value;
};
const answerOf = (value) => (value instanceof ReplyError ? { error: value.message } : { result: value });
const isCommand = (command) =>
  Array.isArray(command) && command.length > 0 && command.every((part) => typeof part === 'string' || typeof part === 'number');

/** Starts the shim in front of `redisUrl`; see the top of this file. */
export async function startUpstashRestShim(redisUrl = 'redis://127.0.0.1:6379') {
  const redis = respConnection(redisUrl);
  const token = randomBytes(16).toString('hex');
  let mode = 'normal';
  let lossPath; // only requests on this path lose their reply (undefined: every path)
  let requests = 0;
  let lost = 0;

  const answer = async (req, res) => {
    if (req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'Unauthorized' }));
      return;
    }
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'ERR body is not JSON' }));
      return;
    }
    const path = new URL(req.url ?? '/', 'http://shim').pathname;
    let status = 200;
    let reply;
    if (path === '/pipeline' && Array.isArray(body) && body.every(isCommand)) {
      reply = (await Promise.all(body.map((command) => redis.send(command)))).map(answerOf);
    } else if (path === '/multi-exec' && Array.isArray(body) && body.every(isCommand)) {
      const own = respConnection(redisUrl); // MULTI on a connection no other request shares
      try {
        await own.send(['MULTI']);
        for (const command of body) await own.send(command);
        const results = await own.send(['EXEC']);
        reply = results instanceof ReplyError ? [{ error: results.message }] : results.map(answerOf);
      } finally {
        own.close();
      }
    } else if ((path === '/' || path === '') && isCommand(body)) {
      reply = answerOf(await redis.send(body));
      if ('error' in reply) status = 400;
    } else {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'ERR unsupported request' }));
      return;
    }
    // The command ran: now its answer may be lost (the connection is cut, as by a proxy or a network failure).
    const lose = mode !== 'normal' && (lossPath === undefined || lossPath === path);
    if (lose && mode === 'late') mode = 'normal';
    if (lose) {
      lost++;
      req.socket.destroy();
      return;
    }
    requests++;
    const base64 = req.headers['upstash-encoding'] === 'base64';
    const out = !base64
      ? reply
      : Array.isArray(reply)
        ? reply.map((r) => ('result' in r ? { result: encode(r.result) } : r))
        : 'result' in reply
          ? { result: encode(reply.result) }
          : reply;
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(out));
  };

  const server = createServer((req, res) => {
    answer(req, res).catch(() => req.socket.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    get requests() {
      return requests;
    },
    get lostReplies() {
      return lost;
    },
    loseNextReply(next, path) {
      if (next !== 'late' && next !== 'lost') throw new TypeError('loseNextReply: mode must be "late" or "lost"');
      if (path !== undefined && path !== '/' && path !== '/pipeline' && path !== '/multi-exec') {
        throw new TypeError('loseNextReply: path must be "/", "/pipeline" or "/multi-exec"');
      }
      if (mode !== 'normal') throw new Error('loseNextReply: the previous lost reply is not resolved (call restore())');
      mode = next;
      lossPath = path;
    },
    restore() {
      mode = 'normal';
      lossPath = undefined;
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(() => resolve()));
      redis.close();
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const shim = await startUpstashRestShim(process.argv[2] ?? process.env.REDIS_URL);
  console.log(`UPSTASH_REDIS_REST_URL=${shim.url}\nUPSTASH_REDIS_REST_TOKEN=${shim.token}`);
}

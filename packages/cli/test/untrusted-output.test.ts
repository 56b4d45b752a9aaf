import { createServer, type Server } from 'node:net';
import { base64urlEncode } from '@mrtr/core/encoding';
import { afterAll, describe, expect, it } from 'vitest';
import { DATABASE_URL, gateService, KEYS, mint, runCli, T0 } from './helpers.js';

gateService('untrusted-output.test.ts', 'DATABASE_URL');

// Review finding (issue 19, item 4): the CLI printed attacker text raw — the unverified claims and the JWE
// protected header in `mrtr inspect`, the Redis/PostgreSQL error text in `mrtr doctor` — so escape sequences
// could erase a line and draw a fake "ACCEPTED" on the operator's terminal, and bidi controls reorder what is shown.

/** Erase the line, back to column 1, a fake verdict; bidi controls, a C1 CSI, DEL and U+2028. */
const EVIL_LINE = '\u001b[2K\u001b[1G ACCEPTED\u202e\u2066\u200f\u061c\u009b31m\u007f\u2028';
/** ... and a newline that starts a fake row. */
const EVIL = `${EVIL_LINE}\nverdict    ACCEPTED forged`;
const ESCAPED_LINE = '\\u001b[2K\\u001b[1G ACCEPTED\\u202e\\u2066\\u200f\\u061c\\u009b31m\\u007f\\u2028';
const ESCAPED = `${ESCAPED_LINE}\\u000averdict    ACCEPTED forged`;
/** Any control or bidi character but the newline that ends a line of output. */
const UNSAFE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
/** The same, for output coloured on purpose (FORCE_COLOR): the CLI's own SGR colour sequences removed first. */
const withoutColour = (text: string) => text.replace(/\u001b\[\d+m/g, '');

function expectSafe(text: string): void {
  expect(text).not.toMatch(UNSAFE);
  expect(text).not.toMatch(/^verdict +ACCEPTED forged/m);
}

const b64json = (value: unknown) => base64urlEncode(new TextEncoder().encode(JSON.stringify(value)));

/** An HMAC-codec token whose (unverified) body says what an attacker likes; the MAC is junk. */
function forgedHmac(): string {
  const claims = {
    v: 1,
    iat: T0,
    exp: T0 + 600_000,
    jti: `${'j'.repeat(22)}${EVIL}`,
    aud: EVIL,
    sub: `tag${EVIL_LINE}`,
    req: { m: `tools/call${EVIL_LINE}`, t: EVIL, d: `digest${EVIL_LINE}` },
    flow: { id: EVIL, round: 1, deadline: T0 + 1_800_000 },
    data: { note: EVIL },
  };
  return `m1.k2.${b64json(claims)}.${'A'.repeat(43)}`;
}

/** A five-part compact JWE with the given protected header (the rest is junk). */
const jweWithHeader = (header: Record<string, unknown>) => `${b64json(header)}..${'A'.repeat(16)}.${'A'.repeat(40)}.${'A'.repeat(22)}`;

describe('mrtr inspect never prints token text raw (issue 19 item 4)', () => {
  it('unverified HMAC claims: every control and bidi character escaped, in the text and the JSON output', async () => {
    const token = forgedHmac();
    for (const env of [{}, { FORCE_COLOR: '1' }]) {
      const r = await runCli(['inspect', token, '--data', '--now', new Date(T0).toISOString()], { env });
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('NOT VERIFIED');
      expectSafe(withoutColour(r.stdout));
      expect(withoutColour(r.stdout)).toContain(`audience   ${ESCAPED}`);
      expect(withoutColour(r.stdout)).toContain(`request    tools/call${ESCAPED_LINE} ${ESCAPED}`);
      expect(withoutColour(r.stdout)).toContain(`flow       id ${ESCAPED}, round 1`);
    }
    const j = await runCli(['inspect', token, '--data', '--json']);
    expect(j.code).toBe(0);
    // JSON escapes C0 controls only: C1, DEL, U+2028 and the bidi controls are \u escapes too (the same JSON value).
    expect(j.stdout).not.toMatch(UNSAFE);
    const parsed = JSON.parse(j.stdout);
    expect(parsed.claims).toMatchObject({ aud: EVIL, req: { t: EVIL }, flow: { id: EVIL }, data: { note: EVIL } });
  });

  it('a JWE kid that is not a short printable token is reported malformed, never echoed; alg/enc likewise', async () => {
    const cases = [
      { alg: 'dir', enc: 'A256GCM', kid: EVIL },
      { alg: 'dir', enc: 'A256GCM', kid: 'k'.repeat(65) },
      { alg: 'dir', enc: 'A256GCM', kid: ['k2', EVIL] },
      { alg: [EVIL], enc: EVIL, kid: 'k2' },
    ];
    for (const header of cases) {
      const token = jweWithHeader(header);
      for (const env of [{}, { MRTR_KEYS: KEYS }]) {
        const r = await runCli(['inspect', token], { env });
        expect(r.code).toBe(1);
        expectSafe(r.stdout);
        expect(r.stdout).not.toContain('ACCEPTED');
        expect(r.stdout).not.toContain('k'.repeat(65));
        expect(r.stdout).toMatch(/malformed/);
        const j = await runCli(['inspect', token, '--json'], { env });
        expect(j.stdout).not.toMatch(UNSAFE);
        expect(j.stdout).not.toContain('ACCEPTED');
        expect(JSON.parse(j.stdout).token.kid).toBe(header.kid === 'k2' ? 'k2' : null);
      }
    }
    const ok = await runCli(['inspect', jweWithHeader({ alg: 'dir', enc: 'A256GCM', kid: 'k2' })]);
    expect(ok.stdout).toContain('token      jwe codec, format JWE compact (alg dir, enc A256GCM), kid "k2"');
  });

  it('verified claims and the refusal reason (a hostile tool name bound into a real state) are escaped', async () => {
    const token = await mint('aead', { request: { target: EVIL } });
    for (const env of [{ MRTR_KEYS: KEYS }, { MRTR_KEYS: KEYS, FORCE_COLOR: '1' }]) {
      const r = await runCli(['inspect', token, '--principal', 'alice', '--target', 'delete_files', '--now', new Date(T0).toISOString()], {
        env,
      });
      expect(r.code).toBe(1);
      expectSafe(withoutColour(r.stdout));
      expect(withoutColour(r.stdout)).toContain(
        `REFUSED ERR_STATE_BINDING: minted for another request: target "${ESCAPED}" in the token, "delete_files" in the request`,
      );
    }
    const j = await runCli(['inspect', token, '--json', '--now', new Date(T0).toISOString()], { env: { MRTR_KEYS: KEYS } });
    expect(j.stdout).not.toMatch(UNSAFE);
    expect(JSON.parse(j.stdout).claims.req.t).toBe(EVIL);
  });

  it('options echoed back (--principal) and usage errors quoting the environment are escaped', async () => {
    const token = await mint('hmac');
    const r = await runCli(['inspect', token, '--principal', EVIL, '--now', new Date(T0).toISOString()], { env: { MRTR_KEYS: KEYS } });
    expect(r.code).toBe(1);
    expectSafe(r.stdout);
    expect(r.stdout).toContain(`principal  differs: the tag is not "${ESCAPED}"'s for this audience`);
    const usage = await runCli(['doctor'], { env: { MRTR_KEYS: KEYS, MRTR_STORE: EVIL } });
    expect(usage.code).toBe(2);
    expectSafe(usage.stderr);
    expect(usage.stderr).toContain(`unknown store "${ESCAPED}"`);
  });
});

// ── doctor: a fake Redis whose replies carry the attack ──

const bulk = (s: string) => `$${Buffer.byteLength(s)}\r\n${s}\r\n`;

/** One RESP command (an array of bulk strings) from the front of `buffer`, or undefined while incomplete. */
function parseCommand(buffer: Buffer): { args: string[]; used: number } | undefined {
  if (buffer.length === 0 || buffer[0] !== 0x2a) return undefined;
  const end = buffer.indexOf('\r\n');
  if (end < 0) return undefined;
  const n = Number(buffer.subarray(1, end).toString());
  let at = end + 2;
  const args: string[] = [];
  for (let k = 0; k < n; k++) {
    const e = buffer.indexOf('\r\n', at);
    if (e < 0) return undefined;
    const len = Number(buffer.subarray(at + 1, e).toString());
    if (buffer.length < e + 2 + len + 2) return undefined;
    args.push(buffer.subarray(e + 2, e + 2 + len).toString());
    at = e + 2 + len + 2;
  }
  return { args, used: at };
}

/**
 * The replay store's consume script (`EVALSHA sha numkeys <ledger>%e id… ARGV`): per id 1 the first time, 0 after
 * (single use holds), then the ledger epoch. `undefined` for any other script.
 */
function consumeReply(args: string[], seen: Set<string>): string | undefined {
  const keys = args.slice(2, 2 + Number(args[1]));
  if (keys.length < 2 || !keys[0]!.endsWith('%e')) return undefined;
  const replies = keys.slice(1).map((key) => {
    const first = !seen.has(key);
    seen.add(key);
    return first ? ':1\r\n' : ':0\r\n';
  });
  return `*${keys.length}\r\n${replies.join('')}${bulk('0')}`;
}

/**
 * Speaks enough RESP for the doctor: the consume script (and SET NX) accepts then refuses (single use holds), CONFIG
 * GET answers a hostile maxmemory-policy, TIME and every other EVALSHA (the task store's first script) a hostile error.
 */
function fakeRedis(): Promise<{ url: string; server: Server }> {
  const server = createServer((socket) => {
    let buffer = Buffer.alloc(0);
    const seen = new Set<string>();
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (let c = parseCommand(buffer); c !== undefined; c = parseCommand(buffer)) {
        buffer = buffer.subarray(c.used);
        const [name = '', ...args] = c.args;
        switch (name.toUpperCase()) {
          case 'HELLO':
            socket.write(`%2\r\n${bulk('server')}${bulk('redis')}${bulk('proto')}:3\r\n`);
            break;
          case 'INFO':
            socket.write(bulk('# Server\r\nredis_version:7.2.4\r\nloading:0\r\n'));
            break;
          case 'SET':
            socket.write(seen.has(args[0]!) ? '_\r\n' : '+OK\r\n');
            seen.add(args[0]!);
            break;
          case 'DEL':
            socket.write(':1\r\n');
            break;
          case 'CONFIG':
            socket.write(`*2\r\n${bulk('maxmemory-policy')}${bulk(EVIL)}`);
            break;
          case 'EVALSHA':
            socket.write(consumeReply(args, seen) ?? `-ERR ${EVIL_LINE}\r\n`);
            break;
          case 'TIME':
            socket.write(`-ERR ${EVIL_LINE}\r\n`);
            break;
          default:
            socket.write('+OK\r\n');
        }
      }
    });
    socket.on('error', () => {});
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ url: `redis://127.0.0.1:${(server.address() as { port: number }).port}`, server })),
  );
}

describe('mrtr doctor never prints store text raw (issue 19 item 4)', () => {
  const servers: Server[] = [];
  afterAll(() => {
    for (const s of servers) s.close();
  });

  it('a Redis reply and a Redis error carrying escape sequences are shown escaped, in the text and the JSON output', async () => {
    const { url, server } = await fakeRedis();
    servers.push(server);
    for (const env of [{}, { FORCE_COLOR: '1' }]) {
      const r = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac'], { env: { MRTR_KEYS: KEYS, REDIS_URL: url, ...env } });
      const out = withoutColour(r.stdout);
      expect(out).toMatch(/^ok {4}redis +consume of a throwaway id: first accepted, replay refused/m);
      expectSafe(out);
      expect(out).toContain(`redis policy   maxmemory-policy ${ESCAPED}: under memory pressure`);
      expect(out).toContain(`redis clock    cannot read TIME: ERR ${ESCAPED_LINE}`);
      // Its INFO persistence names neither AOF nor RDB, and its CONFIG GET save answers no save: it cannot tell.
      expect(out).toMatch(/^warn {2}redis persistence AOF unknown, RDB snapshots unknown \(INFO persistence does not say/m);
      expect(out).toMatch(/^fail {2}redis tasks +probe task: create failed: ERR_STORE_UNAVAILABLE .*: ERR /m);
      expect(out).toContain(`: ERR ${ESCAPED_LINE} at redis://127.0.0.1:`);
    }
    const j = await runCli(['doctor', '--store', 'redis', '--codec', 'hmac', '--json'], { env: { MRTR_KEYS: KEYS, REDIS_URL: url } });
    expect(j.stdout).not.toMatch(UNSAFE);
    const checks = JSON.parse(j.stdout).checks as { name: string; detail: string }[];
    expect(checks.find((c) => c.name === 'redis policy')?.detail).toContain(`maxmemory-policy ${EVIL}:`);
    expect(checks.find((c) => c.name === 'redis tasks')?.detail).toContain(`: ERR ${EVIL_LINE} at redis://`);
  });

  it.skipIf(DATABASE_URL === undefined)('a PostgreSQL error quoting a hostile database name is shown escaped', async () => {
    const u = new URL(DATABASE_URL!);
    u.pathname = `/${encodeURIComponent(EVIL)}`;
    const r = await runCli(['doctor', '--store', 'postgres', '--codec', 'hmac', '--timeout-ms', '3000'], {
      env: { MRTR_KEYS: KEYS, DATABASE_URL: u.toString() },
    });
    expect(r.code).toBe(1);
    expectSafe(r.stdout);
    expect(r.stdout).toMatch(/^fail {2}postgres +\S+: /m);
    // PostgreSQL cuts a database name to 63 bytes (NAMEDATALEN - 1) before quoting it; EVIL is 64, so its last "d" goes.
    expect(Buffer.byteLength(EVIL)).toBe(64);
    expect(r.stdout).toContain(`database "${ESCAPED.slice(0, -1)}" does not exist`);
    expect(r.stdout).not.toMatch(/^verdict /m);
  });
});

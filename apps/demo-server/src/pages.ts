import type { IncomingMessage, ServerResponse } from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { type TokenTable, tokenDigest } from './config.js';
import type { ConnectLedger } from './ledger.js';

/** The connect pages: where the URL of connect_account's URL-mode elicitation leads. */
export interface PageOptions {
  ledger: ConnectLedger;
  /** With tokens, the visitor proves to be the principal who started the flow by entering their token. */
  tokens: TokenTable | undefined;
}

export const NONCE_PATTERN = /^[A-Za-z0-9_-]{22}$/;
const MAX_FORM_BYTES = 16 * 1024;

const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
  'x-content-type-options': 'nosniff',
};

const escapeHtml = (value: string): string =>
  value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function page(res: ServerResponse, status: number, title: string, body: string): void {
  res.writeHead(status, PAGE_HEADERS);
  res.end(
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>` +
      '<style>body{font:16px system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem}button{font-size:1rem;margin-right:.5rem}</style>' +
      `</head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`,
  );
}

async function readForm(req: IncomingMessage): Promise<URLSearchParams | undefined> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_FORM_BYTES) return undefined;
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function samePrincipal(a: string, b: string): boolean {
  const x = Buffer.from(a, 'utf8');
  const y = Buffer.from(b, 'utf8');
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Serves `GET|POST /connect/<nonce>`. Host and Origin have been checked by the caller. */
export async function serveConnectPage(req: IncomingMessage, res: ServerResponse, nonce: string, options: PageOptions): Promise<void> {
  if (req.method !== 'GET' && req.method !== 'POST') {
    res.writeHead(405, { allow: 'GET, POST', ...PAGE_HEADERS });
    res.end();
    return;
  }
  const link = NONCE_PATTERN.test(nonce) ? await options.ledger.get(nonce) : undefined;
  if (link === undefined) {
    page(res, 404, 'Link not found', '<p>This connect link is unknown or has expired. Start again from your MCP client.</p>');
    return;
  }
  if (link.status !== 'pending') {
    page(
      res,
      410,
      'Link already used',
      `<p>This link was already ${link.status === 'done' ? 'completed' : 'refused'}. Return to your MCP client.</p>`,
    );
    return;
  }
  const provider = escapeHtml(link.provider);
  if (req.method === 'GET') {
    const tokenField =
      options.tokens === undefined
        ? '<p><small>This demo runs without authentication: whoever has this link can complete it.</small></p>'
        : '<p><label>Your demo token (proves you are the user who asked) <input type="password" name="token" required autocomplete="off"></label></p>';
    page(
      res,
      200,
      `Connect ${link.provider}`,
      `<p>The mrtr demo asks to connect your <strong>${provider}</strong> account (simulated: nothing leaves this server).</p>` +
        `<form method="post">${tokenField}<button name="decision" value="connect">Connect ${provider}</button>` +
        '<button name="decision" value="deny">Refuse</button></form>',
    );
    return;
  }
  const form = await readForm(req);
  const decision = form?.get('decision');
  if (form === undefined || (decision !== 'connect' && decision !== 'deny')) {
    page(res, 400, 'Bad request', '<p>Submit the form on this page.</p>');
    return;
  }
  if (options.tokens !== undefined) {
    const token = form.get('token') ?? '';
    const principal = token === '' ? undefined : options.tokens.get(tokenDigest(token));
    if (principal === undefined || !samePrincipal(principal, link.principal)) {
      page(res, 403, 'Not your link', '<p>The token does not belong to the user who started this connection.</p>');
      return;
    }
  }
  const settled = await options.ledger.settle(nonce, decision === 'connect' ? 'done' : 'denied');
  if (!settled) {
    page(res, 410, 'Link already used', '<p>This link was completed, refused or expired meanwhile. Return to your MCP client.</p>');
    return;
  }
  page(
    res,
    200,
    decision === 'connect' ? `${link.provider} connected` : 'Connection refused',
    '<p>You can close this page and return to your MCP client.</p>',
  );
}

import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import type { PlaygroundConfig } from './flows.js';

/** The files of the page, read once at start from the built `dist/public/` (the page has no build step of its own). */
export interface PlaygroundAssets {
  files: ReadonlyMap<string, { body: Buffer; type: string }>;
  config: PlaygroundConfig;
}

const FILES: Record<string, [string, string]> = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/playground.js': ['playground.js', 'text/javascript; charset=utf-8'],
  '/playground.css': ['playground.css', 'text/css; charset=utf-8'],
};

/** Strict: scripts and styles only from this origin (no inline script or style), fetches only to this origin. */
export const PLAYGROUND_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** Reads the page's files from `dir`; `undefined` when they were not built (the server runs without the page). */
export function loadPlayground(dir: string, config: PlaygroundConfig): PlaygroundAssets | undefined {
  const files = new Map<string, { body: Buffer; type: string }>();
  try {
    for (const [path, [name, type]] of Object.entries(FILES)) files.set(path, { body: readFileSync(join(dir, name)), type });
  } catch {
    return undefined;
  }
  return { files, config };
}

export function isPlaygroundPath(pathname: string): boolean {
  return pathname in FILES || pathname === '/playground.json' || pathname === '/favicon.ico';
}

/** Serves GET/HEAD of the page's files and its config. */
export function servePlayground(req: IncomingMessage, res: ServerResponse, pathname: string, assets: PlaygroundAssets): void {
  const common = {
    'cache-control': 'no-store',
    'content-security-policy': PLAYGROUND_CSP,
    'x-frame-options': 'DENY',
    'referrer-policy': 'same-origin',
  };
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', ...common });
    res.end();
    return;
  }
  if (pathname === '/favicon.ico') {
    res.writeHead(204, common);
    res.end();
    return;
  }
  const file =
    pathname === '/playground.json'
      ? { body: Buffer.from(JSON.stringify(assets.config)), type: 'application/json' }
      : assets.files.get(pathname)!;
  res.writeHead(200, { 'content-type': file.type, 'content-length': file.body.length, ...common });
  res.end(req.method === 'HEAD' ? undefined : file.body);
}

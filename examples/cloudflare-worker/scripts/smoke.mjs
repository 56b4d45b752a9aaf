#!/usr/bin/env node
// `pnpm smoke`: starts `scripts/dev.mjs` (wrangler dev) on a free port with its Durable Object state in a fresh
// temporary directory, drives the Worker with the official MCP client (a confirmation round, an identical retry, a
// replay), then stops wrangler and workerd and removes the directory.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as mcp from '@modelcontextprotocol/client';
import { smoke } from '../../../scripts/example-harness.mjs';

const state = mkdtempSync(join(tmpdir(), 'mrtr-wrangler-'));
process.on('exit', () => rmSync(state, { recursive: true, force: true }));

await smoke({
  name: 'cloudflare-worker',
  mcp,
  devScript: fileURLToPath(new URL('./dev.mjs', import.meta.url)),
  devArgs: ['--persist-to', state],
  tool: 'delete_files',
  args: { path: '/srv/smoke' },
  yes: { ok: true },
  no: { ok: false },
  deadlineMs: 180_000,
});

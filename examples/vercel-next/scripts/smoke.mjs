#!/usr/bin/env node
// `pnpm smoke`: starts `scripts/dev.mjs` (next dev, the Upstash REST shim in front of the local Redis) on a free
// port, drives the route with the official MCP client (a confirmation round, an identical retry, a replay), then
// stops Next.js and the shim.
import { fileURLToPath } from 'node:url';
import * as mcp from '@modelcontextprotocol/client';
import { smoke } from '../../../scripts/example-harness.mjs';

await smoke({
  name: 'vercel-next',
  mcp,
  devScript: fileURLToPath(new URL('./dev.mjs', import.meta.url)),
  tool: 'empty_trash',
  yes: { ok: true },
  no: { ok: false },
  deadlineMs: 180_000,
});

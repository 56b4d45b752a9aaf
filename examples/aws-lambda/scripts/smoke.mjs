#!/usr/bin/env node
// `pnpm smoke`: starts `scripts/dev.mjs` on a free port (dynalite, the bundled handler, the HTTP API stand-in), drives
// it with the official MCP client (a confirmation round, an identical retry, a replay), then stops it.
import { fileURLToPath } from 'node:url';
import * as mcp from '@modelcontextprotocol/client';
import { smoke } from '../../../scripts/example-harness.mjs';

await smoke({
  name: 'aws-lambda',
  mcp,
  devScript: fileURLToPath(new URL('./dev.mjs', import.meta.url)),
  tool: 'delete_report',
  yes: { ok: true },
  no: { ok: false },
  deadlineMs: 90_000,
});

// Next.js settings for the example. In this repository the workspace packages (@mrtr/*) are links to ../../packages,
// outside this directory: Turbopack's root is the workspace root then, so it follows them (copied out of the
// repository, by scripts/eject-example.mjs, this directory is its own root).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const workspace = join(here, '..', '..');
const root = existsSync(join(workspace, 'pnpm-workspace.yaml')) ? workspace : here;

/** @type {import('next').NextConfig} */
export default {
  turbopack: { root },
  outputFileTracingRoot: root,
  // Next.js 16 writes an AGENTS.md into the project on `next dev` unless told not to.
  agentRules: false,
  experimental: { agentUpgrade: false },
};

import type { McpServer } from '@modelcontextprotocol/server';
import type { Mrtr } from '@mrtr/mcp-server';
import { registerClientInputTools } from './client-input.js';
import { registerPromptAndResource } from './prompt-resource.js';
import { registerRollout } from './rollout.js';
import { registerWriteTools } from './writes.js';

import type { DemoDeps } from './shared.js';

export { DEMO_EFFECTS, type DemoDeps, type DemoEffect, samplingText, taskSleep } from './shared.js';

/** The names the demo protects (see {@link demoTargets}). */
export interface DemoTargets {
  tools: string[];
  prompts: string[];
  /** Whether a protected resource (template) is registered. */
  resources: boolean;
}

/**
 * The tools, prompts and resources {@link registerDemo} protects, found by a dry run against an adapter that only
 * records the names (no handler runs, nothing is served): the metrics start at 0 for them.
 */
export function demoTargets(): DemoTargets {
  const found: DemoTargets = { tools: [], prompts: [], resources: false };
  const recorder = {
    registerTool: (_server: McpServer, name: string) => void found.tools.push(name),
    registerPrompt: (_server: McpServer, name: string) => void found.prompts.push(name),
    registerResource: () => void (found.resources = true),
  } as unknown as Mrtr;
  // Handlers alone use the other dependencies, and none runs.
  registerDemo(undefined as unknown as McpServer, { ...({} as DemoDeps), mrtr: recorder });
  return found;
}

/** Registers the realistic tools, the prompt and the resource template. */
export function registerDemo(server: McpServer, deps: DemoDeps): void {
  registerWriteTools(server, deps);
  registerRollout(server, deps);
  registerClientInputTools(server, deps);
  registerPromptAndResource(server, deps);
}

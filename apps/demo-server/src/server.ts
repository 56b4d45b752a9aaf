import { McpServer, type McpServerFactory, type ServerCapabilities, type ServerNotifier } from '@modelcontextprotocol/server';
import type { Mrtr } from '@mrtr/mcp-server';
import { registerConformanceFixtures } from './fixtures/index.js';
import { type DemoDeps, registerDemo } from './tools/index.js';

export const SERVER_INFO = { name: 'mrtr-demo', version: '0.1.0' } as const;

export interface FactoryOptions extends DemoDeps {
  mrtr: Mrtr;
  fixtures: boolean;
  notifier(): ServerNotifier | undefined;
}

/** One fresh `McpServer` per HTTP request (or per stdio connection), all sharing one adapter instance. */
export function createServerFactory(options: FactoryOptions): McpServerFactory {
  const capabilities: ServerCapabilities = options.fixtures
    ? { tools: { listChanged: true }, prompts: { listChanged: true }, resources: {}, completions: {}, logging: {} }
    : { tools: {}, prompts: {}, resources: {} };
  return () => {
    const server = new McpServer(SERVER_INFO, {
      ...options.mrtr.serverOptions,
      capabilities,
      instructions:
        'mrtr demo: tools that ask for input mid-request (MCP 2026-07-28 MRTR). Every requestState is sealed, ' +
        'bound to the caller, the tool and its arguments, and single-use.',
    });
    registerDemo(server, options);
    if (options.fixtures) registerConformanceFixtures(server, { mrtr: options.mrtr, notifier: options.notifier });
    return server;
  };
}

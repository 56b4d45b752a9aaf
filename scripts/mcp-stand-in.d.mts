/** A small MCP 2026-07-28 server for @mrtr/client's quick start: see the .mjs file. */
export interface McpStandIn {
  readonly url: string;
  /** Requests answered so far (`server/discover` included). */
  readonly requests: number;
  close(): Promise<void>;
}
export function startMcpStandIn(): Promise<McpStandIn>;

/**
 * @mrtr/mcp-server: protected MRTR (SEP-2322) for the official MCP TypeScript SDK (`@modelcontextprotocol/server`
 * ≥ 2.4). Sealed, principal- and request-bound, single-use `requestState` with flow integrity, answers that
 * accumulate across rounds, capability-aware questions and opaque wire errors.
 *
 * ```ts
 * const mrtr = createMrtr({ codec, keys, store, audience: 'https://files.example' });
 * const server = new McpServer(info, { ...mrtr.serverOptions });
 * server.registerTool('delete_files', config, mrtr.tool('delete_files', async (args, ctx, need) => {
 *   const answer = need.elicit('confirm', { message, requestedSchema });
 *   if (!answer) return need.ask();
 *   if (answer.action !== 'accept') return need.fail('Cancelled by the user');
 *   ...
 * }));
 * ```
 */
export { createMrtr, INVALID_STATE_MESSAGE } from './mrtr.js';
export type {
  AskOptions,
  BooleanField,
  ElicitAnswer,
  ElicitFormQuestion,
  ElicitUrlQuestion,
  FieldValue,
  FormContent,
  FormField,
  FormSchema,
  MissingCapabilityPolicy,
  Mrtr,
  MrtrOptions,
  MrtrPromptHandler,
  MrtrResourceHandler,
  MrtrServerOptions,
  MrtrToolHandler,
  MultiSelectField,
  Need,
  NumberField,
  ProtectedPromptCallback,
  ProtectedResourceCallback,
  ProtectedToolCallback,
  RejectEvent,
  StringField,
  ToolNeed,
  UrlAnswer,
} from './types.js';

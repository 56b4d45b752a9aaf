/**
 * @mrtr/mcp-server: protected MRTR (SEP-2322) for the official MCP TypeScript SDK (`@modelcontextprotocol/server`
 * 2.4). Sealed, principal- and request-bound, single-use `requestState` with flow integrity, answers that
 * accumulate across rounds, capability-aware questions and opaque wire errors.
 *
 * ```ts
 * const mrtr = createMrtr({ keys, codec: createHmacCodec, store, audience: 'https://files.example' });
 * const server = new McpServer(info, { ...mrtr.serverOptions });
 * mrtr.registerTool(server, 'delete_files', config, async (args, ctx, need) => {
 *   const answer = need.elicit('confirm', { message, requestedSchema });
 *   if (!answer) return need.ask();
 *   if (answer.action !== 'accept') return need.fail('Cancelled by the user');
 *   ...
 * });
 * ```
 */
export type {
  BooleanField,
  FieldValue,
  FormContent,
  FormField,
  FormSchema,
  MultiSelectField,
  NumberField,
  StringField,
} from './answers.js';
export { createMrtr } from './mrtr.js';
export type {
  AnswerEvent,
  FlowCompletedEvent,
  MissingCapabilityPolicy,
  MrtrEvent,
  MrtrOptions,
  PresuppliedPolicy,
  RejectEvent,
} from './options.js';
export type {
  ArgsOf,
  AskOptions,
  ElicitAnswer,
  ElicitFormQuestion,
  ElicitUrlQuestion,
  Mrtr,
  MrtrPromptHandler,
  MrtrResourceHandler,
  MrtrServerOptions,
  MrtrToolHandler,
  Need,
  PromptConfig,
  QuestionOptions,
  ResourceConfig,
  ToolConfig,
  ToolNeed,
  UrlAnswer,
} from './types.js';
export {
  isTerminalStatus,
  TASKS_EXTENSION,
  type TaskError,
  type TaskHandle,
  type TaskInputRequest,
  TaskLimitError,
  type TaskOptions,
  type TaskRecord,
  type TaskStartOptions,
  type TaskStatus,
  type TaskStore,
  type TaskWork,
} from './tasks.js';
export { createHttpHandler, type HttpHandler, type HttpHandlerOptions, type LegacySessionOptions } from './http.js';
export { INVALID_STATE_MESSAGE, ROUND_IN_PROGRESS_MESSAGE } from './wire.js';

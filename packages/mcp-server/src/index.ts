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
 *
 * Tasks (the tasks extension): `@mrtr/mcp-server/tasks`. Serving over HTTP: `@mrtr/mcp-server/http`.
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
} from './rounds/answers.js';
export { createMrtr } from './mrtr.js';
export type { AnswerEvent, FlowCompletedEvent, MrtrEvent, MrtrOptions, RejectEvent } from './options.js';
export type { MissingCapabilityPolicy, PresuppliedPolicy } from './rounds/options.js';
export type { ElicitAnswer, ElicitFormQuestion, ElicitUrlQuestion, UrlAnswer } from './rounds/questions.js';
export type { AskOptions, Need, QuestionOptions, ToolNeed } from './rounds/types.js';
export { IDEMPOTENCY_KEY_META, IDEMPOTENCY_META, REPLAYED_META } from './rounds/keys.js';
export { INVALID_KEY_MESSAGE, INVALID_STATE_MESSAGE, ROUND_IN_PROGRESS_MESSAGE } from './protocol/wire.js';
export type {
  ArgsOf,
  IdempotencyConfig,
  Mrtr,
  MrtrPromptHandler,
  MrtrResourceHandler,
  MrtrServerOptions,
  MrtrToolHandler,
  PromptConfig,
  ResourceConfig,
  ToolConfig,
} from './types.js';

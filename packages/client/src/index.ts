export { IDEMPOTENCY_KEY_META, type MrtrCallOptions, type MrtrClient, REPLAYED_META, type Replayable, withMrtr } from './client.js';
export {
  type AnyMrtrClientError,
  InputUnsupportedError,
  MrtrClientError,
  type MrtrClientErrorCode,
  type MrtrClientErrorOptions,
  OutcomeUnknownError,
  ResponseLostError,
  RoundInProgressError,
  RoundsExceededError,
  TaskCancelledError,
  TaskPollsExceededError,
} from './errors.js';
export type { InputHandler, InputRequestInfo, MrtrClientOptions } from './options.js';
export { TASKS_EXTENSION } from './sdk.js';
export { IDEMPOTENCY_META } from './tools.js';

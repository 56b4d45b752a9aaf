/**
 * `@mrtr/core/tasks`: the tasks extension's `TaskStore` contract, its records and limits, and the helpers every
 * task store shares (argument checks, the update steps, the expiry and the room a full store makes).
 */
export {
  asTaskRecord,
  assertTaskChange,
  isTerminalStatus,
  type ParsedTaskStoreLimits,
  parseTaskStoreLimits,
  roomFromAtLeast,
  TASK_STORE_LIMIT_OPTIONS,
  type TaskError,
  type TaskInputRequest,
  type TaskRecord,
  type TaskStatus,
  type TaskStore,
  type TaskStoreLimits,
  taskExpiresAt,
} from './tasks/tasks.js';
export {
  assertTaskCreateArguments,
  assertTaskUpdateArguments,
  parseTaskUpdateOptions,
  runTaskUpdate,
  TASK_UPDATE_OPTIONS,
  type TaskUpdateOptions,
  type TaskUpdateSteps,
} from './tasks/options.js';

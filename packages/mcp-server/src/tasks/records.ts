/** What a task looks like on the wire: its fields, its error, and the messages a client gets about it. */
import { ProtocolError } from '@modelcontextprotocol/server';
import type { JsonValue } from '@mrtr/core';
import type { TaskLimitError } from '@mrtr/core/errors';
import type { TaskError, TaskRecord } from '@mrtr/core/tasks';
import { INTERNAL_ERROR, WireError } from '../protocol/wire.js';

const iso = (ms: number): string => new Date(ms).toISOString();

/** The flat task fields of `CreateTaskResult` and `tasks/get` (never `requestState`). */
export function taskFields(record: TaskRecord): Record<string, unknown> {
  const out: Record<string, unknown> = {
    taskId: record.taskId,
    status: record.status,
    createdAt: iso(record.createdAt),
    lastUpdatedAt: iso(record.lastUpdatedAt),
    ttlMs: record.ttlMs,
  };
  if (record.pollIntervalMs !== undefined) out.pollIntervalMs = record.pollIntervalMs;
  if (record.statusMessage !== undefined) out.statusMessage = record.statusMessage;
  return out;
}

/** The JSON-RPC error a failed task reports for what its work threw (never an internal message). */
export function taskErrorOf(error: unknown): TaskError {
  const wire = error instanceof WireError ? error.error : error instanceof ProtocolError ? error : undefined;
  if (wire !== undefined) {
    return { code: wire.code, message: wire.message, ...(wire.data !== undefined && { data: wire.data as JsonValue }) };
  }
  return { code: INTERNAL_ERROR, message: 'Internal error' };
}

export function checkStatusMessage(message: unknown): void {
  if (typeof message !== 'string' || message.length > 1_024)
    throw new TypeError('task.status: message must be a string of at most 1,024 characters');
}

/** The error a task reports when the process running it stopped before it finished. */
export const LOST_RUNNER: TaskError = { code: INTERNAL_ERROR, message: 'The server running this task stopped before it finished' };

/** What a client is told when a task store refuses a new task. */
export function taskLimitMessage(error: TaskLimitError): string {
  if (error.limit === 'live')
    return `Too many tasks in progress for this user (at most ${error.max}); wait for one to finish or cancel one`;
  if (error.limit === 'kept')
    return `Too many tasks kept for this user (at most ${error.max}); finished ones are kept until their ttlMs passes`;
  return 'Too many tasks on this server; try again later';
}

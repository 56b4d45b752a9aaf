import type { ServerContext } from '@modelcontextprotocol/server';
import { createStateGuard } from '@mrtr/core';
import { StateMalformedError, StateTooLargeError } from '@mrtr/core/errors';
import { type MrtrOptions, resolveOptions } from './options.js';
import { createRegistration } from './register.js';
import { createRounds } from './rounds/round.js';
import { createTaskRuntime } from './tasks/runtime.js';
import type { Mrtr, MrtrServerOptions } from './types.js';

/** Characters a token may contain (printable ASCII); anything else is rejected before decoding. */
const TOKEN_CHARS = /^[\x21-\x7e]+$/;

/**
 * Creates protected MRTR for an `McpServer`: spread `serverOptions` into the server options and register
 * each tool, prompt and resource that asks for input with `mrtr.registerTool(server, name, config, handler)`
 * (and `registerPrompt`, `registerResource`).
 *
 * Every round's state is sealed by the codec (built on `keys`) and carries the principal tag, the audience,
 * the request binding (method, tool/prompt name or resource URI, canonical-arguments digest), the flow id,
 * round and absolute deadline. With a `store`, each state is consumed when it is used.
 */
export function createMrtr(options: MrtrOptions): Mrtr {
  const resolved = resolveOptions(options);
  // With onEvent or onReject, the guard gets the adapter's event sink: both emit through it.
  const guard = createStateGuard(resolved.guard);
  const rounds = createRounds(guard, resolved);
  const { maxTokenBytes } = guard;

  const serverOptions: MrtrServerOptions = {
    requestState: {
      verify(state: string, ctx: ServerContext): undefined {
        // Cheap, opaque checks before dispatch; the SDK answers any throw with the frozen -32602.
        if (typeof state !== 'string' || state.length === 0 || (state.length <= maxTokenBytes && !TOKEN_CHARS.test(state))) {
          rounds.report('ERR_STATE_MALFORMED', ctx.mcpReq.method, undefined, typeof state === 'string' ? state.length : undefined);
          throw new StateMalformedError();
        }
        if (state.length > maxTokenBytes) {
          rounds.report('ERR_STATE_TOO_LARGE', ctx.mcpReq.method, undefined, state.length);
          throw new StateTooLargeError();
        }
        return undefined;
      },
    },
  };

  // Tasks are bound to the principal states are bound to (the fixed unauthenticated one included): the same policy.
  const tasks = options.tasks === undefined ? undefined : createTaskRuntime(options.tasks, resolved.principalOf, resolved.maxAnswerChars);
  const keys = { records: resolved.recordOutcomes, maxTtlMs: guard.ttlMs };
  return { serverOptions, guard, ...createRegistration(rounds, keys, tasks) };
}

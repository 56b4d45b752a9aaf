import type { McpServer, ResourceTemplate, ServerContext, Variables } from '@modelcontextprotocol/server';
import { keyTtlMs } from '@mrtr/core/adapter';
import { clientAddressOf } from './client-address.js';
import { isTaskMarker } from './rounds/handoff.js';
import { IDEMPOTENCY_META, type Idempotency } from './rounds/keys.js';
import type { RoundResult, Rounds } from './rounds/round.js';
import { WireError, escapeToWire } from './protocol/wire.js';
import { noteRetryAfter } from './retry-after.js';
import { gateTaskCall, parseTaskInput } from './tasks/gate.js';
import type { TaskRuntime } from './tasks/runtime.js';
import type { Mrtr, MrtrResourceHandler, ResourceConfig, ToolConfig } from './types.js';

const checkName = (kind: string, name: unknown): void => {
  if (typeof name !== 'string' || name.length === 0) throw new TypeError(`mrtr.${kind}: name must be a non-empty string`);
};
const checkHandler = (kind: string, handler: unknown): void => {
  if (typeof handler !== 'function') throw new TypeError(`mrtr.${kind}: handler must be a function`);
};
const checkServer = (kind: string, server: unknown): void => {
  if (server === null || typeof server !== 'object' || typeof (server as Record<string, unknown>)[kind] !== 'function') {
    throw new TypeError(`mrtr.${kind}: server must be an McpServer`);
  }
};

/**
 * `registerTool`/`registerPrompt` call `(ctx)` without an input schema and `(args, ctx)` with one; the SDK has parsed
 * the arguments against that schema, so they are what the handler's type says (`ArgsOf` its schema).
 */
const argsAndContext = (a: unknown, b: unknown): [never, ServerContext] =>
  (b === undefined ? [{}, a] : [a ?? {}, b]) as [never, ServerContext];

/** What a keyed tool needs of `createMrtr`: outcomes recorded in the store, and the guard's state lifetime. */
export interface KeySupport {
  /** `recordOutcomes` is on and the store records outcomes. */
  readonly records: boolean;
  /** The guard's `ttlMs`: the longest a key lives. */
  readonly maxTtlMs: number;
}

/** `ToolConfig.idempotency`, validated: fail closed when keys cannot be recorded. */
function parseIdempotency(value: unknown, keys: KeySupport): Idempotency | undefined {
  if (value === undefined || value === false) return undefined;
  const label = 'mrtr.registerTool: idempotency';
  if (value !== true && (value === null || typeof value !== 'object')) throw new TypeError(`${label} must be true or an object`);
  const { ttlMs, replayErrors = false } = value === true ? {} : (value as { ttlMs?: unknown; replayErrors?: unknown });
  if (typeof replayErrors !== 'boolean') throw new TypeError(`${label}.replayErrors must be a boolean`);
  if (!keys.records) {
    throw new TypeError(
      `${label} needs a store that records outcomes (claim/record: memory, Redis, SQL, …) and recordOutcomes not false: a key could not be answered from the record`,
    );
  }
  return { ttlMs: keyTtlMs(label, ttlMs, keys.maxTtlMs), replayErrors };
}

/** The registration methods of {@link Mrtr}. */
type Registration = Pick<Mrtr, 'registerTool' | 'registerPrompt' | 'registerResource'>;

/**
 * Registration through the SDK's own `registerTool`/`registerPrompt`/`registerResource`, with every state
 * bound to the name (or read URI) the call was registered under: the name is given once.
 */
export function createRegistration(rounds: Rounds, keys: KeySupport, tasks?: TaskRuntime): Registration {
  /** Throws what a prompt or resource read answers with, noting a `retryAfterMs` on its HTTP request. */
  const rethrow =
    (ctx: ServerContext) =>
    (error: unknown): never => {
      const wire = error instanceof WireError ? error.error : error;
      noteRetryAfter(ctx, wire);
      throw wire;
    };
  return {
    registerTool(server, name, config, handler) {
      checkServer('registerTool', server);
      checkName('registerTool', name);
      checkHandler('registerTool', handler);
      const { task: taskSupport, taskInput, reclaim, idempotency: keyed, ...sdkConfig } = (config ?? {}) as ToolConfig;
      if (reclaim !== undefined && typeof reclaim !== 'boolean') throw new TypeError('mrtr.registerTool: reclaim must be a boolean');
      const idempotency = parseIdempotency(keyed, keys);
      // Declared in tools/list, so that a client attaches a key to this tool's first-round calls.
      if (idempotency !== undefined) sdkConfig._meta = { ...sdkConfig._meta, [IDEMPOTENCY_META]: { ttlMs: idempotency.ttlMs } };
      if (taskSupport !== undefined && taskSupport !== 'optional' && taskSupport !== 'required') {
        throw new TypeError('mrtr.registerTool: task must be "optional" or "required"');
      }
      const needs = parseTaskInput(taskSupport, taskInput);
      if (taskSupport !== undefined && tasks === undefined) {
        throw new TypeError('mrtr.registerTool: a tool with task support needs createMrtr({ tasks: { store } })');
      }
      if (taskSupport !== undefined) tasks!.install(server);
      const session = () => server.server.getClientCapabilities();
      const callback = async (a: unknown, b?: unknown): Promise<RoundResult> => {
        const [args, ctx] = argsAndContext(a, b);
        try {
          // Decided before any round, on every request of the flow: whether this call may become a task, or its
          // refusal (-32021) when the task it needs cannot run, so no user answers a round for work that cannot go on.
          const task = taskSupport !== undefined && gateTaskCall(ctx, name, taskSupport, needs);
          return await rounds.run({
            method: 'tools/call',
            target: name,
            args,
            ctx,
            sessionCapabilities: session,
            reclaim,
            idempotency,
            invoke: async (need, who) => {
              const result = await handler(args, ctx, need);
              if (!isTaskMarker(result)) return result as RoundResult | undefined;
              if (taskSupport === undefined)
                throw new TypeError(`mrtr: ${name} returned need.task() but was registered without task support`);
              // The task is created inside the round, so an identical retry of this round gets the same task; it is
              // bound to the principal the round is bound to, and may ask only the kinds this request declared.
              return (await tasks!.start(result, {
                task,
                principal: who,
                address: clientAddressOf(ctx),
                can: (kind) => need.can(kind),
                needs,
              })) as RoundResult;
            },
          });
        } catch (error) {
          // McpServer would turn a thrown error into an `isError` tool result: escape to the wire instead.
          if (error instanceof WireError) {
            noteRetryAfter(ctx, error.error);
            return escapeToWire(error.error);
          }
          throw error;
        }
      };
      return server.registerTool(name, sdkConfig as never, callback as never);
    },

    registerPrompt(server, name, config, handler) {
      checkServer('registerPrompt', server);
      checkName('registerPrompt', name);
      checkHandler('registerPrompt', handler);
      const callback = async (a: unknown, b?: unknown): Promise<RoundResult> => {
        const [args, ctx] = argsAndContext(a, b);
        return await rounds
          .run({
            method: 'prompts/get',
            target: name,
            args,
            ctx,
            sessionCapabilities: () => server.server.getClientCapabilities(),
            invoke: (need) => handler(args, ctx, need) as RoundResult | undefined,
          })
          .catch(rethrow(ctx));
      };
      return server.registerPrompt(name, config as never, callback as never);
    },

    // One implementation of both overloads (a fixed URI, a template): typed as them.
    registerResource: function registerResource(
      server: McpServer,
      name: string,
      uriOrTemplate: string | ResourceTemplate,
      config: ResourceConfig,
      handler: MrtrResourceHandler,
    ) {
      checkServer('registerResource', server);
      checkName('registerResource', name);
      checkHandler('registerResource', handler);
      // A fixed resource is read with (uri, ctx); a template with (uri, variables, ctx). States bind to the URI read.
      const callback = async (uri: URL, a: unknown, b?: unknown): Promise<RoundResult> => {
        const [variables, ctx] = b === undefined ? [undefined, a as ServerContext] : [a as Variables, b as ServerContext];
        if (!(uri instanceof URL)) throw new TypeError('mrtr.registerResource: expected a URL');
        return await rounds
          .run({
            method: 'resources/read',
            target: uri.href,
            args: undefined,
            ctx,
            sessionCapabilities: () => server.server.getClientCapabilities(),
            invoke: (need) => handler(uri, ctx, need, variables) as RoundResult | undefined,
          })
          .catch(rethrow(ctx));
      };
      return server.registerResource(name, uriOrTemplate as never, config, callback as never);
    } as Registration['registerResource'],
  };
}

import {
  CLIENT_CAPABILITIES_META_KEY,
  type CallToolResult,
  type GetPromptResult,
  type InputRequiredResult,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  type ReadResourceResult,
  type ServerContext,
  type Variables,
} from '@modelcontextprotocol/server';
import {
  allowedKinds,
  capabilitiesFor,
  type InputRequestKind,
  type InputRequests,
  isServerFault,
  type JsonValue,
  MrtrError,
  type MrtrErrorCode,
  type OpenedState,
  type RequestContext,
  StateMalformedError,
  StateTooLargeError,
  createStateGuard,
} from '@mrtr/core';
import { askOptionsOf, type FlowData, isAskMarker, NeedState, parseFlowData } from './need.js';
import type {
  MissingCapabilityPolicy,
  Mrtr,
  MrtrOptions,
  MrtrPromptHandler,
  MrtrResourceHandler,
  MrtrServerOptions,
  MrtrToolHandler,
  ProtectedPromptCallback,
  ProtectedResourceCallback,
  ProtectedToolCallback,
  RejectEvent,
} from './types.js';

/** The one message every rejected state gets on the wire (the SDK's own frozen text). */
export const INVALID_STATE_MESSAGE = 'Invalid or expired requestState';

const INVALID_PARAMS = -32602;
const INVALID_REQUEST = -32600;
const INTERNAL_ERROR = -32603;
/** Characters a token may contain (printable ASCII); anything else is rejected before decoding. */
const TOKEN_CHARS = /^[\x21-\x7e]+$/;

type Awaitable<T> = T | Promise<T>;
type AnyResult = CallToolResult | GetPromptResult | ReadResourceResult;

/** An error that must reach the wire as a JSON-RPC error (not as a tool `isError` result). */
class WireError extends Error {
  readonly error: ProtocolError;
  constructor(error: ProtocolError) {
    super(error.message);
    this.error = error;
  }
}

/**
 * McpServer turns every error a tool callback throws into an `isError` result. To answer a rejected state
 * with a JSON-RPC error on `tools/call` too, the tool wrapper returns this input-required-shaped value
 * instead: McpServer passes input-required results through untouched, and the SDK's MRTR seam reads
 * `inputRequests` first (on both eras), which throws the wire error out of the request handler.
 */
function escapeToWire(error: ProtocolError): InputRequiredResult {
  const result = { resultType: 'input_required' } as InputRequiredResult;
  Object.defineProperty(result, 'inputRequests', {
    enumerable: true,
    get(): never {
      throw error;
    },
  });
  return result;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function defaultPrincipal(ctx: ServerContext): string | undefined {
  const auth = ctx.http?.authInfo;
  if (auth === undefined) return undefined;
  const sub = (auth.extra as Record<string, unknown> | undefined)?.sub;
  if (typeof sub === 'string' && sub.length > 0) return `sub:${sub}`;
  if (typeof auth.clientId === 'string' && auth.clientId.length > 0) return `client:${auth.clientId}`;
  return undefined;
}

function checkOptionalFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'function') throw new TypeError(`createMrtr: ${name} must be a function`);
}

/**
 * Creates protected MRTR for an `McpServer`: spread `serverOptions` into the server options and wrap each
 * tool, prompt and resource callback that asks for input with `tool`, `prompt` or `resource`.
 *
 * Every round's state is sealed by the codec and carries the principal tag, the audience, the request
 * binding (method, tool/prompt name or resource URI, canonical-arguments digest), the flow id, round and
 * absolute deadline. With a `store`, each state is consumed when it is used.
 */
export function createMrtr(options: MrtrOptions): Mrtr {
  if (!isObject(options)) throw new TypeError('createMrtr: options must be an object');
  const { onReject, principal, unauthenticated = 'reject', missingCapability = 'fail' } = options;
  checkOptionalFunction('principal', principal);
  checkOptionalFunction('onReject', onReject);
  let fixedPrincipal: string | undefined;
  if (unauthenticated !== 'reject') {
    if (!isObject(unauthenticated) || typeof unauthenticated.principal !== 'string' || unauthenticated.principal === '') {
      throw new TypeError('createMrtr: unauthenticated must be "reject" or { principal: string }');
    }
    fixedPrincipal = `fixed:${unauthenticated.principal}`;
  }
  if (missingCapability !== 'fail' && missingCapability !== 'degrade') {
    throw new TypeError('createMrtr: missingCapability must be "fail" or "degrade"');
  }
  const readPrincipal = principal ?? defaultPrincipal;

  const guard = createStateGuard({
    codec: options.codec,
    keys: options.keys,
    store: options.store,
    audience: options.audience,
    ...(options.ttlMs !== undefined && { ttlMs: options.ttlMs }),
    ...(options.flowTtlMs !== undefined && { flowTtlMs: options.flowTtlMs }),
    ...(options.maxRounds !== undefined && { maxRounds: options.maxRounds }),
    ...(options.clockSkewMs !== undefined && { clockSkewMs: options.clockSkewMs }),
    ...(options.maxTokenBytes !== undefined && { maxTokenBytes: options.maxTokenBytes }),
    ...(options.now !== undefined && { now: options.now }),
    principal: (request: RequestContext) => request.principal,
    allowAnonymous: false,
  });
  const maxTokenBytes = guard.maxTokenBytes;

  const report = (code: MrtrErrorCode, method: string, target: string | undefined): void => {
    if (onReject === undefined) return;
    const event: RejectEvent = { code, method, target };
    try {
      onReject(event);
    } catch {
      // A logging hook must never change the answer.
    }
  };

  /** Maps a guard error to the wire: store faults → -32603, everything else → the one opaque -32602. */
  const toWire = (error: unknown, method: string, target: string): WireError => {
    if (!MrtrError.is(error)) throw error;
    report(error.code, method, target);
    if (isServerFault(error.code)) return new WireError(new ProtocolError(INTERNAL_ERROR, 'Internal error'));
    return new WireError(new ProtocolError(INVALID_PARAMS, INVALID_STATE_MESSAGE, { reason: 'invalid_request_state' }));
  };

  const principalOf = (ctx: ServerContext, method: string, target: string): string => {
    const value = readPrincipal(ctx);
    if (typeof value === 'string' && value.length > 0) return value;
    if (value !== undefined && typeof value !== 'string') throw new TypeError('createMrtr: principal() must return a string');
    if (fixedPrincipal !== undefined) return fixedPrincipal;
    report('ERR_PRINCIPAL_REQUIRED', method, target);
    throw new WireError(new ProtocolError(INVALID_REQUEST, 'Authentication required'));
  };

  /** The kinds this request may receive; `undefined` on a 2025-era request (no envelope: the SDK shim gates). */
  const allowedFor = (ctx: ServerContext): ReadonlySet<InputRequestKind> | undefined => {
    const envelope = ctx.mcpReq.envelope as Record<string, unknown> | undefined;
    if (envelope === undefined) return undefined;
    return allowedKinds(envelope[CLIENT_CAPABILITIES_META_KEY] as Parameters<typeof allowedKinds>[0]);
  };

  async function run(
    method: string,
    target: string,
    args: unknown,
    ctx: ServerContext,
    invoke: (need: NeedState) => Awaitable<AnyResult | InputRequiredResult | undefined>,
  ): Promise<AnyResult | InputRequiredResult> {
    if (!isObject(ctx) || !isObject(ctx.mcpReq)) throw new TypeError('mrtr: called without a ServerContext');
    const request: RequestContext = { method, target, arguments: args, principal: principalOf(ctx, method, target) };

    // 1. Open the presented state: every check of the guard, then single use.
    const raw: unknown = ctx.mcpReq.requestState();
    let opened: OpenedState | undefined;
    let prior: FlowData | undefined;
    if (raw !== undefined) {
      try {
        if (typeof raw !== 'string') throw new StateMalformedError();
        opened = await guard.open(raw, request);
        prior = parseFlowData(opened.data);
        if (prior === undefined) throw new StateMalformedError();
      } catch (error) {
        throw toWire(error, method, target);
      }
    }

    // 2. Run the handler with the ask-style view of this round.
    const responses = isObject(ctx.mcpReq.inputResponses) ? ctx.mcpReq.inputResponses : {};
    const allowed = allowedFor(ctx);
    const need = new NeedState({
      round: opened === undefined ? 1 : opened.flow.round + 1,
      prior,
      responses,
      allowed,
    });
    const result = await invoke(need);

    let policy: MissingCapabilityPolicy = missingCapability;
    if (result === undefined) {
      if (need.questions.size === 0) throw new TypeError(`mrtr: handler for ${target} returned nothing and asked nothing`);
    } else if (isAskMarker(result)) {
      policy = askOptionsOf(result).missingCapability ?? missingCapability;
    } else if (isObject(result) && result.resultType === 'input_required') {
      throw new TypeError(`mrtr: handler for ${target} must return need.ask() instead of its own input_required result`);
    } else {
      return result;
    }

    // 3. Input needed: send what this client may receive, with a freshly sealed state.
    const inputRequests: InputRequests = {};
    const pins: Record<string, string> = {};
    const denied: InputRequestKind[] = [];
    for (const [key, question] of need.questions) {
      if (allowed !== undefined && !allowed.has(question.kind)) {
        denied.push(question.kind);
        continue;
      }
      inputRequests[key] = question.request;
      pins[key] = question.pin;
    }
    const asked = Object.keys(pins).length;
    if (denied.length > 0 && (policy === 'fail' || asked === 0)) {
      throw new WireError(
        new MissingRequiredClientCapabilityError(
          { requiredCapabilities: capabilitiesFor(denied) as never },
          'The client did not declare a capability this request needs',
        ),
      );
    }
    const data: FlowData = { a: Object.fromEntries(need.answers), p: pins };
    const kept = need.keptForNext;
    if (kept !== undefined) data.k = kept.value;
    let requestState: string;
    try {
      requestState = await guard.mint(data as unknown as JsonValue, request, { continues: opened });
    } catch (error) {
      if (!MrtrError.is(error)) throw error;
      if (error.code === 'ERR_FLOW_ROUNDS' || error.code === 'ERR_FLOW_EXPIRED') throw toWire(error, method, target);
      // Anything else while minting (e.g. the state outgrew maxTokenBytes) is a server fault.
      report(error.code, method, target);
      throw new WireError(new ProtocolError(INTERNAL_ERROR, 'Internal error'));
    }
    const out: InputRequiredResult = { resultType: 'input_required', requestState };
    if (asked > 0) out.inputRequests = inputRequests as NonNullable<InputRequiredResult['inputRequests']>;
    return out;
  }

  const serverOptions: MrtrServerOptions = {
    requestState: {
      verify(state: string, ctx: ServerContext): undefined {
        // Cheap, opaque checks before dispatch; the SDK answers any throw with the frozen -32602.
        if (typeof state !== 'string' || state.length === 0 || (state.length <= maxTokenBytes && !TOKEN_CHARS.test(state))) {
          report('ERR_STATE_MALFORMED', ctx.mcpReq.method, undefined);
          throw new StateMalformedError();
        }
        if (state.length > maxTokenBytes) {
          report('ERR_STATE_TOO_LARGE', ctx.mcpReq.method, undefined);
          throw new StateTooLargeError();
        }
        return undefined;
      },
    },
  };

  const checkName = (kind: string, name: unknown): string => {
    if (typeof name !== 'string' || name.length === 0) throw new TypeError(`mrtr.${kind}: name must be a non-empty string`);
    return name;
  };
  const checkHandler = (kind: string, handler: unknown): void => {
    if (typeof handler !== 'function') throw new TypeError(`mrtr.${kind}: handler must be a function`);
  };

  return {
    serverOptions,
    guard,
    tool<Args>(name: string, handler: MrtrToolHandler<Args>): ProtectedToolCallback<Args> {
      checkName('tool', name);
      checkHandler('tool', handler);
      const callback = async (a: unknown, b?: unknown): Promise<CallToolResult | InputRequiredResult> => {
        // registerTool without an inputSchema calls (ctx); with one, (args, ctx).
        const [args, ctx] = b === undefined ? [{}, a as ServerContext] : [a ?? {}, b as ServerContext];
        try {
          return (await run('tools/call', name, args, ctx, (need) => handler(args as Args, ctx, need))) as
            | CallToolResult
            | InputRequiredResult;
        } catch (error) {
          if (error instanceof WireError) return escapeToWire(error.error);
          throw error;
        }
      };
      return callback as ProtectedToolCallback<Args>;
    },
    prompt<Args>(name: string, handler: MrtrPromptHandler<Args>): ProtectedPromptCallback<Args> {
      checkName('prompt', name);
      checkHandler('prompt', handler);
      const callback = async (a: unknown, b?: unknown): Promise<GetPromptResult | InputRequiredResult> => {
        const [args, ctx] = b === undefined ? [{}, a as ServerContext] : [a ?? {}, b as ServerContext];
        try {
          return (await run('prompts/get', name, args, ctx, (need) => handler(args as Args, ctx, need))) as
            | GetPromptResult
            | InputRequiredResult;
        } catch (error) {
          if (error instanceof WireError) throw error.error;
          throw error;
        }
      };
      return callback as ProtectedPromptCallback<Args>;
    },
    resource(handler: MrtrResourceHandler): ProtectedResourceCallback {
      checkHandler('resource', handler);
      const callback = async (uri: URL, a: unknown, b?: unknown): Promise<ReadResourceResult | InputRequiredResult> => {
        // A fixed resource is read with (uri, ctx); a template with (uri, variables, ctx).
        const [variables, ctx] = b === undefined ? [undefined, a as ServerContext] : [a as Variables, b as ServerContext];
        if (!(uri instanceof URL)) throw new TypeError('mrtr.resource: expected a URL');
        try {
          return (await run('resources/read', uri.href, undefined, ctx, (need) => handler(uri, ctx, need, variables))) as
            | ReadResourceResult
            | InputRequiredResult;
        } catch (error) {
          if (error instanceof WireError) throw error.error;
          throw error;
        }
      };
      return callback as ProtectedResourceCallback;
    },
  };
}

import type { FlowClaims } from '../claims.js';
import type { JsonValue } from '../protocol.js';
import type { GuardContext } from './context.js';
import { createKeyState } from './key-state.js';
import { createMint, tokenOnly, withFlow, withKid } from './mint.js';
import { createReport } from './report.js';
import type { Scope } from './scope.js';
import { createSpend, type Single } from './spend.js';
import type { Admission, AdmitOptions, MintedState, MintOptions, OpenedState } from './types.js';
import { createVerify } from './verify.js';

/**
 * The operations of the guard, each on a request's scope: `StateGuard` makes a scope per call, `GuardRequest` one for
 * its request; both are these.
 */
export interface GuardOperations {
  open<P extends JsonValue>(scope: Scope, token: unknown): Promise<OpenedState<P>>;
  verify<P extends JsonValue>(scope: Scope, token: unknown): Promise<OpenedState<P>>;
  admit<P extends JsonValue>(scope: Scope, token: unknown, answers: JsonValue, options?: AdmitOptions): Promise<Admission<OpenedState<P>>>;
  mint<P extends JsonValue>(scope: Scope, data: P, options?: MintOptions): Promise<string>;
  mintFlow<P extends JsonValue>(scope: Scope, data: P, options?: MintOptions): Promise<MintedState>;
  /** A keyed first-round call claimed under (principal, target, key) for `ttlMs` (see `GuardRequest.claimKey`). */
  claimKey(scope: Scope, key: string, ttlMs: number | undefined): Promise<Admission<OpenedState>>;
  consume(state: OpenedState): Promise<void>;
  claim<P extends JsonValue>(state: OpenedState<P>, answers: JsonValue, options?: AdmitOptions): Promise<Admission<OpenedState<P>>>;
}

/** Every open of a state: the checks (1–8), then its single-use step. */
type Open = (scope: Scope, token: unknown, single: Single, answers?: JsonValue, options?: AdmitOptions) => Promise<unknown>;
/** Every mint: the next state sealed, its answer shaped by `out`. */
type MintIn = <P extends JsonValue, R>(
  scope: Scope,
  data: P,
  options: MintOptions | undefined,
  out: (token: string, flow: FlowClaims, kid: string) => R,
) => Promise<R>;

/**
 * The operations of the guard: the checks (`verify.ts`), the mint (`mint.ts`), the single-use step (`spend.ts`), and,
 * with `onEvent`, their reports (`report.ts`). Without `onEvent` no report is built: no event object, nothing timed.
 */
export function createOperations(ctx: GuardContext): GuardOperations {
  const verify = createVerify(ctx);
  const mint = createMint(ctx);
  const keyState = createKeyState(ctx);
  const { consume, claim, spend, claimKey } = createSpend(ctx);
  const report = ctx.events === undefined ? undefined : createReport(ctx, ctx.events);

  const openIn: Open =
    report === undefined
      ? async (scope, token, single, answers = null, options) => spend(await verify(scope, token), single, answers, options)
      : (scope, token, single, answers = null, options) =>
          report.open(
            scope,
            token,
            single,
            () => verify(scope, token),
            (state, dropped) => spend(state, single, answers, options, dropped),
          );
  const mintIn: MintIn =
    report === undefined
      ? async (scope, data, options, out) => mint(scope, data, options, out)
      : (scope, data, options, out) => report.mint(scope, () => mint(scope, data, options, withKid), options?.continues, out);
  const claimKeyIn =
    report === undefined
      ? async (scope: Scope, key: string, ttlMs: number | undefined) => claimKey(await keyState(scope, key, ttlMs))
      : (scope: Scope, key: string, ttlMs: number | undefined) => report.claimKey(scope, () => keyState(scope, key, ttlMs), claimKey);

  return {
    open: <P extends JsonValue>(scope: Scope, token: unknown) => openIn(scope, token, 'consume') as Promise<OpenedState<P>>,
    verify: <P extends JsonValue>(scope: Scope, token: unknown) => openIn(scope, token, 'verify') as Promise<OpenedState<P>>,
    admit: <P extends JsonValue>(scope: Scope, token: unknown, answers: JsonValue, options?: AdmitOptions) =>
      openIn(scope, token, 'claim', answers, options) as Promise<Admission<OpenedState<P>>>,
    /** `mint` answers the token alone: sealed without building the flow's answer object. */
    mint: (scope, data, options) => mintIn(scope, data, options, tokenOnly),
    mintFlow: (scope, data, options) => mintIn(scope, data, options, withFlow),
    claimKey: claimKeyIn,
    consume,
    claim: (state, answers, options) => claim(state, answers, ctx.holderOf(state), options),
  };
}
